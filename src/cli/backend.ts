import { createAzureBackend } from "../backends/azure/index.js";
import { createS3Backend } from "../backends/s3/index.js";
import { ConfigError, loadConfig } from "../config/load.js";
import type { BackendSpec, Config } from "../config/schema.js";
import { createLogger } from "../core/log.js";
import { CliError, EXIT, parse } from "./shared.js";

const USAGE = "usage: fencegate backend verify [--config FILE] [--bucket B]...";

/**
 * `fencegate backend verify`: checks, for every remote backend in the configuration, that its
 * store honours the conditional writes fencegate commits with (S3: If-None-Match: * and If-Match
 * on PutObject and CompleteMultipartUpload; Azure: on Put Blob, Put Block List and Set Blob
 * Metadata), in the buckets named with --bucket, or else the buckets the configuration routes to
 * it (and an S3 backend's verifyBucket). Prints one line per check; exits 1 when any fails.
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
      ...(spec.metaPrefix ? { metaPrefix: spec.metaPrefix } : {}),
      multipartSweepIntervalMs: 0,
      log,
    });
    try {
      return (await backend.verifyConditionalWrites(bucket)).findings;
    } finally {
      await backend.close();
    }
  }
  return [];
}
