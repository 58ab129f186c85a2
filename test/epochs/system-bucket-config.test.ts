/**
 * Which bucket holds the token epochs, as the configuration decides it: fencegate-system on a
 * remote default backend, backend.systemBucket or FENCEGATE_SYSTEM_BUCKET instead, an older
 * configuration's leaseStore.epochs.bucket kept; none with the fs backend.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config/load.js";
import { systemBucketOf } from "../../src/server/lease-components.js";
import { tempDir } from "../support/temp.js";

const S3_ENV = { FENCEGATE_BACKEND: "s3", FENCEGATE_REDIS_URL: "redis://127.0.0.1:1" };

function withFile(yaml: string, run: (file: string) => void): void {
  const dir = tempDir("fencegate-system-config-");
  try {
    const file = join(dir.path, "fencegate.yaml");
    writeFileSync(file, yaml);
    run(file);
  } finally {
    dir.cleanup();
  }
}

describe("the system bucket in the configuration", () => {
  it("is fencegate-system on a remote default backend set up from the environment alone", () => {
    expect(systemBucketOf(loadConfig(S3_ENV))).toBe("fencegate-system");
    expect(
      systemBucketOf(loadConfig({ FENCEGATE_BACKEND: "azure", FENCEGATE_AZURE_CONNECTION_STRING: "x" })),
    ).toBe("fencegate-system");
  });

  it("FENCEGATE_SYSTEM_BUCKET names another, whether the backend comes from the environment or the file", () => {
    expect(systemBucketOf(loadConfig({ ...S3_ENV, FENCEGATE_SYSTEM_BUCKET: "our-records" }))).toBe(
      "our-records",
    );
    withFile("backend:\n  type: azure\n  connectionString: x\n  systemBucket: from-file\n", (file) => {
      expect(systemBucketOf(loadConfig({ FENCEGATE_CONFIG: file }))).toBe("from-file");
      const env = { FENCEGATE_CONFIG: file, FENCEGATE_SYSTEM_BUCKET: "from-env" };
      expect(loadConfig(env).backend).toMatchObject({
        type: "azure",
        connectionString: "x",
        systemBucket: "from-env",
      });
    });
  });

  it("the fs backend has none (epochs in the data directory), and ignores FENCEGATE_SYSTEM_BUCKET", () => {
    const config = loadConfig({
      FENCEGATE_REDIS_URL: "redis://127.0.0.1:1",
      FENCEGATE_SYSTEM_BUCKET: "ignored",
    });
    expect(config.backend).toEqual({ type: "fs" });
    expect(systemBucketOf(config)).toBeUndefined();
  });

  it("an older configuration's leaseStore.epochs.bucket names it; a different backend.systemBucket is refused", () => {
    const legacy =
      "backend: { type: s3 }\nleaseStore:\n  type: redis\n  url: redis://r:1\n  epochs: { bucket: old-system }\n";
    withFile(legacy, (file) => {
      expect(systemBucketOf(loadConfig({ FENCEGATE_CONFIG: file }))).toBe("old-system");
      expect(() =>
        loadConfig({ FENCEGATE_CONFIG: file, FENCEGATE_SYSTEM_BUCKET: "old-system" }),
      ).not.toThrow();
      expect(() => loadConfig({ FENCEGATE_CONFIG: file, FENCEGATE_SYSTEM_BUCKET: "new-system" })).toThrow(
        /leaseStore\.epochs\.bucket: names the system bucket old-system, but backend\.systemBucket .* names new-system/,
      );
    });
  });

  it("refuses a name no store accepts, and a systemBucket on a backend other than the default", () => {
    expect(() => loadConfig({ ...S3_ENV, FENCEGATE_SYSTEM_BUCKET: "Not_A_Bucket" })).toThrow(
      /backend\.systemBucket: not a valid bucket name/,
    );
    withFile(
      "backends:\n  lake: { type: s3, systemBucket: elsewhere }\nbuckets:\n  b: { backend: lake }\n",
      (file) => {
        expect(() => loadConfig({ FENCEGATE_CONFIG: file })).toThrow(
          /backends\.lake\.systemBucket: only the default backend/,
        );
      },
    );
  });
});
