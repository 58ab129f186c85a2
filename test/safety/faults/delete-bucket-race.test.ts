// DeleteBucket racing a fenced write, on every remote backend, with the store's answers delayed at
// random (a seeded schedule per round, so a failing round can be replayed): the write is either
// refused or keeps its bucket. Never both answered as done: a write acknowledged into a bucket
// whose deletion was acknowledged too is an acknowledged write lost.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TestGateway } from "../../support/gateway.js";
import { signedRequest } from "../../support/signed-http.js";
import { sleep } from "../../support/wait.js";
import { createBucket, gatewayOn, newBucket, put, read } from "./fault-kit.js";
import { FAULTY_STORES, type FaultyStore } from "./faulty-store.js";

const ROUNDS = Number(process.env.FENCEGATE_DELETE_RACE_ROUNDS ?? 12);

describe.each(FAULTY_STORES)("DeleteBucket racing a write on $name", ({ start }) => {
  let store: FaultyStore;
  let gw: TestGateway;

  beforeAll(async () => {
    store = await start();
    gw = await gatewayOn(store, { requestTimeoutMs: 10_000 });
  }, 60_000);

  afterAll(async () => {
    await gw?.stop();
    await store?.stop();
  });

  it(`never acknowledges both the write and the deletion (${ROUNDS} rounds)`, async () => {
    const outcomes: string[] = [];
    const violations: string[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const seed = 1000 + round;
      const bucket = newBucket(store);
      await createBucket(gw, bucket);
      const lease = await gw.leases.acquire({ bucket, key: "k", ttlMs: 60_000 });
      // The bucket's first write (the S3 backend then checks that the store honours conditional
      // writes), done and gone, so that the race is between the two requests alone.
      const warm = await gw.leases.acquire({ bucket, key: "warm-up", ttlMs: 60_000 });
      expect((await put(gw, bucket, "warm-up", "x", warm.fencingToken)).status).toBe(200);
      expect(
        (
          await signedRequest(gw.url, {
            method: "DELETE",
            path: `/${bucket}/warm-up`,
            headers: { "x-fence-token": warm.fencingToken },
          })
        ).status,
      ).toBe(204);
      // Every store request of this bucket may come late: the two requests interleave anew each round.
      store.proxy.chaos({
        seed,
        probability: 0.6,
        actions: [
          { kind: "delay", ms: 20 },
          { kind: "delay", ms: 80 },
          { kind: "delay", ms: 200 },
        ],
        match: { path: (p) => p.startsWith(`/${bucket}`) || p.includes(`/${bucket}/`) },
      });
      const writing = put(gw, bucket, "k", `round ${round}`, lease.fencingToken);
      await sleep((seed * 37) % 250);
      const deleting = signedRequest(gw.url, { method: "DELETE", path: `/${bucket}` });
      const [written, deleted] = await Promise.all([writing, deleting]);
      store.proxy.calm();
      outcomes.push(`${written.status}/${deleted.status}`);
      if (written.status === 200 && deleted.status === 204) {
        violations.push(`round ${round} (seed ${seed}): the write and the deletion were both acknowledged`);
      }
      if (written.status === 200) {
        // It kept its bucket: the deletion was refused, and the object is there.
        const content = await read(gw, bucket, "k").catch((e: Error) => `unreadable: ${e.message}`);
        if (content !== `round ${round}`)
          violations.push(`round ${round} (seed ${seed}): the write is gone (${content})`);
      }
      if (deleted.status === 204) {
        // Created again, the bucket has no object, and the fenced key keeps its HCT.
        await createBucket(gw, bucket);
        const back = await read(gw, bucket, "k");
        if (back !== null) {
          violations.push(
            `round ${round} (seed ${seed}): deleted (write answered ${written.status}), yet the re-created bucket holds "${back}"`,
          );
        }
      }
      await gw.leases.release(lease.leaseId).catch(() => undefined);
    }
    expect(violations).toEqual([]);
    // Both orders happened: the test exercised the race, not one side of it.
    expect(new Set(outcomes).size, outcomes.join(" ")).toBeGreaterThan(1);
  }, 180_000);

  it("a commit held after its checks can never land once the deletion is acknowledged", async () => {
    const bucket = newBucket(store);
    await createBucket(gw, bucket);
    const lease = await gw.leases.acquire({ bucket, key: "k", ttlMs: 60_000 });
    // The write has read its object and the bucket's state; its conditional write waits.
    const held = store.proxy.on(store.commit(bucket, "k"), { kind: "hold" });
    const writing = put(gw, bucket, "k", "held", lease.fencingToken);
    await held.reached;
    const deleted = await signedRequest(gw.url, { method: "DELETE", path: `/${bucket}` });
    held.release();
    const written = await writing;
    // Deleted: the write was refused (it never landed), and the bucket holds nothing of it.
    expect(deleted.status).toBe(204);
    expect(written.status).not.toBe(200);
    await createBucket(gw, bucket);
    expect(await read(gw, bucket, "k")).toBeNull();
  });
});
