import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FenceClient } from "../../src/client/fence-client.js";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../support/gateway.js";
import { type RedisServer, startRedis } from "../support/redis.js";
import { requireTools } from "../support/tools.js";
import { api, getBody, makeBucket, openTransaction, putIn } from "./support.js";

/**
 * A commit whose audit log is elsewhere (Redis) than the backend's database: the record follows
 * the commit's step. When the log does not take it, the commit is not answered as done: 503 with
 * x-fence-outcome: unknown (never a refusal); a repeated commit appends the record, once, and
 * answers 200 with the same body.
 */

requireTools("redis-server");

let redis: RedisServer;
let gw: TestGateway;
const bucket = "tx-audit-elsewhere";

beforeAll(async () => {
  redis = await startRedis();
  gw = await startTestGateway({ overrides: { audit: { type: "redis", url: redis.url } } });
  await makeBucket(gw, bucket);
});

afterAll(async () => {
  try {
    process.kill(redis.pid, "SIGCONT");
  } catch {
    // already gone
  }
  await gw?.stop();
  await redis?.stop();
});

describe("a commit whose record the audit log does not take", () => {
  it("answers unknown, then records it once on the repeated commit", async () => {
    const lease = await gw.leases.acquire({ bucket, prefix: "r/", ttlMs: 60_000 });
    const tx = await openTransaction(gw, lease.leaseId);
    expect((await putIn(gw, lease, tx.transactionId, bucket, "r/a", "a")).status).toBe(200);
    expect((await putIn(gw, lease, tx.transactionId, bucket, "r/b", "b")).status).toBe(200);
    process.kill(redis.pid, "SIGSTOP");
    let first: Awaited<ReturnType<typeof api>>;
    try {
      first = await api(gw, "POST", `/transactions/${tx.transactionId}/commit`);
    } finally {
      process.kill(redis.pid, "SIGCONT");
    }
    expect(first.status, first.text).toBe(503);
    expect(first.headers["x-fence-outcome"]).toBe("unknown");
    const again = await api(gw, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(again.status, again.text).toBe(200);
    expect(await getBody(gw, bucket, "r/a")).toBe("a");
    const third = await api(gw, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(third.json).toEqual(again.json);
    const records = await new FenceClient({ endpoint: gw.url, ...CREDENTIALS }).audit({
      transactionId: tx.transactionId,
    });
    expect(records.records.map((r) => r.op)).toEqual(["PutObject", "PutObject", "TransactionCommitted"]);
    await gw.leases.release(lease.leaseId);
  }, 60_000);
});
