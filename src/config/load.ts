import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import type { z } from "zod";
import { backendFieldNames, type Config, configSchema, leaseStoreFieldNames } from "./schema.js";

export class ConfigError extends Error {
  override name = "ConfigError";
}

type Env = Record<string, string | undefined>;

/**
 * The configuration: the YAML file named by FENCEGATE_CONFIG (if any), then the environment
 * variables of the contract on top, then validation. An invalid value stops start-up with a
 * message naming the field.
 */
export function loadConfig(env: Env = process.env, overrides: Record<string, unknown> = {}): Config {
  const file = env.FENCEGATE_CONFIG;
  const fromFile = file ? readYaml(file) : {};
  const merged = withSystemBucket(
    deepMerge(applyEnv(fromFile, env, file ? `the file ${file}` : "the default"), overrides),
    env,
  );
  const parsed = configSchema.safeParse(merged);
  if (!parsed.success) {
    const issues = parsed.error.issues.flatMap(describeIssue);
    throw new ConfigError(`invalid configuration${file ? ` in ${file}` : ""}:\n${issues.join("\n")}`);
  }
  return parsed.data;
}

/** One line per problem, naming the field: an unknown field by its full path. */
function describeIssue(issue: z.core.$ZodIssue): string[] {
  const at = issue.path.map(String);
  if (issue.code === "unrecognized_keys") {
    return issue.keys.map((k) => `  ${[...at, k].join(".")}: unknown field (check its spelling and place)`);
  }
  return [`  ${at.join(".") || "(root)"}: ${issue.message}`];
}

/**
 * FENCEGATE_SYSTEM_BUCKET names the system bucket of the default backend, whether that backend
 * comes from the file or from FENCEGATE_BACKEND; the fs backend has none, and ignores it.
 */
function withSystemBucket(merged: Record<string, unknown>, env: Env): Record<string, unknown> {
  const name = env.FENCEGATE_SYSTEM_BUCKET;
  const backend = merged.backend;
  if (!name || !isPlainObject(backend) || (backend.type !== "s3" && backend.type !== "azure")) return merged;
  return { ...merged, backend: { ...backend, systemBucket: name } };
}

function readYaml(file: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    throw new ConfigError(`cannot read configuration file ${file}: ${(e as Error).message}`);
  }
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (e) {
    throw new ConfigError(`configuration file ${file} is not valid YAML: ${(e as Error).message}`);
  }
  if (doc === null || doc === undefined) return {};
  if (typeof doc !== "object" || Array.isArray(doc)) {
    throw new ConfigError(`configuration file ${file} must hold a mapping at the top level`);
  }
  return doc as Record<string, unknown>;
}

/**
 * The file with the environment on top, field by field: a variable sets the field it names and
 * nothing else. FENCEGATE_BACKEND, FENCEGATE_REDIS_URL and FENCEGATE_REDLOCK_URLS may change a
 * section's type; the section then keeps those of the file's fields the new type has too.
 */
function applyEnv(fromFile: Record<string, unknown>, env: Env, source: string): Record<string, unknown> {
  const merged = deepMerge(fromFile, envOverrides(env));
  const backend = envBackend(env, fromFile.backend, source);
  if (backend) merged.backend = backend;
  const leaseStore = envLeaseStore(env, fromFile.leaseStore);
  if (leaseStore) merged.leaseStore = leaseStore;
  return merged;
}

function envOverrides(env: Env): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const set = (path: string[], value: unknown) => {
    let node = out;
    for (const p of path.slice(0, -1)) {
      node[p] ??= {};
      node = node[p] as Record<string, unknown>;
    }
    node[path.at(-1)!] = value;
  };
  if (env.FENCEGATE_HOST) set(["server", "host"], env.FENCEGATE_HOST);
  if (env.FENCEGATE_PORT !== undefined && env.FENCEGATE_PORT !== "") {
    set(["server", "port"], toInt("FENCEGATE_PORT", env.FENCEGATE_PORT));
  }
  if (env.FENCEGATE_DOMAIN) set(["server", "domain"], env.FENCEGATE_DOMAIN);
  if (env.FENCEGATE_REGION) set(["server", "region"], env.FENCEGATE_REGION);
  if (env.FENCEGATE_DATA_DIR) set(["dataDir"], env.FENCEGATE_DATA_DIR);
  if (env.FENCEGATE_GATEWAY_ID) set(["gatewayId"], env.FENCEGATE_GATEWAY_ID);
  if (env.FENCEGATE_LOG_LEVEL) set(["log", "level"], env.FENCEGATE_LOG_LEVEL);
  if (env.FENCEGATE_METRICS_PORT !== undefined && env.FENCEGATE_METRICS_PORT !== "") {
    set(["metrics", "port"], toInt("FENCEGATE_METRICS_PORT", env.FENCEGATE_METRICS_PORT));
  }
  if (env.FENCEGATE_METRICS_HOST) set(["metrics", "host"], env.FENCEGATE_METRICS_HOST);
  if (env.FENCEGATE_METRICS_TOKEN) set(["metrics", "token"], env.FENCEGATE_METRICS_TOKEN);
  if (env.FENCEGATE_FENCING) set(["fencing", "default"], env.FENCEGATE_FENCING);
  if (env.FENCEGATE_ACCESS_KEY_ID || env.FENCEGATE_SECRET_ACCESS_KEY) {
    if (!env.FENCEGATE_ACCESS_KEY_ID || !env.FENCEGATE_SECRET_ACCESS_KEY) {
      throw new ConfigError("FENCEGATE_ACCESS_KEY_ID and FENCEGATE_SECRET_ACCESS_KEY must be set together");
    }
    // The root credential comes first; keys from the file stay valid beside it.
    out.rootCredential = {
      accessKeyId: env.FENCEGATE_ACCESS_KEY_ID,
      secretAccessKey: env.FENCEGATE_SECRET_ACCESS_KEY,
    };
  }
  if (env.FENCEGATE_TOKEN_SIGNING_KEY) {
    set(["tokens"], { keys: [{ id: "env", secret: env.FENCEGATE_TOKEN_SIGNING_KEY }], activeKeyId: "env" });
  }
  return out;
}

/** The default backend's fields named by the environment, over the file's backend section. */
function envBackend(env: Env, fileBackend: unknown, source: string): Record<string, unknown> | undefined {
  const type = env.FENCEGATE_BACKEND || undefined;
  if (type !== undefined && !isBackendType(type)) {
    throw new ConfigError(`FENCEGATE_BACKEND: expected fs, s3 or azure, got "${type}"`);
  }
  const s3: Record<string, unknown> = {};
  if (env.FENCEGATE_S3_ENDPOINT) s3.endpoint = env.FENCEGATE_S3_ENDPOINT;
  if (env.FENCEGATE_S3_REGION) s3.region = env.FENCEGATE_S3_REGION;
  if (env.FENCEGATE_S3_ACCESS_KEY_ID) s3.accessKeyId = env.FENCEGATE_S3_ACCESS_KEY_ID;
  if (env.FENCEGATE_S3_SECRET_ACCESS_KEY) s3.secretAccessKey = env.FENCEGATE_S3_SECRET_ACCESS_KEY;
  if (env.FENCEGATE_S3_FORCE_PATH_STYLE) {
    s3.forcePathStyle = toBool("FENCEGATE_S3_FORCE_PATH_STYLE", env.FENCEGATE_S3_FORCE_PATH_STYLE);
  }
  const azure: Record<string, unknown> = {};
  if (env.FENCEGATE_AZURE_CONNECTION_STRING) azure.connectionString = env.FENCEGATE_AZURE_CONNECTION_STRING;
  if (type === undefined && Object.keys(s3).length === 0 && Object.keys(azure).length === 0) return undefined;

  const file = isPlainObject(fileBackend) ? fileBackend : {};
  const fileType = typeof file.type === "string" ? file.type : "fs";
  const effective = type ?? fileType;
  const fields = { s3, azure };
  for (const [kind, named] of Object.entries(fields)) {
    if (kind === effective || Object.keys(named).length === 0) continue;
    const variables = Object.keys(env)
      .filter((n) => n.startsWith(kind === "s3" ? "FENCEGATE_S3_" : "FENCEGATE_AZURE_") && env[n])
      .join(", ");
    throw new ConfigError(
      `${variables} set, but the backend is ${effective} (${type !== undefined ? "FENCEGATE_BACKEND" : source}): ` +
        `set FENCEGATE_BACKEND=${kind}, or unset ${variables}`,
    );
  }
  const kept = effective === fileType ? file : keepApplicable(file, backendFieldNames(effective));
  const own = effective === "s3" ? s3 : effective === "azure" ? azure : {};
  const backend: Record<string, unknown> = { ...kept, ...own, type: effective };
  if (effective === "azure" && fileType !== "azure" && backend.connectionString === undefined) {
    throw new ConfigError(
      "FENCEGATE_BACKEND=azure needs FENCEGATE_AZURE_CONNECTION_STRING (or a file whose backend is azure)",
    );
  }
  return backend;
}

/** The lease store named by FENCEGATE_REDIS_URL or FENCEGATE_REDLOCK_URLS, over the file's. */
function envLeaseStore(env: Env, fileStore: unknown): Record<string, unknown> | undefined {
  if (env.FENCEGATE_REDIS_URL && env.FENCEGATE_REDLOCK_URLS) {
    throw new ConfigError(
      "set FENCEGATE_REDIS_URL (one Redis) or FENCEGATE_REDLOCK_URLS (several), not both",
    );
  }
  let own: Record<string, unknown>;
  if (env.FENCEGATE_REDIS_URL) own = { type: "redis", url: env.FENCEGATE_REDIS_URL };
  else if (env.FENCEGATE_REDLOCK_URLS) {
    const urls = env.FENCEGATE_REDLOCK_URLS.split(",")
      .map((u) => u.trim())
      .filter(Boolean);
    own = { type: "redlock", urls };
  } else return undefined;
  const file = isPlainObject(fileStore) ? fileStore : {};
  const kept = file.type === own.type ? file : keepApplicable(file, leaseStoreFieldNames(own.type as string));
  return { ...kept, ...own };
}

/** The fields of a section that a section of another type has too (the type itself excepted). */
function keepApplicable(section: Record<string, unknown>, names: readonly string[]): Record<string, unknown> {
  return Object.fromEntries(Object.entries(section).filter(([k]) => k !== "type" && names.includes(k)));
}

function isBackendType(type: string): type is "fs" | "s3" | "azure" {
  return type === "fs" || type === "s3" || type === "azure";
}

function toInt(name: string, value: string): number {
  if (!/^\d+$/.test(value.trim())) throw new ConfigError(`${name}: expected a whole number, got "${value}"`);
  return Number(value.trim());
}

function toBool(name: string, value: string): boolean {
  const v = value.trim().toLowerCase();
  if (["1", "true", "yes"].includes(v)) return true;
  if (["0", "false", "no"].includes(v)) return false;
  throw new ConfigError(`${name}: expected true or false, got "${value}"`);
}

/**
 * b over a, field by field; arrays and scalars of b replace a's, and so does a section of
 * another `type` (a backend, a lease store).
 */
function deepMerge(a: Record<string, unknown>, b: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...a };
  for (const [k, v] of Object.entries(b)) {
    const prev = out[k];
    const sameKind =
      isPlainObject(prev) && isPlainObject(v) && (v.type === undefined || v.type === prev.type);
    out[k] = sameKind ? deepMerge(prev, v) : v;
  }
  return out;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
