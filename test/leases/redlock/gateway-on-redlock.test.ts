/**
 * A gateway whose lease store is a Redlock quorum of three redis-servers (FENCEGATE_REDLOCK_URLS):
 * a lease acquired over HTTP lives on every instance, a write with its token goes through, the
 * release ends it; with two of three killed, lease calls answer 503 LeaseStoreUnavailable, fenced
 * writes 503 ServiceUnavailable and health 503. The config/redlock.yaml example loads.
 */
import { join } from "node:path";
import { CreateBucketCommand, GetObjectCommand, PutObjectCommand } from "@aws-sdk/client-s3";
import { afterEach, describe, expect, it } from "vitest";
import { loadConfig } from "../../../src/config/load.js";
import { HEALTH_PATH, ROOT, startTestGateway } from "../../support/gateway.js";
import { startRedis } from "../../support/redis.js";
import { requireTools } from "../../support/tools.js";

requireTools("redis-server");

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe("a gateway on a Redlock quorum", () => {
  it("serves leases and fenced writes with a majority up, answers 503 without one", async () => {
    const redis = await Promise.all([startRedis(), startRedis(), startRedis()]);
    cleanups.push(() => Promise.all(redis.map((r) => r.stop())).then(() => undefined));
    const gw = await startTestGateway({ env: { FENCEGATE_REDLOCK_URLS: redis.map((r) => r.url).join(",") } });
    cleanups.push(() => gw.stop());
    const s3 = gw.s3();
    cleanups.push(() => s3.destroy());

    const health = await fetch(`${gw.url}${HEALTH_PATH}`);
    expect(health.status).toBe(200);
    // The audit log stays embedded: the quorum is for leases only.
    expect(await health.json()).toMatchObject({ status: "ok", leaseStore: "redlock", auditLog: "embedded" });

    await s3.send(new CreateBucketCommand({ Bucket: "bkt" }));
    const lease = await gw.leases.acquire({ bucket: "bkt", key: "k", ttlMs: 60_000 });
    for (const r of redis) expect(await r.command("EXISTS", `{fencegate}:lease:${lease.leaseId}`)).toBe(1);
    await s3.send(
      new PutObjectCommand({
        Bucket: "bkt",
        Key: "k",
        Body: "one",
        Metadata: { "fence-token": lease.fencingToken },
      }),
    );
    const body = await (
      await s3.send(new GetObjectCommand({ Bucket: "bkt", Key: "k" }))
    ).Body!.transformToString();
    expect(body).toBe("one");
    await gw.leases.release(lease.leaseId);
    for (const r of redis) {
      expect(await r.command("HEXISTS", `{fencegate}:lease:${lease.leaseId}`, "rel")).toBe(1);
    }
    // The released lease's token no longer writes.
    const late = await s3
      .send(
        new PutObjectCommand({
          Bucket: "bkt",
          Key: "k",
          Body: "late",
          Metadata: { "fence-token": lease.fencingToken },
        }),
      )
      .catch((e: unknown) => e);
    expect(late).toMatchObject({ $metadata: { httpStatusCode: 409 } });

    // One down: still a majority.
    await redis[0]!.kill9();
    const next = await gw.leases.acquire({ bucket: "bkt", key: "k", ttlMs: 60_000 });
    expect(next.token).toBeGreaterThan(lease.token);
    expect((await fetch(`${gw.url}${HEALTH_PATH}`)).status).toBe(200);

    // Two of three down: no majority.
    await redis[1]!.kill9();
    const started = Date.now();
    const refused = await gw.leases.acquire({ bucket: "bkt", key: "other", ttlMs: 60_000 }).catch((e) => e);
    expect(refused).toMatchObject({ status: 503, code: "LeaseStoreUnavailable" });
    expect(Date.now() - started).toBeLessThan(10_000);
    const write = await s3
      .send(
        new PutObjectCommand({
          Bucket: "bkt",
          Key: "k",
          Body: "two",
          Metadata: { "fence-token": next.fencingToken },
        }),
      )
      .catch((e: unknown) => e);
    expect(write).toMatchObject({ name: "ServiceUnavailable", $metadata: { httpStatusCode: 503 } });
    const down = await fetch(`${gw.url}${HEALTH_PATH}`);
    expect(down.status).toBe(503);
    expect(JSON.stringify(await down.json())).toMatch(/Redlock lease store/);
  }, 60_000);

  it("config/redlock.yaml: three instances, epochs in the data directory, embedded audit log", () => {
    const config = loadConfig({ FENCEGATE_CONFIG: join(ROOT, "config/redlock.yaml") });
    expect(config.leaseStore).toEqual({
      type: "redlock",
      urls: ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"],
      keyPrefix: "{fencegate}",
      commandTimeoutMs: 2_000,
    });
    expect(config.leases.maxTtlMs).toBe(3_600_000);
    expect(config.audit.type).toBeUndefined();
  });
});
