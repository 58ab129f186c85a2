// The S3 backend's garbage collector against a slow commit: the record PUT of a write is held in
// the network (inside the request time limit) while the collector runs with a short grace period.
// Whatever happens, an acknowledged write is readable: the collector never removes the bytes a
// commit may still name.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TestGateway } from "../../support/gateway.js";
import { sleep } from "../../support/wait.js";
import { createBucket, gatewayOn, newBucket, put, read, settledRecords } from "./fault-kit.js";
import { type FaultyStore, faultyS3 } from "./faulty-store.js";

describe("the S3 collector and a slow commit", () => {
  let store: FaultyStore;
  let gw: TestGateway;

  beforeAll(async () => {
    store = await faultyS3();
    gw = await gatewayOn(store, { requestTimeoutMs: 15_000, gcGraceMs: 800, gcIntervalMs: 200 });
  }, 60_000);

  afterAll(async () => {
    await gw?.stop();
    await store?.stop();
  });

  it("never acknowledges a write whose bytes it collected", async () => {
    const bucket = newBucket(store);
    await createBucket(gw, bucket);
    const lease = await gw.leases.acquire({ bucket, key: "k", ttlMs: 60_000 });
    // A grace period this short may refuse an ordinary write (503, retryable): retry until it lands.
    const committed = async (body: string) => {
      for (let attempt = 1; attempt <= 10; attempt++) {
        const answer = await put(gw, bucket, "k", body, lease.fencingToken);
        if (answer.status === 200) return;
        expect(answer.status).toBe(503);
      }
      throw new Error(`"${body}" was never committed`);
    };
    await committed("before");
    const slow = store.proxy.on(store.commit(bucket, "k"), { kind: "hold" });
    const writing = put(gw, bucket, "k", "slow", lease.fencingToken);
    await slow.reached;
    // Several collections run while the commit waits, each past the blob's grace period.
    await sleep(2_500);
    slow.release();
    const answer = await writing;
    // Acknowledged: its bytes are there. Refused: the object is as it was. Never a 500 later.
    const content = await read(gw, bucket, "k");
    if (answer.status === 200) expect(content).toBe("slow");
    else expect(content).toBe("before");
    expect([200, 503]).toContain(answer.status);
    // Either way, the audit's last word on it says the same.
    const records = await settledRecords(gw, bucket, answer.requestId);
    expect(records.at(-1)!.decision).toBe(answer.status === 200 ? "accepted" : "rejected");
    // And a retry with the same token commits.
    await committed("retried");
    expect(await read(gw, bucket, "k")).toBe("retried");
  }, 60_000);
});
