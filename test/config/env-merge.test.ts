import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config/load.js";
import { tempDir } from "../support/temp.js";

const CONFIG_DIR = join(import.meta.dirname, "../../config");
const dir = tempDir();
afterAll(() => dir.cleanup());
let n = 0;
function yamlFile(text: string): string {
  const file = join(dir.path, `merge-${n++}.yaml`);
  writeFileSync(file, text);
  return file;
}
function configError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    return e as ConfigError;
  }
  throw new Error("expected a ConfigError");
}

const S3_FILE = `
backend:
  type: s3
  endpoint: http://file-endpoint:9000
  region: eu-west-1
  accessKeyId: file-key
  secretAccessKey: file-secret
  forcePathStyle: true
  verifyBucket: scratch
  requestTimeoutMs: 5000
  systemBucket: file-system
`;

describe("environment variables override the file field by field", () => {
  it("FENCEGATE_S3_* apply to the s3 backend of config/redis-replicas.yaml, which keeps its other fields", () => {
    const c = loadConfig({
      FENCEGATE_CONFIG: join(CONFIG_DIR, "redis-replicas.yaml"),
      FENCEGATE_S3_ENDPOINT: "http://minio.internal:9000",
      FENCEGATE_S3_ACCESS_KEY_ID: "env-key",
      FENCEGATE_S3_SECRET_ACCESS_KEY: "env-secret",
      FENCEGATE_S3_FORCE_PATH_STYLE: "true",
    });
    expect(c.backend).toEqual({
      type: "s3",
      endpoint: "http://minio.internal:9000",
      region: "eu-west-1", // from the file
      accessKeyId: "env-key",
      secretAccessKey: "env-secret",
      forcePathStyle: true,
      systemBucket: "fencegate-system", // from the file
      requestTimeoutMs: 30_000,
      gcIntervalMs: 3_600_000,
      gcGraceMs: 3_600_000,
    });
    // The rest of the file is there too.
    expect(c.server.host).toBe("0.0.0.0");
    expect(c.leaseStore).toMatchObject({ type: "redis", url: "redis://redis.internal:6379" });
  });

  it("FENCEGATE_S3_REGION alone changes the region and nothing else", () => {
    const file = yamlFile(S3_FILE);
    const c = loadConfig({ FENCEGATE_CONFIG: file, FENCEGATE_S3_REGION: "us-west-2" });
    expect(c.backend).toMatchObject({
      type: "s3",
      endpoint: "http://file-endpoint:9000",
      region: "us-west-2",
      accessKeyId: "file-key",
      secretAccessKey: "file-secret",
      forcePathStyle: true,
      verifyBucket: "scratch",
      requestTimeoutMs: 5000,
      systemBucket: "file-system",
    });
  });

  it("FENCEGATE_BACKEND=s3 over a file whose backend is s3 keeps the file's credentials, forcePathStyle and verifyBucket", () => {
    const file = yamlFile(S3_FILE);
    const c = loadConfig({ FENCEGATE_CONFIG: file, FENCEGATE_BACKEND: "s3" });
    expect(c.backend).toMatchObject({
      type: "s3",
      endpoint: "http://file-endpoint:9000",
      accessKeyId: "file-key",
      secretAccessKey: "file-secret",
      forcePathStyle: true,
      verifyBucket: "scratch",
    });
    const overridden = loadConfig({
      FENCEGATE_CONFIG: file,
      FENCEGATE_BACKEND: "s3",
      FENCEGATE_S3_FORCE_PATH_STYLE: "false",
      FENCEGATE_SYSTEM_BUCKET: "env-system",
    });
    expect(overridden.backend).toMatchObject({
      forcePathStyle: false,
      accessKeyId: "file-key",
      verifyBucket: "scratch",
      systemBucket: "env-system",
    });
  });

  it("a backend type changed by FENCEGATE_BACKEND keeps only the file's fields that the new type has", () => {
    const file = yamlFile(S3_FILE);
    const conn = "DefaultEndpointsProtocol=http;AccountName=a;AccountKey=a2V5;BlobEndpoint=http://x";
    const c = loadConfig({
      FENCEGATE_CONFIG: file,
      FENCEGATE_BACKEND: "azure",
      FENCEGATE_AZURE_CONNECTION_STRING: conn,
    });
    expect(c.backend).toEqual({
      type: "azure",
      connectionString: conn,
      requestTimeoutMs: 5000, // both types have it
      systemBucket: "file-system", // both types have it
    });
    expect(loadConfig({ FENCEGATE_CONFIG: file, FENCEGATE_BACKEND: "fs" }).backend).toEqual({ type: "fs" });
  });

  it("FENCEGATE_AZURE_CONNECTION_STRING applies to the azure backend of a file, which keeps its other fields", () => {
    const file = join(CONFIG_DIR, "azure.yaml");
    const conn = "DefaultEndpointsProtocol=http;AccountName=b;AccountKey=a2V5;BlobEndpoint=http://y";
    const c = loadConfig({ FENCEGATE_CONFIG: file, FENCEGATE_AZURE_CONNECTION_STRING: conn });
    expect(c.backend).toMatchObject({
      type: "azure",
      connectionString: conn,
      metaPrefix: ".fencegate/",
      systemBucket: "fencegate-system",
    });
  });

  it("refuses backend variables for a backend of another type, naming them", () => {
    const e = configError(() => loadConfig({ FENCEGATE_S3_ENDPOINT: "http://x:9000" }));
    expect(e.message).toContain("FENCEGATE_S3_ENDPOINT");
    expect(e.message).toContain("FENCEGATE_BACKEND=s3");
    const azureFile = join(CONFIG_DIR, "azure.yaml");
    expect(
      configError(() => loadConfig({ FENCEGATE_CONFIG: azureFile, FENCEGATE_S3_REGION: "eu-west-1" }))
        .message,
    ).toContain(azureFile);
  });

  it("FENCEGATE_REDIS_URL keeps the file's Redis settings; a change to Redlock keeps what Redlock has", () => {
    const file = yamlFile(`
leaseStore:
  type: redis
  url: redis://file:6379
  keyPrefix: "{team}"
  commandTimeoutMs: 900
  unsafeSettings: warn
`);
    expect(
      loadConfig({ FENCEGATE_CONFIG: file, FENCEGATE_REDIS_URL: "redis://env:6379" }).leaseStore,
    ).toEqual({
      type: "redis",
      url: "redis://env:6379",
      keyPrefix: "{team}",
      commandTimeoutMs: 900,
      unsafeSettings: "warn",
      quarantineAfterLoss: false,
    });
    expect(
      loadConfig({ FENCEGATE_CONFIG: file, FENCEGATE_REDLOCK_URLS: "redis://a:1,redis://b:2,redis://c:3" })
        .leaseStore,
    ).toEqual({
      type: "redlock",
      urls: ["redis://a:1", "redis://b:2", "redis://c:3"],
      keyPrefix: "{team}",
      commandTimeoutMs: 900,
    });
    expect(
      configError(() =>
        loadConfig({ FENCEGATE_REDIS_URL: "redis://a:1", FENCEGATE_REDLOCK_URLS: "redis://b:2" }),
      ).message,
    ).toContain("not both");
  });

  it("FENCEGATE_TOKEN_SIGNING_KEY and the root credential leave the file's other sections alone", () => {
    const file = yamlFile(`
server: { port: 9123, domain: s3.file.test }
credentials:
  - { accessKeyId: file-key, secretAccessKey: file-secret-1 }
leases: { maxTtlMs: 60000 }
`);
    const c = loadConfig({
      FENCEGATE_CONFIG: file,
      FENCEGATE_HOST: "127.0.0.3",
      FENCEGATE_ACCESS_KEY_ID: "root-key",
      FENCEGATE_SECRET_ACCESS_KEY: "root-secret-1",
      FENCEGATE_TOKEN_SIGNING_KEY: "0123456789abcdef0123",
    });
    expect(c.server).toMatchObject({ host: "127.0.0.3", port: 9123, domain: "s3.file.test" });
    expect(c.credentials?.map((k) => k.accessKeyId)).toEqual(["file-key"]);
    expect(c.rootCredential?.accessKeyId).toBe("root-key");
    expect(c.leases.maxTtlMs).toBe(60_000);
  });
});

describe("unknown fields", () => {
  it("are errors that name the field by its full path", () => {
    const cases: [string, string][] = [
      ["server:\n  hots: 127.0.0.1\n", "server.hots: unknown field"],
      ["unknownTopLevel: 1\n", "unknownTopLevel: unknown field"],
      ["backend:\n  type: s3\n  regoin: eu-west-1\n", "backend.regoin: unknown field"],
      ["leaseStore:\n  type: redis\n  url: redis://x:1\n  timeout: 5\n", "leaseStore.timeout: unknown field"],
      ["leaseStore:\n  type: embedded\n  url: redis://x:1\n", "leaseStore.url: unknown field"],
      [
        "tokens:\n  keys:\n    - { id: k1, secret: 0123456789abcdef0, activ: true }\n",
        "tokens.keys.0.activ: unknown field",
      ],
      [
        "audit:\n  retention:\n    maxRecords: 5000\n    archiveDir: /a\n    maxAge: 1\n",
        "audit.retention.maxAge",
      ],
    ];
    for (const [yaml, expected] of cases) {
      const file = yamlFile(yaml);
      expect(configError(() => loadConfig({ FENCEGATE_CONFIG: file })).message, yaml).toContain(expected);
    }
  });
});

describe("metrics settings", () => {
  const METRICS_FILE = `
metrics:
  port: 9701
  host: 0.0.0.0
  token: file-token
`;

  it("come from the file's metrics block", () => {
    const c = loadConfig({ FENCEGATE_CONFIG: yamlFile(METRICS_FILE) });
    expect(c.metrics).toEqual({ port: 9701, host: "0.0.0.0", token: "file-token" });
    expect(loadConfig({}).metrics).toEqual({});
  });

  it("FENCEGATE_METRICS_* override the file field by field, keeping the fields they do not name", () => {
    const file = yamlFile(METRICS_FILE);
    expect(loadConfig({ FENCEGATE_CONFIG: file, FENCEGATE_METRICS_PORT: "0" }).metrics).toEqual({
      port: 0,
      host: "0.0.0.0",
      token: "file-token",
    });
    expect(
      loadConfig({
        FENCEGATE_CONFIG: file,
        FENCEGATE_METRICS_TOKEN: "env-token",
        FENCEGATE_METRICS_HOST: "::",
      }).metrics,
    ).toEqual({ port: 9701, host: "::", token: "env-token" });
    expect(loadConfig({ FENCEGATE_METRICS_PORT: "9800" }).metrics).toEqual({ port: 9800 });
  });

  it("refuses a bad port or an unknown field, naming it, and never repeats the token", () => {
    expect(configError(() => loadConfig({ FENCEGATE_METRICS_PORT: "http" })).message).toMatch(
      /FENCEGATE_METRICS_PORT: expected a whole number/,
    );
    expect(configError(() => loadConfig({ FENCEGATE_METRICS_PORT: "70000" })).message).toMatch(
      /metrics\.port/,
    );
    const unknown = configError(() =>
      loadConfig({ FENCEGATE_CONFIG: yamlFile("metrics:\n  token: secret-token-1\n  path: /m\n") }),
    );
    expect(unknown.message).toContain("metrics.path: unknown field");
    expect(unknown.message).not.toContain("secret-token-1");
  });
});
