import { describe, expect, it } from "vitest";
import { overlaps } from "../../src/leases/lease-rules.js";
import type { LeaseResource } from "../../src/leases/lease-store.js";
import { type Waiter, WaitQueue } from "../../src/leases/wait-queue.js";

/** A small random resource: few buckets, keys and prefixes, so that overlaps are frequent. */
function randomResource(rand: () => number): LeaseResource {
  const bucket = rand() < 0.8 ? "b" : "c";
  const path = ["a/", "a/b", "a/c", "ab", "b/", "b/x", ""][Math.floor(rand() * 7)]!;
  return rand() < 0.25 ? { bucket, prefix: path } : { bucket, key: path === "" ? "k" : path };
}

/** Deterministic pseudo-random numbers (mulberry32). */
function seeded(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe("WaitQueue.heads", () => {
  it("picks exactly the waiters with no earlier overlapping waiter, over random queues", () => {
    const rand = seeded(7);
    for (let round = 0; round < 500; round++) {
      const queue = new WaitQueue<Waiter>();
      const waiters: Waiter[] = Array.from({ length: 1 + Math.floor(rand() * 30) }, (_, id) => ({
        id,
        resource: randomResource(rand),
        heldBy: null,
      }));
      for (const w of waiters) queue.add(w);
      // Some leave, as served or impatient waiters do.
      for (const w of waiters) if (rand() < 0.2) queue.remove(w);
      const queued = queue.all();
      const expected = queued.filter(
        (w, i) => !queued.slice(0, i).some((x) => overlaps(x.resource, w.resource)),
      );
      expect(queue.heads().map((w) => w.id)).toEqual(expected.map((w) => w.id));
    }
  });
});
