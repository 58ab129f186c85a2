/**
 * A system bucket the gateway cannot use (another account's: 403) does not stop the start, but
 * every grant answers 503 LeaseStoreUnavailable naming the bucket and FENCEGATE_SYSTEM_BUCKET,
 * and health says so, even while Redis's token floor is known (another replica installed it):
 * tokens are never granted without an epoch store that could advance them, and never from epochs
 * kept in the data directory instead.
 */
import { readdirSync } from "node:fs";
import { CreateBucketCommand } from "@aws-sdk/client-s3";
import { afterEach, describe, expect, it } from "vitest";
import { LeaseClient } from "../../src/client/lease-client.js";
import { loadConfig } from "../../src/config/load.js";
import { createLogger } from "../../src/core/log.js";
import { startGateway } from "../../src/server/gateway.js";
import { CREDENTIALS, HEALTH_PATH, s3Client, startTestGateway, tempDir } from "../support/gateway.js";
import { startRedis } from "../support/redis.js";
import { requireTools } from "../support/tools.js";
import { grantRefusal, grantTokens } from "./epochs-kit.js";

requireTools("redis-server");

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const OWNER = { accessKeyId: "store-owner", secretAccessKey: "owner-secret-key" };
const TENANT = { accessKeyId: "fencegate-tenant", secretAccessKey: "tenant-secret-key" };

describe("a system bucket the gateway cannot use", () => {
  it("S3, a bucket of another account (403): the gateway starts, refuses every grant with 503 naming it, health too", async () => {
    // The store: its owner has every bucket; fencegate's credentials only some of them.
    const store = await startTestGateway({
      env: { FENCEGATE_FENCING: "optional" },
      overrides: {
        credentials: [
          { ...OWNER, admin: true },
          {
            ...TENANT,
            allow: [{ bucket: "fencegate-system", actions: ["read", "write"] }],
          },
        ],
      },
    });
    cleanups.push(() => store.stop());
    const owner = s3Client(store.url, { credentials: OWNER });
    cleanups.push(() => owner.destroy());
    await owner.send(new CreateBucketCommand({ Bucket: "someone-elses" }));
    const redis = await startRedis();
    cleanups.push(() => redis.stop());

    const env = {
      FENCEGATE_BACKEND: "s3",
      FENCEGATE_S3_ENDPOINT: store.url,
      FENCEGATE_S3_REGION: "us-east-1",
      FENCEGATE_S3_ACCESS_KEY_ID: TENANT.accessKeyId,
      FENCEGATE_S3_SECRET_ACCESS_KEY: TENANT.secretAccessKey,
      FENCEGATE_S3_FORCE_PATH_STYLE: "true",
      FENCEGATE_REDIS_URL: redis.url,
    };
    // A replica with a usable system bucket installs the deployment's first epoch in Redis.
    const good = await startTestGateway({ env });
    cleanups.push(() => good.stop());
    expect(await grantTokens(good, "good", 2)).toEqual([1, 2]);

    // A replica told to keep its epochs in a bucket it may not use.
    // (Started without waiting for its health, which answers 503 by design.)
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const config = loadConfig({
      ...env,
      FENCEGATE_SYSTEM_BUCKET: "someone-elses",
      FENCEGATE_PORT: "0",
      FENCEGATE_DATA_DIR: dir.path,
    });
    const started = await startGateway(config, { log: createLogger("silent") });
    cleanups.push(() => started.close());
    const bad = {
      url: started.url,
      dataDir: dir.path,
      leases: new LeaseClient({ endpoint: started.url, ...CREDENTIALS }),
    };
    for (let i = 0; i < 3; i++) {
      const refusal = await grantRefusal(bad, `k${i}`);
      expect(refusal, "granted without a usable epoch store").not.toBeNull();
      expect(refusal).toMatchObject({ status: 503, code: "LeaseStoreUnavailable" });
      expect(refusal!.message).toMatch(/bucket someone-elses .*FENCEGATE_SYSTEM_BUCKET/);
    }
    const health = await fetch(`${bad.url}${HEALTH_PATH}`);
    expect(health.status).toBe(503);
    expect(JSON.stringify(await health.json())).toMatch(/bucket someone-elses .*FENCEGATE_SYSTEM_BUCKET/);
    // No fallback to epochs of its own.
    expect(readdirSync(bad.dataDir)).not.toContain("redis-epochs");

    // The replica with the usable bucket is not affected.
    expect(await grantTokens(good, "good-again", 1)).toEqual([3]);
    expect((await fetch(`${good.url}${HEALTH_PATH}`)).status).toBe(200);
  }, 30_000);
});
