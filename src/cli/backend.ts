import { randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import { createAzureBackend } from "../backends/azure/index.js";
import { createS3Backend } from "../backends/s3/index.js";
import type { StorageBackend } from "../backends/storage-backend.js";
import { ConfigError, loadConfig } from "../config/load.js";
import type { BackendSpec, Config } from "../config/schema.js";
import { isDomainError } from "../core/errors.js";
import { createLogger } from "../core/log.js";
import { fencedCommit } from "../fence/commit.js";
import { CliError, EXIT, parse } from "./shared.js";

const USAGE = "usage: fencegate backend verify [--config FILE] [--bucket B]...";

/**
 * `fencegate backend verify`: checks, for every remote backend in the configuration, that its
 * store honours the conditional writes fencegate commits with (If-None-Match: * and If-Match on
 * PutObject and CompleteMultipartUpload), in the buckets named with --bucket, or else the
 * buckets the configuration routes to it. Prints one line per check; exits 1 when any fails.
 */
export async function backendCommand(args: string[]): Promise<number> {
  const [sub, ...rest] = args;
  if (sub !== "verify") throw new CliError(USAGE, EXIT.usage);
  const { values } = parse(rest, { config: { type: "string" }, bucket: { type: "string", multiple: true } });
  const env = { ...process.env };
  if (values.config) env.FENCEGATE_CONFIG = values.config;
  let config: Config;
  try {
    config = loadConfig(env);
  } catch (e) {
    if (e instanceof ConfigError) throw new CliError(e.message, 78);
    throw e;
  }
  const specs: Array<[string, BackendSpec]> = [
    ["default", config.backend],
    ...Object.entries(config.backends),
  ];
  let failed = false;
  for (const [name, spec] of specs) {
    const label = `${name} (${spec.type}${spec.type === "s3" ? ` ${spec.endpoint || "Amazon S3"}` : ""})`;
    if (spec.type === "fs") {
      process.stdout.write(
        `${label}: conditional writes are fencegate's own database transactions: nothing to check\n`,
      );
      continue;
    }
    const buckets = bucketsOf(name, spec, config, values.bucket ?? []);
    if (buckets.length === 0) {
      process.stdout.write(`${label}: no bucket to check (give --bucket, or route buckets to it)\n`);
      failed = true;
      continue;
    }
    for (const bucket of buckets) {
      const findings = await verify(spec, bucket).catch((e: unknown) => [
        `could not check: ${(e as Error).message ?? String(e)}`,
      ]);
      failed ||= findings.length > 0;
      process.stdout.write(
        findings.length === 0
          ? `${label} bucket ${bucket}: ok, honours If-None-Match and If-Match\n`
          : `${label} bucket ${bucket}: NOT SAFE: ${findings.join("; ")}\n`,
      );
    }
  }
  return failed ? 1 : 0;
}

function bucketsOf(name: string, spec: BackendSpec, config: Config, given: string[]): string[] {
  if (given.length > 0) return given;
  const routed = Object.entries(config.buckets)
    .filter(([, r]) => r.backend === name)
    .map(([bucket, r]) => r.target ?? bucket);
  const scratch = spec.type === "s3" && spec.verifyBucket ? [spec.verifyBucket] : [];
  return [...new Set([...scratch, ...routed])];
}

async function verify(spec: BackendSpec, bucket: string): Promise<string[]> {
  const log = createLogger("silent");
  if (spec.type === "s3") {
    const backend = createS3Backend({
      ...(spec.endpoint ? { endpoint: spec.endpoint } : {}),
      region: spec.region,
      ...(spec.accessKeyId && spec.secretAccessKey
        ? { credentials: { accessKeyId: spec.accessKeyId, secretAccessKey: spec.secretAccessKey } }
        : {}),
      forcePathStyle: spec.forcePathStyle,
      requestTimeoutMs: spec.requestTimeoutMs,
      ...(spec.metaPrefix ? { metaPrefix: spec.metaPrefix } : {}),
      verify: false,
      log,
    });
    try {
      return (await backend.verifyConditionalWrites(bucket)).findings;
    } finally {
      await backend.close();
    }
  }
  if (spec.type === "azure") {
    const backend = createAzureBackend({
      ...(spec.connectionString ? { connectionString: spec.connectionString } : {}),
      ...(spec.accountUrl ? { accountUrl: spec.accountUrl } : {}),
      ...(spec.accountName ? { accountName: spec.accountName } : {}),
      ...(spec.accountKey ? { accountKey: spec.accountKey } : {}),
      ...(spec.sasToken ? { sasToken: spec.sasToken } : {}),
      ...(spec.defaultCredential ? { defaultCredential: true } : {}),
      requestTimeoutMs: spec.requestTimeoutMs,
      multipartSweepIntervalMs: 0,
      log,
    });
    try {
      return await probeThroughBackend(backend, bucket);
    } finally {
      await backend.close();
    }
  }
  return [];
}

/** Writes a probe object with the conditions every commit relies on, and removes it. */
async function probeThroughBackend(backend: StorageBackend, bucket: string): Promise<string[]> {
  const findings: string[] = [];
  const key = `.fencegate/probes/${randomBytes(8).toString("hex")}`;
  const put = (body: string, conditions: { ifMatch?: string; ifNoneMatch?: string }) =>
    backend.putObject(
      {
        bucket,
        key,
        body: { stream: bodyOf(body), digest: Promise.resolve({ size: body.length, checksums: {} }) },
        metadata: { headers: {}, userMetadata: {} },
      },
      fencedCommit(null, { conditions }),
    );
  const refused = (p: Promise<unknown>) =>
    p.then(
      () => false,
      (e: unknown) => isDomainError(e) && e.code === "PreconditionFailed",
    );
  try {
    const first = await put("probe 1", { ifNoneMatch: "*" });
    if (!(await refused(put("probe 2", { ifNoneMatch: "*" }))))
      findings.push("ignores If-None-Match on a write");
    if (!(await refused(put("probe 3", { ifMatch: '"00000000000000000000000000000000"' })))) {
      findings.push("ignores If-Match on a write");
    }
    await put("probe 4", { ifMatch: first.etag }).catch(() => findings.push("refuses a matching If-Match"));
  } finally {
    await backend.deleteObject({ bucket, key }, fencedCommit(null)).catch(() => undefined);
  }
  return findings;
}

function bodyOf(text: string) {
  // A one-chunk stream, as the S3 layer hands bodies over.
  return Readable.from([Buffer.from(text)]);
}
