/**
 * Found by the nemesis run on Azure (seed 2346836430, FENCEGATE_NEMESIS_MS=300000): a write whose
 * bytes were read back was recorded "rejected" (reason ServiceUnavailable) and answered 503 without
 * `x-fence-outcome: unknown`, and its commit intent was ended.
 *
 * How: the commit's answer is lost (the store acted); the store client retries the same
 * conditional write by itself, and the retry is refused with 412 (the first one changed the ETag);
 * the commit driver takes the 412 for a lost race, in which nothing of its own landed, and reads the
 * state again to decide again; that read fails too; a failed read after a lost race is taken for
 * "nothing was sent", so the write is refused (recorded "rejected", intent ended), although it
 * landed. Rules 5 and 6: a write that landed is never recorded as refused; its outcome, unknown to
 * the gateway, is answered "unknown" and recorded once learnt; and while it is unknown its intent
 * stays, so that a newer grant fences the object first.
 *
 * The minimal form, on each remote store: the answer of the object's first commit request is lost
 * (only the first: a retry reaches the store and is answered), then every read of the object's
 * state fails for a while.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TestGateway } from "../../support/gateway.js";
import { sleep } from "../../support/wait.js";
import { createBucket, gatewayOn, newBucket, put, read, settledRecords } from "../faults/fault-kit.js";
import { FAULTY_STORES, type FaultyStore } from "../faults/faulty-store.js";

describe.each(FAULTY_STORES)(
  "a commit whose answer is lost and whose retry is refused, on $name",
  ({ start }) => {
    let store: FaultyStore;
    let gw: TestGateway;

    beforeAll(async () => {
      store = await start();
      gw = await gatewayOn(store, { requestTimeoutMs: 3_000 });
    }, 60_000);

    afterAll(async () => {
      await gw?.stop();
      await store?.stop();
    });

    it("is never recorded as refused when it landed", async () => {
      const bucket = newBucket(store);
      await createBucket(gw, bucket);
      const lease = await gw.leases.acquire({ bucket, key: "k", ttlMs: 30_000 });
      // The first commit request reaches the store; its answer is lost. A retry is answered.
      const lost = store.proxy.on(store.commit(bucket, "k"), { kind: "drop-answer" });
      // From then on, reads of the object's state fail for a while.
      const unreadable = lost.reached.then(() =>
        store.proxy.on(store.stateRead(bucket, "k"), { kind: "reset" }, { times: Number.POSITIVE_INFINITY }),
      );
      const answer = await put(gw, bucket, "k", "landed", lease.fencingToken);
      expect(lost.count).toBe(1);
      await sleep(200);
      (await unreadable).cancel();
      // It landed.
      expect(await read(gw, bucket, "k")).toBe("landed");
      // Answered as landed (200) or unknown, recorded likewise, and never as refused.
      const records = await settledRecords(gw, bucket, answer.requestId, 15_000);
      const answered =
        answer.status === 200 ? "accepted" : answer.outcome === "unknown" ? "unknown" : "other";
      expect(
        { answered, decisions: records.map((r) => r.decision) },
        `the answer (${answer.status} ${answer.code} outcome=${answer.outcome}) and the records of a write that landed`,
      ).toEqual(
        answered === "accepted"
          ? { answered, decisions: ["accepted"] }
          : { answered: "unknown", decisions: ["unknown", "accepted"] },
      );
    }, 60_000);
  },
);
