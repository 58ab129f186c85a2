import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import { type RedisServer, startRedis } from "../support/redis.js";
import { requireTools } from "../support/tools.js";
import { api, getBody, makeBucket, openTransaction, putIn, untilExpired } from "./support.js";
import { checkHistory, runHistory } from "./visibility-history.js";

/**
 * Fenced transactions on the filesystem backend with the lease store and audit log in Redis: the
 * lease is not in the backend's database, so the commit first records a commit intent for every
 * key in Redis (the lease store's atomic check-and-record), then applies every write in one step.
 * A newer grant fences those keys first, so a commit that paused after its intents is refused.
 */

requireTools("redis-server");

let redis: RedisServer;
let gw: TestGateway;
const bucket = "tx-redis";

beforeAll(async () => {
  redis = await startRedis();
  gw = await startTestGateway({
    overrides: { leaseStore: { type: "redis", url: redis.url }, audit: { type: "redis" } },
  });
  await makeBucket(gw, bucket);
});

afterAll(async () => {
  await gw?.stop();
  await redis?.stop();
});

describe("transactions with the lease store in Redis", () => {
  it("commits all the staged writes, and leaves no commit intent behind", async () => {
    const lease = await gw.leases.acquire({ bucket, prefix: "a/", ttlMs: 30_000 });
    const tx = await openTransaction(gw, lease.leaseId);
    for (const key of ["a/1", "a/2", "a/3"]) {
      expect((await putIn(gw, lease, tx.transactionId, bucket, key, key)).status).toBe(200);
    }
    expect(await getBody(gw, bucket, "a/1")).toBeNull();
    const commit = await api(gw, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(commit.status, commit.text).toBe(200);
    for (const key of ["a/1", "a/2", "a/3"]) expect(await getBody(gw, bucket, key)).toBe(key);
    // Each key's commit intent (a hash under :intent:, src/leases/redis-shared/lua/lease-scripts.ts) ended.
    expect(await redis.command("KEYS", "*:intent:*")).toEqual([]);
    await gw.leases.release(lease.leaseId);
  });

  it("keeps the transaction open when the lease store does not answer its commit; the repeat commits", async () => {
    const lease = await gw.leases.acquire({ bucket, prefix: "d/", ttlMs: 60_000 });
    const tx = await openTransaction(gw, lease.leaseId);
    expect((await putIn(gw, lease, tx.transactionId, bucket, "d/1", "one")).status).toBe(200);
    process.kill(redis.pid, "SIGSTOP");
    let first: Awaited<ReturnType<typeof api>>;
    try {
      first = await api(gw, "POST", `/transactions/${tx.transactionId}/commit`);
    } finally {
      process.kill(redis.pid, "SIGCONT");
    }
    expect(first.status, first.text).toBe(503);
    expect(await getBody(gw, bucket, "d/1")).toBeNull();
    expect((await api(gw, "GET", `/transactions/${tx.transactionId}`)).json).toMatchObject({ state: "open" });
    const again = await api(gw, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(again.status, again.text).toBe(200);
    expect(await getBody(gw, bucket, "d/1")).toBe("one");
    await gw.leases.release(lease.leaseId);
  }, 60_000);

  it("refuses the commit of an expired lease whole", async () => {
    const lease = await gw.leases.acquire({ bucket, prefix: "b/", ttlMs: 2_000 });
    const tx = await openTransaction(gw, lease.leaseId);
    expect((await putIn(gw, lease, tx.transactionId, bucket, "b/1", "x")).status).toBe(200);
    expect((await putIn(gw, lease, tx.transactionId, bucket, "b/2", "x")).status).toBe(200);
    await untilExpired(lease);
    const commit = await api(gw, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(commit.status).toBe(409);
    expect(await getBody(gw, bucket, "b/1")).toBeNull();
    expect(await getBody(gw, bucket, "b/2")).toBeNull();
  });

  it("keeps the visibility rule under concurrent readers, stale writers and single writes", async () => {
    await makeBucket(gw, "tx-redis-visible");
    const history = await runHistory({
      url: gw.url,
      leases: gw.leases,
      bucket: "tx-redis-visible",
      keys: ["set/part-0", "set/part-1", "set/manifest"],
      durationMs: 5_000,
      writers: 3,
      readers: 3,
      ttlMs: 500,
      minCommitted: 5,
      minRefused: 1,
    });
    expect(history.commits.filter((c) => c.outcome === "committed").length).toBeGreaterThanOrEqual(5);
    expect(history.commits.filter((c) => c.outcome === "refused").length).toBeGreaterThanOrEqual(1);
    expect(checkHistory(history)).toEqual([]);
  }, 60_000);
});
