/**
 * Found by the nemesis run (Redis killed between a write's commit and its audit record): a write
 * that landed while the audit log could not take its record is answered 503 (without
 * `x-fence-outcome: unknown`), its bytes are the object's content, and no record of it ever
 * reaches the log, not even once the log is back and the key's next grant has fenced the write's
 * commit intent. Rule 6 (every write decision on record; an outcome the client was not told is
 * recorded once known) asks for its "accepted" record, as a write answered "unknown" gets.
 *
 * The minimal form: one gateway (fs backend) on a Redis lease store and audit log reached through
 * the Redis fault proxy; the append of the write's "accepted" record is lost on the way to Redis.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { type RedisServer, startRedis } from "../../support/redis.js";
import { type RedisFaultProxy, startRedisFaultProxy } from "../../support/redis-fault-proxy.js";
import { requireTools } from "../../support/tools.js";
import { sleep } from "../../support/wait.js";
import { createBucket, put, read, recordsOf } from "../faults/fault-kit.js";

requireTools("redis-server");

describe("a write that landed while the audit log could not take its record", () => {
  let redis: RedisServer;
  let proxy: RedisFaultProxy;
  let gw: TestGateway;

  beforeAll(async () => {
    redis = await startRedis();
    proxy = await startRedisFaultProxy(redis.port);
    gw = await startTestGateway({
      overrides: { leaseStore: { type: "redis", url: proxy.url, unsafeSettings: "warn" } },
    });
  }, 60_000);

  afterAll(async () => {
    await gw?.stop();
    await proxy?.close();
    await redis?.stop();
  });

  it("gets its accepted record once the log is back (rule 6)", async () => {
    const bucket = "audit-gap";
    await createBucket(gw, bucket);
    const lease = await gw.leases.acquire({ bucket, key: "k", ttlMs: 2_000 });
    // The append of the write's "accepted" record never reaches Redis; everything else does.
    const lost = proxy.on(
      { command: "EVALSHA", args: (a) => a.includes("PutObject") && a.includes("accepted") },
      { kind: "reset" },
    );
    const answer = await put(gw, bucket, "k", "landed", lease.fencingToken);
    expect(lost.count).toBe(1);
    expect(answer.status).toBe(503);
    // It landed.
    expect(await read(gw, bucket, "k")).toBe("landed");
    // The log is back; the lease ends and the key's next grant fences what its writes left.
    await sleep(2_200);
    const next = await gw.leases.acquire({ bucket, key: "k", ttlMs: 2_000 });
    await gw.leases.release(next.leaseId);
    // Time enough for a background record (a write answered "unknown" gets its outcome within a
    // second here).
    let records = await recordsOf(gw, bucket, answer.requestId);
    for (let i = 0; i < 20 && !records.some((r) => r.decision === "accepted"); i++) {
      await sleep(250);
      records = await recordsOf(gw, bucket, answer.requestId);
    }
    expect(await read(gw, bucket, "k")).toBe("landed");
    expect(
      records.map((r) => ({ op: r.op, decision: r.decision, token: r.token })),
      `the audit records of request ${answer.requestId}, whose bytes are the object's content`,
    ).toContainEqual({ op: "PutObject", decision: "accepted", token: lease.token });
  }, 30_000);
});
