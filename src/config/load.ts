import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { type Config, configSchema } from "./schema.js";

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
  const merged = withSystemBucket(deepMerge(deepMerge(fromFile, envOverrides(env)), overrides), env);
  const parsed = configSchema.safeParse(merged);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `  ${i.path.join(".") || "(root)"}: ${i.message}`);
    throw new ConfigError(`invalid configuration${file ? ` in ${file}` : ""}:\n${issues.join("\n")}`);
  }
  return parsed.data;
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
  const backend = env.FENCEGATE_BACKEND;
  if (backend === "fs") set(["backend"], { type: "fs" });
  else if (backend === "s3") {
    set(["backend"], {
      type: "s3",
      ...(env.FENCEGATE_S3_ENDPOINT ? { endpoint: env.FENCEGATE_S3_ENDPOINT } : {}),
      ...(env.FENCEGATE_S3_REGION ? { region: env.FENCEGATE_S3_REGION } : {}),
      ...(env.FENCEGATE_S3_ACCESS_KEY_ID ? { accessKeyId: env.FENCEGATE_S3_ACCESS_KEY_ID } : {}),
      ...(env.FENCEGATE_S3_SECRET_ACCESS_KEY ? { secretAccessKey: env.FENCEGATE_S3_SECRET_ACCESS_KEY } : {}),
      ...(env.FENCEGATE_S3_FORCE_PATH_STYLE
        ? { forcePathStyle: toBool("FENCEGATE_S3_FORCE_PATH_STYLE", env.FENCEGATE_S3_FORCE_PATH_STYLE) }
        : {}),
    });
  } else if (backend === "azure") {
    set(["backend"], { type: "azure", connectionString: env.FENCEGATE_AZURE_CONNECTION_STRING ?? "" });
  } else if (backend) {
    throw new ConfigError(`FENCEGATE_BACKEND: expected fs, s3 or azure, got "${backend}"`);
  }
  if (env.FENCEGATE_REDIS_URL) set(["leaseStore"], { type: "redis", url: env.FENCEGATE_REDIS_URL });
  if (env.FENCEGATE_REDLOCK_URLS) {
    const urls = env.FENCEGATE_REDLOCK_URLS.split(",")
      .map((u) => u.trim())
      .filter(Boolean);
    set(["leaseStore"], { type: "redlock", urls });
  }
  return out;
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

function deepMerge(a: Record<string, unknown>, b: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...a };
  for (const [k, v] of Object.entries(b)) {
    const prev = out[k];
    out[k] =
      isPlainObject(prev) &&
      isPlainObject(v) &&
      k !== "backend" &&
      (k !== "leaseStore" || prev.type === v.type)
        ? deepMerge(prev, v)
        : v;
  }
  return out;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
