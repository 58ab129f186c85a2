/**
 * A gateway whose lease store is one Redis (FENCEGATE_REDIS_URL): leases and fenced writes work
 * through it; while Redis is down, lease calls answer 503 LeaseStoreUnavailable (JSON), fenced
 * writes 503 ServiceUnavailable (S3), health 503 naming the Redis lease store; all of it comes
 * back by itself once Redis does. Unsafe Redis settings stop the start.
 */
import { CreateBucketCommand, GetObjectCommand, PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { afterEach, describe, expect, it } from "vitest";
import { loadConfig } from "../../../src/config/load.js";
import { createLogger } from "../../../src/core/log.js";
import { startGateway } from "../../../src/server/gateway.js";
import { HEALTH_PATH, startTestGateway, type TestGateway, tempDir } from "../../support/gateway.js";
import { type RedisServer, startRedis } from "../../support/redis.js";
import { requireTools } from "../../support/tools.js";

requireTools("redis-server");

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function gatewayOn(redis: RedisServer): Promise<{ gw: TestGateway; s3: S3Client }> {
  const gw = await startTestGateway({ env: { FENCEGATE_REDIS_URL: redis.url } });
  cleanups.push(() => gw.stop());
  const s3 = gw.s3();
  cleanups.push(() => s3.destroy());
  return { gw, s3 };
}

async function until(check: () => Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe("a gateway on one Redis", () => {
  it("serves leases and fenced writes from Redis, fails closed while Redis is down, and recovers by itself", async () => {
    let redis = await startRedis({ persistence: "aof" });
    cleanups.push(() => redis.stop());
    const { gw, s3 } = await gatewayOn(redis);
    const health = await (await fetch(`${gw.url}${HEALTH_PATH}`)).json();
    expect(health).toMatchObject({ status: "ok", leaseStore: "redis" });

    await s3.send(new CreateBucketCommand({ Bucket: "bkt" }));
    const lease = await gw.leases.acquire({ bucket: "bkt", key: "k", ttlMs: 60_000 });
    await s3.send(
      new PutObjectCommand({
        Bucket: "bkt",
        Key: "k",
        Body: "one",
        Metadata: { "fence-token": lease.fencingToken },
      }),
    );
    // The lease lives in Redis, not in the gateway.
    expect(await redis.command("EXISTS", `{fencegate}:lease:${lease.leaseId}`)).toBe(1);

    await redis.kill9();
    const refused = await gw.leases.acquire({ bucket: "bkt", key: "other", ttlMs: 60_000 }).catch((e) => e);
    expect(refused).toMatchObject({ status: 503, code: "LeaseStoreUnavailable" });
    const write = await s3
      .send(
        new PutObjectCommand({
          Bucket: "bkt",
          Key: "k",
          Body: "two",
          Metadata: { "fence-token": lease.fencingToken },
        }),
      )
      .catch((e) => e);
    expect(write).toMatchObject({ name: "ServiceUnavailable", $metadata: { httpStatusCode: 503 } });
    const down = await fetch(`${gw.url}${HEALTH_PATH}`);
    expect(down.status).toBe(503);
    expect(JSON.stringify(await down.json())).toMatch(/Redis lease store/);
    // Nothing was guessed: the refused write left the object as it was.
    redis = await redis.restart();
    await until(async () => (await fetch(`${gw.url}${HEALTH_PATH}`)).status === 200);
    const body = await (
      await s3.send(new GetObjectCommand({ Bucket: "bkt", Key: "k" }))
    ).Body!.transformToString();
    expect(body).toBe("one");
    // Back by itself: the lease survived (AOF), writes with it and new grants go through.
    await s3.send(
      new PutObjectCommand({
        Bucket: "bkt",
        Key: "k",
        Body: "three",
        Metadata: { "fence-token": lease.fencingToken },
      }),
    );
    const next = await gw.leases.acquire({ bucket: "bkt", key: "other", ttlMs: 60_000 });
    expect(next.token).toBeGreaterThan(lease.token);
  }, 60_000);

  it("refuses to start on a Redis whose eviction policy can drop leases, unless told to warn", async () => {
    const redis = await startRedis();
    cleanups.push(() => redis.stop());
    await redis.command("CONFIG", "SET", "maxmemory", "100mb");
    await redis.command("CONFIG", "SET", "maxmemory-policy", "volatile-lru");
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const config = loadConfig(
      { FENCEGATE_PORT: "0", FENCEGATE_DATA_DIR: dir.path, FENCEGATE_REDIS_URL: redis.url },
      {},
    );
    const log = createLogger("silent");
    await expect(startGateway(config, { log })).rejects.toThrow(
      /unsafe Redis settings.*maxmemory-policy is volatile-lru/,
    );
    const warned = await startGateway(
      { ...config, leaseStore: { ...config.leaseStore, unsafeSettings: "warn" } as never },
      { log },
    );
    cleanups.push(() => warned.close());
    expect((await fetch(`${warned.url}${HEALTH_PATH}`)).status).toBe(200);
  }, 30_000);
});
