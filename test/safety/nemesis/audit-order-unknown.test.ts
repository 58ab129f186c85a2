/**
 * Found by the nemesis run on Azure (seed 78052211, 40 s): two writes answered 503 `unknown`
 * (their commit answers lost) were recorded "accepted" after later writes of the same objects
 * with higher tokens. The store's order was right; the audit log's was not.
 *
 * The minimal form, on each remote store: two gateways on one Redis lease store and audit log
 * (through the Redis fault proxy). Gateway A's commit lands and its answer is lost; A learns from
 * the object's state that it landed, but its record waits in the network (as a paused replica
 * would hold it) past the log's timeout: A answers "unknown" and appends the record once it can.
 * The key's next lease is granted on gateway B meanwhile and writes: the grant fences the object
 * first, and the landed write's record must come before B's.
 *
 * And: a write whose outcome A cannot learn (the state unreadable after the lost answer) and whose
 * "unknown" record the log loses is still answered unknown, and recorded "unknown" (what its
 * client heard, appended again) then "accepted" once learnt, never refused; one that never landed
 * is recorded "unknown", then "rejected".
 */
import { describe, expect, it } from "vitest";
import type { RedisFaultProxy } from "../../support/redis-fault-proxy.js";
import { allAuditRecords } from "../../support/safety-helpers.js";
import { requireTools } from "../../support/tools.js";
import { sleep, waitFor } from "../../support/wait.js";
import { createBucket, del, newBucket, put, read } from "../faults/fault-kit.js";
import { FAULTY_STORES } from "../faults/faulty-store.js";
import { acceptedRecord, acceptedWrites, replicaPair } from "./replica-pair.js";

requireTools("redis-server");

describe.each(FAULTY_STORES)(
  "a write whose answer was lost, its outcome recorded late, on $name",
  ({ start }) => {
    const pair = replicaPair(start, "shared");

    for (const op of ["PutObject", "DeleteObject"] as const) {
      it(`lists a ${op} in the audit log in the order of the commits`, async () => {
        const { a, b, store } = pair;
        const [proxy] = pair.proxies as [RedisFaultProxy];
        const bucket = newBucket(store);
        await createBucket(a, bucket);
        const setup = await a.leases.acquire({ bucket, key: "k", ttlMs: 30_000 });
        expect((await put(a, bucket, "k", "zero", setup.fencingToken)).status).toBe(200);
        await a.leases.release(setup.leaseId);

        const first = await a.leases.acquire({ bucket, key: "k", ttlMs: 1_000 });
        // A's commit lands; its answer is lost. The record of its outcome, once A learns it, waits
        // in the network.
        const lost = store.proxy.on(store.commit(bucket, "k"), { kind: "drop-answer" });
        const held = proxy.on(
          { command: "EVALSHA", args: (x) => x.includes(op) && x.includes("accepted") },
          { kind: "hold" },
        );
        const answer =
          op === "PutObject"
            ? await put(a, bucket, "k", "first", first.fencingToken)
            : await del(a, bucket, "k", first.fencingToken);
        expect(lost.count, "the commit's answer was lost").toBe(1);
        expect(answer.outcome, `answered ${answer.status} ${answer.code}`).toBe("unknown");
        await waitFor(() => held.count > 0, { what: "A recording the outcome it learnt", timeoutMs: 15_000 });
        expect(await read(b, bucket, "k")).toBe(op === "PutObject" ? "first" : null);

        // A's lease ends; B is granted the key (fencing A's commit intent first) and writes over it.
        await sleep(1_100);
        const second = await b.leases.acquire({ bucket, key: "k", ttlMs: 30_000 });
        expect((await put(b, bucket, "k", "second", second.fencingToken)).status).toBe(200);
        held.release();
        await acceptedRecord(a, bucket, "k", answer.requestId);
        await sleep(500);

        const accepted = await acceptedWrites(a, bucket, "k");
        expect(
          accepted.map((r) => ({ op: r.op, token: r.token, requestId: r.requestId })),
          "the accepted writes of k in the audit log's order",
        ).toEqual([
          { op: "PutObject", token: setup.token, requestId: expect.any(String) },
          { op, token: first.token, requestId: answer.requestId },
          { op: "PutObject", token: second.token, requestId: expect.any(String) },
        ]);
      }, 60_000);
    }

    /**
     * A bucket whose key k a lease of gateway A has written once; the "unknown" record of A's next
     * put of k is lost on its way to the log (its Redis script reset).
     */
    async function keyLosingUnknownRecord() {
      const { a, store } = pair;
      const [proxy] = pair.proxies as [RedisFaultProxy];
      const bucket = newBucket(store);
      await createBucket(a, bucket);
      const lease = await a.leases.acquire({ bucket, key: "k", ttlMs: 30_000 });
      expect((await put(a, bucket, "k", "zero", lease.fencingToken)).status).toBe(200);
      const reset = proxy.on(
        { command: "EVALSHA", args: (x) => x.includes("PutObject") && x.includes("unknown") },
        { kind: "reset" },
      );
      const recordsOf = async (requestId: string) =>
        (await allAuditRecords(a.leases, { bucket, key: "k" })).filter((r) => r.requestId === requestId);
      return { a, store, bucket, lease, reset, recordsOf };
    }

    it("answers unknown and records the outcome when the log loses the unknown record", async () => {
      // The write's commit answer is lost, then its "unknown" record too: the answer still says
      // unknown, and nothing records the write as refused (it landed).
      const { a, store, bucket, lease, reset, recordsOf } = await keyLosingUnknownRecord();
      const lost = store.proxy.on(store.commit(bucket, "k"), { kind: "drop-answer" });
      // From then on, reads of the object's state fail for a while: the gateway cannot learn.
      const unreadable = lost.reached.then(() =>
        store.proxy.on(store.stateRead(bucket, "k"), { kind: "reset" }, { times: Number.POSITIVE_INFINITY }),
      );
      const answer = await put(a, bucket, "k", "landed", lease.fencingToken);
      (await unreadable).cancel();
      expect(lost.count, "the commit's answer was lost").toBe(1);
      expect(reset.count, `the unknown record was lost (answered ${answer.status})`).toBe(1);
      expect(answer.outcome, `answered ${answer.status} ${answer.code}`).toBe("unknown");
      expect(await read(a, bucket, "k")).toBe("landed");
      await acceptedRecord(a, bucket, "k", answer.requestId);
      // What the client heard, then how the write ended; never a refusal.
      expect((await recordsOf(answer.requestId)).map((r) => r.decision)).toEqual(["unknown", "accepted"]);
    }, 60_000);

    it("records unknown, then the outcome, when the log loses the unknown record of a write that never landed", async () => {
      // Found by the nemesis run on Azure (seed 2872530754): a put answered 503 unknown whose only
      // record said "rejected". Its commit never got through and its "unknown" record was lost:
      // the log must still say what the client heard before it says how the write ended.
      const { a, store, bucket, lease, reset, recordsOf } = await keyLosingUnknownRecord();
      // Every send of the commit is lost on the way (the store never sees it) until cancelled.
      const lost = store.proxy.on(store.commit(bucket, "k"), { kind: "reset" }, { times: Infinity });
      const answer = await put(a, bucket, "k", "never", lease.fencingToken);
      expect(reset.count, `the unknown record was lost (answered ${answer.status})`).toBe(1);
      expect(answer.outcome, `answered ${answer.status} ${answer.code}`).toBe("unknown");
      lost.cancel();
      const mine = () => recordsOf(answer.requestId);
      await waitFor(async () => (await mine()).some((r) => r.decision !== "unknown"), {
        what: "the write's outcome recorded",
        timeoutMs: 30_000,
      });
      expect(await read(a, bucket, "k")).toBe("zero");
      await sleep(300);
      expect((await mine()).map((r) => r.decision)).toEqual(["unknown", "rejected"]);
    }, 60_000);
  },
);
