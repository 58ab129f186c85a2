/**
 * A store's indexes only narrow the candidates it reads; whatever they are, its answers must be
 * those of a scan over every lease with the rules of lease-rules.ts. A seeded random history of
 * grants, renewals, releases and clock steps over resources that nest, share prefixes and use
 * non-ASCII (also astral) characters, checked against such a scan. Part of the lease-store contract.
 */
import { describe, expect, it } from "vitest";
import { covers, overlaps } from "../../src/leases/lease-rules.js";
import type { LeaseRecord, LeaseResource } from "../../src/leases/lease-store.js";
import type { LeaseStoreContext } from "./lease-store-context.js";

const STRINGS = ["", "a", "a/", "a/b", "a/b/", "a/b/c", "ab", "b/", "ü", "ü/", "üx", "😀", "😀/x", "\uffff"];
const KEYS = STRINGS.filter((s) => s !== "");
const BUCKETS = ["b", "c"];

/** mulberry32: a small seeded generator, so that a failure replays exactly. */
function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const byToken = (a: LeaseRecord, b: LeaseRecord) => a.token - b.token;

export function describeLeaseModelContract(t: LeaseStoreContext): void {
  describe("agreement with a scan over every lease", () => {
    it("answers as the scan does over a random history", async () => {
      const random = seeded(20261122);
      const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
      const model: LeaseRecord[] = [];
      const isActive = (l: LeaseRecord) =>
        l.releasedAt === undefined && l.endedAt === undefined && l.expiresAt > t.clock();
      const replace = (lease: LeaseRecord) => {
        model[model.findIndex((l) => l.leaseId === lease.leaseId)] = lease;
      };

      async function checkLookups(): Promise<void> {
        for (const bucket of BUCKETS) {
          for (const key of KEYS) {
            const expected = model.filter((l) => isActive(l) && covers(l, bucket, key)).sort(byToken)[0];
            expect(await t.store.findActiveCovering(bucket, key), `${bucket}/${key}`).toEqual(
              expected ?? null,
            );
          }
        }
        for (const lease of model) {
          const newer = model.filter((l) => l.token > lease.token && overlaps(l, lease));
          const found = await t.store.findNewerOverlapping(lease);
          if (newer.length === 0) expect(found).toBeNull();
          else expect(newer).toContainEqual(found);
        }
        const listed = model.filter(isActive).sort(byToken);
        expect(await t.store.list({})).toEqual(listed);
      }

      for (let step = 0; step < 400; step++) {
        const roll = random();
        if (roll < 0.55) {
          const bucket = pick(BUCKETS);
          const resource: LeaseResource =
            random() < 0.5 ? { bucket, key: pick(KEYS) } : { bucket, prefix: pick(STRINGS) };
          const ttlMs = 1 + Math.floor(random() * 60);
          const result = await t.store.tryAcquire({ resource, ttlMs, owner: "model" });
          const blockers = model.filter((l) => isActive(l) && overlaps(l, resource));
          if (blockers.length > 0) {
            // Which of several holders a refusal names is the store's choice.
            if (result.granted || !("heldBy" in result))
              throw new Error(`expected heldBy: ${JSON.stringify(result)}`);
            expect(blockers, JSON.stringify(resource)).toContainEqual(result.heldBy);
          } else {
            expect(result.granted, JSON.stringify(resource)).toBe(true);
            if (result.granted) {
              // The grant saw the overlapping leases that had expired unnoticed end.
              for (const lapsed of result.expired ?? []) replace(lapsed);
              model.push(result.lease);
            }
          }
        } else if (roll < 0.7) {
          const open = model.filter((l) => l.releasedAt === undefined && l.endedAt === undefined);
          if (open.length > 0) replace(await t.store.release(pick(open).leaseId));
        } else if (roll < 0.8) {
          const active = model.filter(isActive);
          if (active.length > 0)
            replace(await t.store.renew(pick(active).leaseId, 1 + Math.floor(random() * 60)));
        } else {
          t.clock.advance(Math.floor(random() * 25));
        }
        if (step % 20 === 19) await checkLookups();
      }
      expect(model.length).toBeGreaterThan(50);
    });
  });
}
