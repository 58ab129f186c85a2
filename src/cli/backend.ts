import { createAzureBackend } from "../backends/azure/index.js";
import { createS3Backend } from "../backends/s3/index.js";
import { ConfigError, loadConfig } from "../config/load.js";
import type { BackendSpec, Config } from "../config/schema.js";
import { createLogger } from "../core/log.js";
import { azureConnection, s3Connection } from "../server/store-connection.js";
import { CliError, EXIT } from "./shared.js";

/**
 * `fencegate backend verify`: checks, for every remote backend in the configuration, that its
 * store honours the conditional writes fencegate commits with (S3: If-None-Match: * and If-Match
 * on PutObject and CompleteMultipartUpload; Azure: on Put Blob, Put Block List and Set Blob
 * Metadata), in the buckets named with --bucket, or else the buckets the configuration routes to
 * it (and an S3 backend's verifyBucket). Prints one line per check; exits 1 when any fails.
 */
export async function backendCommand(values: { config?: string; bucket?: string[] }): Promise<number> {
  const env = { ...process.env };
  if (values.config) env.FENCEGATE_CONFIG = values.config;
  let config: Config;
  try {
    config = loadConfig(env);
  } catch (e) {
    if (e instanceof ConfigError) throw new CliError(e.message, EXIT.config);
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
      const result = await verify(spec, bucket).catch(
        (e: unknown): Verdict => ({ kind: "unchecked", why: (e as Error).message ?? String(e) }),
      );
      failed ||= result.kind !== "ok";
      process.stdout.write(`${label} bucket ${bucket}: ${verdictLine(result)}\n`);
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

/** What a check found: safe, unsafe (what the store ignores), no such bucket, or no answer. */
type Verdict =
  | { kind: "ok" }
  | { kind: "unsafe"; findings: string[] }
  | { kind: "missing" }
  | { kind: "unchecked"; why: string };

function verdictLine(v: Verdict): string {
  switch (v.kind) {
    case "ok":
      return "ok, honours If-None-Match and If-Match";
    case "unsafe":
      return `NOT SAFE: ${v.findings.join("; ")}`;
    case "missing":
      return "does not exist in this store: nothing was checked (create it, or name another with --bucket)";
    case "unchecked":
      return `could not check: ${v.why}`;
  }
}

type Checked = {
  headBucket(bucket: string): Promise<unknown>;
  verifyConditionalWrites(bucket: string): Promise<{ findings: string[] }>;
};

/** The bucket first (a missing one is said so, not taken for a store that ignores conditions). */
async function check(backend: Checked, bucket: string): Promise<Verdict> {
  try {
    await backend.headBucket(bucket);
  } catch (e) {
    if ((e as { code?: string }).code === "NoSuchBucket") return { kind: "missing" };
    throw e;
  }
  const { findings } = await backend.verifyConditionalWrites(bucket);
  return findings.length === 0 ? { kind: "ok" } : { kind: "unsafe", findings };
}

async function verify(spec: BackendSpec, bucket: string): Promise<Verdict> {
  const log = createLogger("silent");
  const backend =
    spec.type === "s3"
      ? createS3Backend({
          ...s3Connection(spec),
          verify: false,
          log,
        })
      : spec.type === "azure"
        ? createAzureBackend({
            ...azureConnection(spec),
            multipartSweepIntervalMs: 0,
            log,
          })
        : undefined;
  if (!backend) return { kind: "ok" };
  try {
    return await check(backend, bucket);
  } finally {
    await backend.close();
  }
}
