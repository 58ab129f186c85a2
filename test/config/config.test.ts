import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config/load.js";
import {
  DEV_ACCESS_KEY_ID,
  DEV_SECRET_ACCESS_KEY,
  isLoopback,
  resolveSecrets,
} from "../../src/config/resolve.js";
import { signFencingToken, verifyFencingToken } from "../../src/fence/tokens.js";
import { tempDir } from "../support/gateway.js";

const dirs: { cleanup(): void }[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) d.cleanup();
});

function dir(): string {
  const d = tempDir("fencegate-config-");
  dirs.push(d);
  return d.path;
}

function yamlFile(text: string): string {
  const file = join(dir(), "fencegate.yaml");
  writeFileSync(file, text);
  return file;
}

function configError(fn: () => unknown): ConfigError {
  let thrown: unknown;
  try {
    fn();
  } catch (e) {
    thrown = e;
  }
  expect(thrown).toBeInstanceOf(ConfigError);
  return thrown as ConfigError;
}

describe("the gateway's region", () => {
  it("is us-east-1 unless FENCEGATE_REGION or server.region names another region", () => {
    expect(loadConfig({}).server.region).toBe("us-east-1");
    expect(loadConfig({ FENCEGATE_REGION: "eu-west-1" }).server.region).toBe("eu-west-1");
    expect(() => loadConfig({ FENCEGATE_REGION: "Mars" })).toThrow(/server\.region/);
  });
});

describe("loadConfig defaults", () => {
  it("serves on 127.0.0.1:9700 with the embedded defaults", () => {
    const c = loadConfig({});
    expect(c.server).toEqual({
      host: "127.0.0.1",
      port: 9700,
      region: "us-east-1",
      maxHeaderBytes: 16 * 1024,
      headersTimeoutMs: 10_000,
      idleTimeoutMs: 120_000,
      keepAliveTimeoutMs: 65_000,
      requestTimeoutMs: 0,
      healthTimeoutMs: 2_000,
      shutdownTimeoutMs: 10_000,
    });
    expect(c.dataDir).toBe("./data");
    expect(c.fencing).toEqual({ default: "required", buckets: {} });
    expect(c.leases).toEqual({ minTtlMs: 500, maxTtlMs: 3_600_000, maxWaitMs: 60_000 });
    expect(c.backend).toEqual({ type: "fs" });
    expect(c.leaseStore).toEqual({ type: "embedded" });
    expect(c.tokens.keys).toBeUndefined();
    expect(c.rootCredential).toBeUndefined();
    expect(c.credentials).toBeUndefined();
    expect(c.log.level).toBe("info");
  });

  it("ignores unrelated and empty environment variables", () => {
    const c = loadConfig({ PATH: "/bin", HOME: "/root", FENCEGATE_HOST: "", FENCEGATE_PORT: "" });
    expect(c.server.host).toBe("127.0.0.1");
    expect(c.server.port).toBe(9700);
  });
});

describe("contract environment variables", () => {
  it("FENCEGATE_HOST, FENCEGATE_PORT, FENCEGATE_DATA_DIR", () => {
    const c = loadConfig({
      FENCEGATE_HOST: "0.0.0.0",
      FENCEGATE_PORT: "9801",
      FENCEGATE_DATA_DIR: "/var/lib/fg",
    });
    expect(c.server.host).toBe("0.0.0.0");
    expect(c.server.port).toBe(9801);
    expect(c.dataDir).toBe("/var/lib/fg");
    expect(loadConfig({ FENCEGATE_PORT: "0" }).server.port).toBe(0);
  });

  it("FENCEGATE_ACCESS_KEY_ID and FENCEGATE_SECRET_ACCESS_KEY (together only)", () => {
    const c = loadConfig({
      FENCEGATE_ACCESS_KEY_ID: "AKIAROOT",
      FENCEGATE_SECRET_ACCESS_KEY: "root-secret-123",
    });
    expect(c.rootCredential).toEqual({ accessKeyId: "AKIAROOT", secretAccessKey: "root-secret-123" });
    expect(configError(() => loadConfig({ FENCEGATE_ACCESS_KEY_ID: "AKIAROOT" })).message).toMatch(
      /FENCEGATE_SECRET_ACCESS_KEY/,
    );
    expect(configError(() => loadConfig({ FENCEGATE_SECRET_ACCESS_KEY: "root-secret-123" })).message).toMatch(
      /FENCEGATE_ACCESS_KEY_ID/,
    );
  });

  it("FENCEGATE_FENCING", () => {
    expect(loadConfig({ FENCEGATE_FENCING: "optional" }).fencing.default).toBe("optional");
    expect(loadConfig({ FENCEGATE_FENCING: "required" }).fencing.default).toBe("required");
    expect(configError(() => loadConfig({ FENCEGATE_FENCING: "sometimes" })).message).toContain(
      "fencing.default",
    );
  });

  it("FENCEGATE_TOKEN_SIGNING_KEY", () => {
    const c = loadConfig({ FENCEGATE_TOKEN_SIGNING_KEY: "a-shared-signing-secret-of-32-bytes" });
    expect(c.tokens.keys).toEqual([{ id: "env", secret: "a-shared-signing-secret-of-32-bytes" }]);
    expect(c.tokens.activeKeyId).toBe("env");
    expect(configError(() => loadConfig({ FENCEGATE_TOKEN_SIGNING_KEY: "short" })).message).toContain(
      "tokens.keys",
    );
  });

  it("FENCEGATE_BACKEND=fs|s3|azure with their variables", () => {
    expect(loadConfig({ FENCEGATE_BACKEND: "fs" }).backend).toEqual({ type: "fs" });
    expect(
      loadConfig({
        FENCEGATE_BACKEND: "s3",
        FENCEGATE_S3_ENDPOINT: "http://127.0.0.1:9000",
        FENCEGATE_S3_REGION: "eu-west-1",
        FENCEGATE_S3_ACCESS_KEY_ID: "backend-key",
        FENCEGATE_S3_SECRET_ACCESS_KEY: "backend-secret",
        FENCEGATE_S3_FORCE_PATH_STYLE: "true",
      }).backend,
    ).toEqual({
      type: "s3",
      endpoint: "http://127.0.0.1:9000",
      region: "eu-west-1",
      accessKeyId: "backend-key",
      secretAccessKey: "backend-secret",
      forcePathStyle: true,
      requestTimeoutMs: 30_000,
      gcIntervalMs: 3_600_000,
      gcGraceMs: 3_600_000,
    });
    // Amazon S3 itself: no endpoint, the SDK's credential chain, virtual-hosted style.
    expect(loadConfig({ FENCEGATE_BACKEND: "s3" }).backend).toEqual({
      type: "s3",
      region: "us-east-1",
      forcePathStyle: false,
      requestTimeoutMs: 30_000,
      gcIntervalMs: 3_600_000,
      gcGraceMs: 3_600_000,
    });
    expect(loadConfig({ FENCEGATE_BACKEND: "s3", FENCEGATE_S3_FORCE_PATH_STYLE: "0" }).backend).toMatchObject(
      {
        forcePathStyle: false,
      },
    );
    expect(
      configError(() => loadConfig({ FENCEGATE_BACKEND: "s3", FENCEGATE_S3_FORCE_PATH_STYLE: "maybe" }))
        .message,
    ).toContain("FENCEGATE_S3_FORCE_PATH_STYLE");
    const conn =
      "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;BlobEndpoint=http://x";
    expect(
      loadConfig({ FENCEGATE_BACKEND: "azure", FENCEGATE_AZURE_CONNECTION_STRING: conn }).backend,
    ).toEqual({ type: "azure", connectionString: conn, requestTimeoutMs: 30_000 });
    expect(configError(() => loadConfig({ FENCEGATE_BACKEND: "azure" })).message).toContain(
      "FENCEGATE_AZURE_CONNECTION_STRING",
    );
    expect(configError(() => loadConfig({ FENCEGATE_BACKEND: "gcs" })).message).toContain(
      "FENCEGATE_BACKEND",
    );
  });

  it("maps gateway buckets to named backends, targets and prefixes, and refuses unknown backends", () => {
    const file = yamlFile(
      [
        "backend: { type: fs }",
        "backends:",
        "  lake: { type: s3, endpoint: 'http://127.0.0.1:9000', forcePathStyle: true }",
        "  blobs: { type: azure, accountUrl: 'https://acct.blob.core.windows.net', sasToken: 'sv=x' }",
        "buckets:",
        "  reports: { backend: lake, target: acme-data, prefix: 'reports/', fencing: optional }",
        "  media: { backend: blobs }",
        "  local-only: {}",
      ].join("\n"),
    );
    const c = loadConfig({ FENCEGATE_CONFIG: file });
    expect(c.buckets).toEqual({
      reports: { backend: "lake", target: "acme-data", prefix: "reports/", fencing: "optional" },
      media: { backend: "blobs", prefix: "" },
      "local-only": { backend: "default", prefix: "" },
    });
    expect(c.backends.lake).toMatchObject({ type: "s3", forcePathStyle: true });
    const unknown = yamlFile("buckets:\n  x: { backend: nowhere }\n");
    expect(configError(() => loadConfig({ FENCEGATE_CONFIG: unknown })).message).toContain(
      "buckets.x.backend",
    );
    const twoFs = yamlFile("backends:\n  other: { type: fs, root: /tmp/x }\n");
    expect(configError(() => loadConfig({ FENCEGATE_CONFIG: twoFs })).message).toContain(
      "at most one fs backend",
    );
    const noCredential = yamlFile(
      "backends:\n  az: { type: azure, accountUrl: 'https://a.blob.core.windows.net' }\n",
    );
    expect(configError(() => loadConfig({ FENCEGATE_CONFIG: noCredential })).message).toContain(
      "accountUrl with",
    );
  });

  it("FENCEGATE_REDIS_URL and FENCEGATE_REDLOCK_URLS", () => {
    expect(loadConfig({ FENCEGATE_REDIS_URL: "redis://127.0.0.1:6379" }).leaseStore).toEqual({
      type: "redis",
      url: "redis://127.0.0.1:6379",
      unsafeSettings: "refuse",
      commandTimeoutMs: 2_000,
      quarantineAfterLoss: false,
    });
    // The URL from the environment keeps the file's other Redis settings (epochs, key prefix).
    const dir = tempDir();
    const file = join(dir.path, "fencegate.yaml");
    writeFileSync(file, "leaseStore:\n  type: redis\n  url: redis://file:1\n  epochs: { bucket: sys }\n");
    expect(
      loadConfig({ FENCEGATE_CONFIG: file, FENCEGATE_REDIS_URL: "redis://env:2" }).leaseStore,
    ).toMatchObject({ type: "redis", url: "redis://env:2", epochs: { bucket: "sys" } });
    dir.cleanup();
    expect(
      loadConfig({ FENCEGATE_REDLOCK_URLS: "redis://a:1, redis://b:2 ,,redis://c:3" }).leaseStore,
    ).toEqual({ type: "redlock", urls: ["redis://a:1", "redis://b:2", "redis://c:3"] });
  });

  it("FENCEGATE_DOMAIN, FENCEGATE_LOG_LEVEL, FENCEGATE_GATEWAY_ID", () => {
    const c = loadConfig({
      FENCEGATE_DOMAIN: "s3.local",
      FENCEGATE_LOG_LEVEL: "debug",
      FENCEGATE_GATEWAY_ID: "gw-7",
    });
    expect(c.server.domain).toBe("s3.local");
    expect(c.log.level).toBe("debug");
    expect(c.gatewayId).toBe("gw-7");
    expect(configError(() => loadConfig({ FENCEGATE_LOG_LEVEL: "loud" })).message).toContain("log.level");
  });

  it("names FENCEGATE_PORT and server.port for bad ports", () => {
    expect(configError(() => loadConfig({ FENCEGATE_PORT: "http" })).message).toContain("FENCEGATE_PORT");
    expect(configError(() => loadConfig({ FENCEGATE_PORT: "-1" })).message).toContain("FENCEGATE_PORT");
    expect(configError(() => loadConfig({ FENCEGATE_PORT: "70000" })).message).toContain("server.port");
  });
});

describe("YAML file via FENCEGATE_CONFIG", () => {
  it("reads every section, with the environment on top", () => {
    const file = yamlFile(`
server:
  host: 127.0.0.2
  port: 9123
  domain: fg.test
dataDir: /srv/fg
gatewayId: from-file
credentials:
  - accessKeyId: file-key
    secretAccessKey: file-secret-1
fencing:
  default: optional
  buckets:
    critical: required
tokens:
  keys:
    - id: old
      secret: old-secret-0123456789
    - id: new
      secret: new-secret-0123456789
  activeKeyId: new
leases:
  minTtlMs: 1000
  maxTtlMs: 60000
  maxWaitMs: 5000
log:
  level: warn
`);
    const c = loadConfig({ FENCEGATE_CONFIG: file });
    expect(c.server).toMatchObject({
      host: "127.0.0.2",
      port: 9123,
      domain: "fg.test",
      maxHeaderBytes: 16 * 1024,
    });
    expect(c.dataDir).toBe("/srv/fg");
    expect(c.gatewayId).toBe("from-file");
    expect(c.credentials).toEqual([
      { accessKeyId: "file-key", secretAccessKey: "file-secret-1", admin: false },
    ]);
    expect(c.fencing).toEqual({ default: "optional", buckets: { critical: "required" } });
    expect(c.tokens.activeKeyId).toBe("new");
    expect(c.tokens.keys?.map((k) => k.id)).toEqual(["old", "new"]);
    expect(c.leases).toEqual({ minTtlMs: 1000, maxTtlMs: 60000, maxWaitMs: 5000 });
    expect(c.log.level).toBe("warn");

    const overridden = loadConfig({
      FENCEGATE_CONFIG: file,
      FENCEGATE_PORT: "9999",
      FENCEGATE_FENCING: "required",
      FENCEGATE_DATA_DIR: "/other",
    });
    expect(overridden.server.port).toBe(9999);
    expect(overridden.server.host).toBe("127.0.0.2");
    expect(overridden.fencing).toEqual({ default: "required", buckets: { critical: "required" } });
    expect(overridden.dataDir).toBe("/other");
  });

  it("reads the example configurations shipped in config/", () => {
    const root = join(import.meta.dirname, "../../config");
    const examples = readdirSync(root)
      .filter((f) => /\.ya?ml$/.test(f))
      .map((f) => join(root, f));
    expect(examples.length).toBeGreaterThan(0);
    for (const file of examples) expect(() => loadConfig({ FENCEGATE_CONFIG: file }), file).not.toThrow();
  });

  it("names the bad field: server.port, fencing.default, leases.maxTtlMs, and others", () => {
    const cases: [string, string][] = [
      ["server:\n  port: not-a-port\n", "server.port"],
      ["server:\n  port: 65536\n", "server.port"],
      ["fencing:\n  default: sometimes\n", "fencing.default"],
      ["fencing:\n  buckets:\n    b: maybe\n", "fencing.buckets.b"],
      ["leases:\n  maxTtlMs: -5\n", "leases.maxTtlMs"],
      ["leases:\n  maxTtlMs: 1.5\n", "leases.maxTtlMs"],
      ["leases:\n  minTtlMs: 0\n", "leases.minTtlMs"],
      ["leases:\n  minTtlMs: 5000\n  maxTtlMs: 1000\n", "leases"],
      ["tokens:\n  keys:\n    - id: 'bad id'\n      secret: 0123456789abcdef0\n", "tokens.keys.0.id"],
      ["backend:\n  type: ftp\n", "backend.type"],
      ["leaseStore:\n  type: redis\n", "leaseStore.url"],
      ["server:\n  hots: 127.0.0.1\n", "server"],
      ["credentials:\n  - accessKeyId: k\n    secretAccessKey: short\n", "credentials.0"],
      ["unknownTopLevel: 1\n", "unknownTopLevel"],
    ];
    for (const [yaml, field] of cases) {
      const file = yamlFile(yaml);
      const e = configError(() => loadConfig({ FENCEGATE_CONFIG: file }));
      expect(e.message, yaml).toContain(field);
      expect(e.message).toContain(file);
    }
  });

  it("reports an unreadable file, broken YAML and a non-mapping document", () => {
    expect(configError(() => loadConfig({ FENCEGATE_CONFIG: "/nonexistent/fg.yaml" })).message).toContain(
      "/nonexistent/fg.yaml",
    );
    expect(configError(() => loadConfig({ FENCEGATE_CONFIG: yamlFile("server: [1, 2\n") })).message).toMatch(
      /YAML/,
    );
    expect(configError(() => loadConfig({ FENCEGATE_CONFIG: yamlFile("- a\n- b\n") })).message).toMatch(
      /mapping/,
    );
    // An empty file is the defaults.
    expect(loadConfig({ FENCEGATE_CONFIG: yamlFile("") }).server.port).toBe(9700);
  });
});

describe("resolveSecrets", () => {
  it("uses the development credentials and a generated, persisted signing key on loopback", () => {
    const dataDir = dir();
    const s = resolveSecrets(loadConfig({ FENCEGATE_DATA_DIR: dataDir }));
    expect(s.usesDevCredentials).toBe(true);
    expect(s.usesGeneratedSigningKey).toBe(true);
    expect(s.credentials.get(DEV_ACCESS_KEY_ID)).toBe(DEV_SECRET_ACCESS_KEY);
    const stored = JSON.parse(readFileSync(join(dataDir, "token-signing-key.json"), "utf8")) as {
      id: string;
    };
    expect(stored.id).toBe(s.keyring.active.id);
    // Restart: the same key, so tokens issued before still verify.
    const again = resolveSecrets(loadConfig({ FENCEGATE_DATA_DIR: dataDir }));
    const token = signFencingToken({ leaseId: "l", token: 1, bucket: "b", key: "k" }, s.keyring.active);
    expect(verifyFencingToken(token, again.keyring).ok).toBe(true);
  });

  it("uses configured credentials and keys instead of the defaults", () => {
    const s = resolveSecrets(
      loadConfig({
        FENCEGATE_DATA_DIR: dir(),
        FENCEGATE_ACCESS_KEY_ID: "AKIAROOT",
        FENCEGATE_SECRET_ACCESS_KEY: "root-secret-123",
        FENCEGATE_TOKEN_SIGNING_KEY: "a-shared-signing-secret-of-32-bytes",
      }),
    );
    expect(s.usesDevCredentials).toBe(false);
    expect(s.usesGeneratedSigningKey).toBe(false);
    expect(s.credentials.get("AKIAROOT")).toBe("root-secret-123");
    expect(s.credentials.has(DEV_ACCESS_KEY_ID)).toBe(false);
    expect(s.keyring.active.id).toBe("env");
  });

  it("refuses a non-loopback host with the development credentials", () => {
    for (const host of ["0.0.0.0", "10.1.2.3", "::", "fencegate.example.com"]) {
      const e = configError(() =>
        resolveSecrets(
          loadConfig({
            FENCEGATE_DATA_DIR: dir(),
            FENCEGATE_HOST: host,
            FENCEGATE_TOKEN_SIGNING_KEY: "a-shared-signing-secret-of-32-bytes",
          }),
        ),
      );
      expect(e.message).toContain(host);
      expect(e.message).toMatch(/credentials/);
    }
  });

  it("refuses a non-loopback host with the generated signing key", () => {
    const dataDir = dir();
    const e = configError(() =>
      resolveSecrets(
        loadConfig({
          FENCEGATE_DATA_DIR: dataDir,
          FENCEGATE_HOST: "0.0.0.0",
          FENCEGATE_ACCESS_KEY_ID: "AKIAROOT",
          FENCEGATE_SECRET_ACCESS_KEY: "root-secret-123",
        }),
      ),
    );
    expect(e.message).toMatch(/signing key/);
  });

  it("starts on a non-loopback host with both configured", () => {
    const s = resolveSecrets(
      loadConfig({
        FENCEGATE_DATA_DIR: dir(),
        FENCEGATE_HOST: "0.0.0.0",
        FENCEGATE_ACCESS_KEY_ID: "AKIAROOT",
        FENCEGATE_SECRET_ACCESS_KEY: "root-secret-123",
        FENCEGATE_TOKEN_SIGNING_KEY: "a-shared-signing-secret-of-32-bytes",
      }),
    );
    expect(s.usesDevCredentials).toBe(false);
  });

  it("refuses an active key id that is not configured", () => {
    const file = yamlFile(
      "tokens:\n  keys:\n    - id: a\n      secret: 0123456789abcdef0\n  activeKeyId: b\n",
    );
    const e = configError(() =>
      resolveSecrets(loadConfig({ FENCEGATE_CONFIG: file, FENCEGATE_DATA_DIR: dir() })),
    );
    expect(e.message).toMatch(/^tokens/);
  });

  it("knows the loopback addresses", () => {
    for (const h of ["127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]", "LOCALHOST"])
      expect(isLoopback(h), h).toBe(true);
    for (const h of [
      "0.0.0.0",
      "::",
      "10.0.0.1",
      "128.0.0.1",
      "127.example.com",
      "localhost.evil.com",
      "::ffff:10.0.0.1",
    ]) {
      expect(isLoopback(h), h).toBe(false);
    }
  });
});
