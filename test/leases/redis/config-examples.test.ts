import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../../src/config/load.js";
import { systemBucketOf } from "../../../src/server/lease-components.js";
import { ROOT } from "../../support/gateway.js";

describe("config/ examples for Redis", () => {
  it("config/redis.yaml: one Redis, epochs in the data directory", () => {
    const config = loadConfig({ FENCEGATE_CONFIG: join(ROOT, "config/redis.yaml") });
    expect(config.leaseStore).toEqual({
      type: "redis",
      url: "redis://127.0.0.1:6379",
      keyPrefix: "{fencegate}",
      unsafeSettings: "refuse",
      commandTimeoutMs: 2_000,
      quarantineAfterLoss: false,
    });
  });

  it("config/redis-replicas.yaml: epochs in the system bucket of the shared S3 backend", () => {
    const config = loadConfig({ FENCEGATE_CONFIG: join(ROOT, "config/redis-replicas.yaml") });
    expect(config.backend).toMatchObject({ type: "s3", systemBucket: "fencegate-system" });
    expect(config.leaseStore).toMatchObject({ type: "redis", url: "redis://redis.internal:6379" });
    expect(systemBucketOf(config)).toBe("fencegate-system");
  });
});
