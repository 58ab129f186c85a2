/**
 * Found by the nemesis run on Azure (seed 78052211, 40 s): a write that landed but whose record the
 * audit log did not take (answered 503 `unknown`) was recorded after the writes that came later on
 * its object, tokens going backwards in the log.
 *
 * How: the write W landed; its record failed (the log unreachable from its gateway for a moment),
 * so its gateway records it once it can. The same lease wrote the object again through the other
 * gateway (W2, over W). The object's state keeps the note of its last write only, W2's: so the
 * next lease's grant, fencing the object, recorded W2 (already recorded) and not W, and the next
 * lease's write was recorded before W. A write that lands over another is itself the first to
 * learn that the other landed: it records it before it commits.
 *
 * The minimal form, on each remote store: two gateways on one Redis lease store and audit log,
 * each through its own Redis fault proxy; gateway A's appends of W's record are reset until the
 * end.
 */
import { describe, expect, it } from "vitest";
import type { RedisFaultProxy } from "../../support/redis-fault-proxy.js";
import { requireTools } from "../../support/tools.js";
import { sleep } from "../../support/wait.js";
import { api, openTransaction, putIn } from "../../transactions/support.js";
import { createBucket, del, newBucket, put, read } from "../faults/fault-kit.js";
import { FAULTY_STORES } from "../faults/faulty-store.js";
import { acceptedRecord, acceptedWrites, replicaPair } from "./replica-pair.js";

requireTools("redis-server");

describe.each(FAULTY_STORES)("a landed write whose record is late, written over, on $name", ({ start }) => {
  const pair = replicaPair(start, "each");

  it("is listed before the writes that came after it", async () => {
    const { a, b, store } = pair;
    const [proxyA] = pair.proxies as [RedisFaultProxy];
    const bucket = newBucket(store);
    await createBucket(a, bucket);
    const first = await a.leases.acquire({ bucket, key: "k", ttlMs: 1_500 });
    // Gateway A cannot append an accepted PutObject record until the end.
    const refused = proxyA.on(
      { command: "EVALSHA", args: (x) => x.includes("PutObject") && x.includes("accepted") },
      { kind: "reset" },
      { times: Number.POSITIVE_INFINITY },
    );
    const w = await put(a, bucket, "k", "w", first.fencingToken);
    expect(w.outcome, `W answered ${w.status} ${w.code}`).toBe("unknown");
    expect(await read(b, bucket, "k")).toBe("w");
    // The same lease writes the object again, through gateway B.
    const w2 = await put(b, bucket, "k", "w2", first.fencingToken);
    expect(w2.status).toBe(200);
    // The lease ends; the next one is granted on B (fencing the object) and writes.
    await sleep(1_600);
    const second = await b.leases.acquire({ bucket, key: "k", ttlMs: 30_000 });
    const w3 = await put(b, bucket, "k", "w3", second.fencingToken);
    expect(w3.status).toBe(200);
    // A's log comes back: it records what it learnt.
    refused.cancel();
    await acceptedRecord(a, bucket, "k", w.requestId);

    const accepted = await acceptedWrites(a, bucket, "k");
    expect(
      accepted.map((r) => r.requestId),
      "the accepted writes of k in the audit log's order (W, W2, W3)",
    ).toEqual([w.requestId, w2.requestId, w3.requestId]);
  }, 60_000);

  it("is listed in its place when it deletes an object its lease had deleted already", async () => {
    // The second delete changes no byte and no HCT; its note must still reach the object's state,
    // or the next grant records the first delete and not this one.
    const { a, b, store } = pair;
    const [proxyA] = pair.proxies as [RedisFaultProxy];
    const bucket = newBucket(store);
    await createBucket(a, bucket);
    const first = await a.leases.acquire({ bucket, key: "k", ttlMs: 1_500 });
    expect((await put(b, bucket, "k", "w", first.fencingToken)).status).toBe(200);
    const d1 = await del(b, bucket, "k", first.fencingToken);
    expect(d1.status).toBe(204);
    // Gateway A cannot append the second delete's accepted record until the end.
    const refused = proxyA.on(
      {
        command: "EVALSHA",
        args: (x) => x.includes("DeleteObject") && x.includes("accepted") && !x.includes(d1.requestId),
      },
      { kind: "reset" },
      { times: Number.POSITIVE_INFINITY },
    );
    const d2 = await del(a, bucket, "k", first.fencingToken);
    expect(d2.outcome, `the second delete answered ${d2.status} ${d2.code}`).toBe("unknown");
    await sleep(1_600);
    const second = await b.leases.acquire({ bucket, key: "k", ttlMs: 30_000 });
    const w3 = await put(b, bucket, "k", "w3", second.fencingToken);
    expect(w3.status).toBe(200);
    refused.cancel();
    await acceptedRecord(a, bucket, "k", d2.requestId);

    const accepted = await acceptedWrites(a, bucket, "k");
    expect(accepted.map((r) => r.requestId).slice(1), "the accepted writes of k after the first put").toEqual(
      [d1.requestId, d2.requestId, w3.requestId],
    );
  }, 60_000);

  it("is listed before a transaction's write staged over it", async () => {
    const { a, b, store } = pair;
    const [proxyA] = pair.proxies as [RedisFaultProxy];
    const bucket = newBucket(store);
    await createBucket(a, bucket);
    const lease = await a.leases.acquire({ bucket, key: "k", ttlMs: 30_000 });
    const refused = proxyA.on(
      { command: "EVALSHA", args: (x) => x.includes("PutObject") && x.includes("accepted") },
      { kind: "reset" },
      { times: Number.POSITIVE_INFINITY },
    );
    const w = await put(a, bucket, "k", "w", lease.fencingToken);
    expect(w.outcome, `W answered ${w.status} ${w.code}`).toBe("unknown");
    // The lease stages a write of the object in a transaction through B, and commits it.
    const tx = await openTransaction(b, lease.leaseId);
    const staged = await putIn(b, lease, tx.transactionId, bucket, "k", "staged");
    expect(staged.status, staged.text).toBe(200);
    const committed = await api(b, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(committed.status, committed.text).toBe(200);
    expect(await read(b, bucket, "k")).toBe("staged");
    refused.cancel();
    await acceptedRecord(a, bucket, "k", w.requestId);

    const stagedId = String(staged.headers["x-amz-request-id"]);
    expect(
      (await acceptedWrites(a, bucket, "k")).map((r) => r.requestId),
      "the accepted writes of k in the audit log's order (W, the staged write)",
    ).toEqual([w.requestId, stagedId]);
  }, 60_000);
});
