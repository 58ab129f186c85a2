// Lost and late answers of a store, on every remote backend: a write whose commit was sent and
// whose answer never came is never answered as refused, its audit record says "unknown" until
// the gateway has learnt the outcome, and a late commit never lands after a newer lease's grant.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type TestGateway, tempDir } from "../../support/gateway.js";
import { sleep, waitFor } from "../../support/wait.js";
import {
  createBucket,
  expectAcceptedOrUnknown,
  gatewayOn,
  newBucket,
  put,
  read,
  recordsOf,
  settledRecords,
} from "./fault-kit.js";
import { FAULTY_STORES, type FaultyStore } from "./faulty-store.js";

describe.each(FAULTY_STORES)("lost and late answers on $name", ({ start }) => {
  let store: FaultyStore;
  let gw: TestGateway;

  beforeAll(async () => {
    store = await start();
    gw = await gatewayOn(store, { requestTimeoutMs: 1_000 });
  }, 60_000);

  afterAll(async () => {
    await gw?.stop();
    await store?.stop();
  });

  it("a commit whose answer is lost is answered as landed (or unknown), and audited as accepted", async () => {
    const bucket = newBucket(store);
    await createBucket(gw, bucket);
    const lease = await gw.leases.acquire({ bucket, key: "k", ttlMs: 30_000 });
    // Every commit of the key: the store acts, the gateway never hears.
    const lost = store.proxy.on(store.commit(bucket, "k"), { kind: "drop-answer" }, { times: Infinity });
    const answer = await put(gw, bucket, "k", "landed", lease.fencingToken);
    lost.cancel();
    expect(lost.count).toBeGreaterThan(0);
    // Its bytes are the object: it landed. Neither the answer nor the audit says otherwise.
    expect(await read(gw, bucket, "k")).toBe("landed");
    expect((await recordsOf(gw, bucket, answer.requestId)).map((r) => r.decision)).not.toContain("rejected");
    expectAcceptedOrUnknown(answer);
    const records = await settledRecords(gw, bucket, answer.requestId);
    expect(records.map((r) => r.decision)).not.toContain("rejected");
    expect(records.at(-1)).toMatchObject({ op: "PutObject", decision: "accepted", token: lease.token });
  });

  it("a commit that never gets through is answered 503 unknown, and its outcome is recorded once learnt", async () => {
    const bucket = newBucket(store);
    await createBucket(gw, bucket);
    const earlier = await gw.leases.acquire({ bucket, key: "k", ttlMs: 30_000 });
    expect((await put(gw, bucket, "k", "before", earlier.fencingToken)).status).toBe(200);
    await gw.leases.release(earlier.leaseId);
    const lease = await gw.leases.acquire({ bucket, key: "k", ttlMs: 30_000 });
    // Every send of the commit is lost on the way (the store never sees it).
    const lost = store.proxy.on(store.commit(bucket, "k"), { kind: "reset" }, { times: Infinity });
    const answer = await put(gw, bucket, "k", "never", lease.fencingToken);
    expect(answer).toMatchObject({ status: 503, outcome: "unknown", code: "ServiceUnavailable" });
    expect((await recordsOf(gw, bucket, answer.requestId)).map((r) => r.decision)).toEqual(["unknown"]);
    lost.cancel();
    // Once the store answers again, the gateway learns that the write never landed.
    const records = await settledRecords(gw, bucket, answer.requestId);
    expect(records.map((r) => r.decision)).toEqual(["unknown", "rejected"]);
    expect(await read(gw, bucket, "k")).toBe("before");
    // A retry with the same token is decided on the store's actual state.
    expect((await put(gw, bucket, "k", "retried", lease.fencingToken)).status).toBe(200);
    expect(await read(gw, bucket, "k")).toBe("retried");
  });

  it("a commit delayed past the deadline never lands after a newer lease's grant and first read", async () => {
    const bucket = newBucket(store);
    await createBucket(gw, bucket);
    const first = await gw.leases.acquire({ bucket, key: "k", ttlMs: 30_000 });
    expect((await put(gw, bucket, "k", "v1", first.fencingToken)).status).toBe(200);
    await gw.leases.release(first.leaseId);
    const a = await gw.leases.acquire({ bucket, key: "k", ttlMs: 1_500 });
    // Each send of A's commit is held in the network; they reach the store after B's first read.
    const late = store.proxy.on(store.commit(bucket, "k"), { kind: "hold" }, { times: 3 });
    const answer = await put(gw, bucket, "k", "late A", a.fencingToken);
    // A's lease ends; B is granted only once the object is fenced against A's late commit.
    await sleep(1_600);
    const b = await waitFor(() => gw.leases.acquire({ bucket, key: "k", ttlMs: 30_000 }).catch(() => null), {
      what: "B's grant",
      timeoutMs: 30_000,
      intervalMs: 250,
    });
    const seenByB = await read(gw, bucket, "k");
    const sent = late.count;
    expect(sent).toBeGreaterThan(0);
    late.release();
    await waitFor(
      () => store.proxy.seen.filter((s) => s.action === "hold" && s.status !== undefined).length >= sent,
      { what: "the late sends to reach the store", timeoutMs: 20_000 },
    );
    expect(await read(gw, bucket, "k")).toBe(seenByB);
    expect(answer).toMatchObject({ status: 503, outcome: "unknown" });
    // B's own write is fenced by nothing A did.
    expect((await put(gw, bucket, "k", "B", b.fencingToken)).status).toBe(200);
    expect(await read(gw, bucket, "k")).toBe("B");
    const records = await settledRecords(gw, bucket, answer.requestId);
    expect(records.at(-1)!.decision).toBe(seenByB === "late A" ? "accepted" : "rejected");
  }, 60_000);

  it("a landed commit whose answer was lost stays landed when a grant fences the object before the gateway looks again", async () => {
    const slow = await gatewayOn(store, { requestTimeoutMs: 15_000 });
    try {
      const bucket = newBucket(store);
      await createBucket(slow, bucket);
      const a = await slow.leases.acquire({ bucket, key: "k", ttlMs: 1_500 });
      const lost = store.proxy.on(store.commit(bucket, "k"), { kind: "drop-answer" });
      const writing = put(slow, bucket, "k", "A landed", a.fencingToken);
      await lost.reached;
      // The gateway's next look at the object, its read of the object's state, waits in the
      // network (conditional writes are sent once: no client retries the commit).
      const next = store.proxy.on(store.stateRead(bucket, "k"), { kind: "hold" });
      await next.reached;
      // Meanwhile A's lease ends and B's grant fences the object (its HCT goes above A's token).
      await sleep(1_600);
      const b = await slow.leases.acquire({ bucket, key: "k", ttlMs: 30_000 });
      expect(b.token).toBeGreaterThan(a.token);
      const seenByB = await read(slow, bucket, "k");
      next.release();
      const answer = await writing;
      // A's bytes landed before B's grant: A is never told its write was refused.
      expect(seenByB).toBe("A landed");
      expect(answer.status).not.toBe(409);
      expectAcceptedOrUnknown(answer);
      const records = await settledRecords(slow, bucket, answer.requestId);
      expect(records.map((r) => r.decision)).not.toContain("rejected");
      expect(records.at(-1)!.decision).toBe("accepted");
    } finally {
      await slow.stop();
    }
  }, 60_000);

  it("a lost answer the gateway cannot check is unknown, never refused, and is settled later", async () => {
    const bucket = newBucket(store);
    await createBucket(gw, bucket);
    const lease = await gw.leases.acquire({ bucket, key: "k", ttlMs: 30_000 });
    const lost = store.proxy.on(store.commit(bucket, "k"), { kind: "drop-answer" }, { times: Infinity });
    const armed = lost.reached.then(() =>
      // Every look at the object after the lost answer fails too.
      store.proxy.on(store.stateRead(bucket, "k"), { kind: "reset" }, { times: Infinity }),
    );
    const answer = await put(gw, bucket, "k", "landed unseen", lease.fencingToken);
    lost.cancel();
    (await armed).cancel();
    expect(await read(gw, bucket, "k")).toBe("landed unseen");
    expect((await recordsOf(gw, bucket, answer.requestId)).map((r) => r.decision)).not.toContain("rejected");
    expectAcceptedOrUnknown(answer);
    const records = await settledRecords(gw, bucket, answer.requestId);
    expect(records.at(-1)!.decision).toBe("accepted");
  });

  it("a commit whose gateway stopped before learning its outcome is fenced by the next grant", async () => {
    const dataDir = tempDir();
    let first: TestGateway | undefined = await gatewayOn(
      store,
      { requestTimeoutMs: 1_000 },
      { dataDir: dataDir.path },
    );
    try {
      const bucket = newBucket(store);
      await createBucket(first, bucket);
      const a = await first.leases.acquire({ bucket, key: "k", ttlMs: 1_500 });
      expect((await put(first, bucket, "k", "v1", a.fencingToken)).status).toBe(200);
      const late = store.proxy.on(store.commit(bucket, "k"), { kind: "hold" }, { times: 3 });
      // The gateway cannot look at the object any more: it never learns the outcome.
      const blind = late.reached.then(() =>
        store.proxy.on(store.stateRead(bucket, "k"), { kind: "reset" }, { times: Infinity }),
      );
      const answer = await put(first, bucket, "k", "late A", a.fencingToken);
      expect(answer).toMatchObject({ status: 503, outcome: "unknown" });
      await first.stop();
      first = undefined;
      (await blind).cancel();
      // Another gateway on the same lease store: B's grant must fence A's commit first.
      const second = await gatewayOn(store, { requestTimeoutMs: 1_000 }, { dataDir: dataDir.path });
      try {
        await sleep(1_600);
        const b = await second.leases.acquire({ bucket, key: "k", ttlMs: 30_000 });
        const seenByB = await read(second, bucket, "k");
        const sent = late.count;
        late.release();
        await waitFor(
          () => store.proxy.seen.filter((x) => x.action === "hold" && x.status !== undefined).length >= sent,
          { what: "the late sends to reach the store", timeoutMs: 20_000 },
        );
        expect(await read(second, bucket, "k")).toBe(seenByB);
        expect((await put(second, bucket, "k", "B", b.fencingToken)).status).toBe(200);
      } finally {
        await second.stop();
      }
    } finally {
      await first?.stop();
      dataDir.cleanup();
    }
  }, 60_000);
});
