/**
 * The conformance suite every LeaseStore passes (embedded on a file and in memory, Redis, Redlock).
 * Time is a fake clock handed to the factory: no test sleeps. Commit intents and the parts that
 * depend on a store's domain live in their own files and run as part of this suite.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { fakeClock } from "../../src/core/clock.js";
import { overlaps } from "../../src/leases/lease-rules.js";
import type { LeaseEvents, LeaseRecord, LeaseResource, LeaseStore } from "../../src/leases/lease-store.js";
import { describeCommitIntentContract } from "./commit-intents.contract.js";
import { describeLeaseDomainContract } from "./lease-domain.contract.js";
import { describeLeaseEndingContract } from "./lease-ending.contract.js";
import { describeLeaseModelContract } from "./lease-model.contract.js";
import {
  expectDomainError,
  type FakeClock,
  grantedLease,
  type LeaseStoreContext,
  type RecordingEvents,
  recordingEvents,
  TTL,
} from "./lease-store-context.js";

export { expectDomainError, type FakeClock };

export type LeaseStoreHarness = {
  store: LeaseStore;
  /** Closes the store (and whatever it runs on) and opens it again on the same state. */
  reopen?: () => Promise<LeaseStore>;
  /** Closes whatever is open now and removes the state. */
  cleanup: () => Promise<void>;
};

/** Builds the store under test on `clock`, recording its lease events in `events`. */
export type LeaseStoreFactory = (clock: FakeClock, events: LeaseEvents) => Promise<LeaseStoreHarness>;

const NO_RESTART = "the store keeps no state across a restart (its harness has no reopen)";

export function describeLeaseStoreContract(name: string, factory: LeaseStoreFactory): void {
  describe(`LeaseStore contract: ${name}`, () => {
    let clock: FakeClock;
    let harness: LeaseStoreHarness;
    let store: LeaseStore;
    let events: RecordingEvents;

    beforeEach(async () => {
      clock = fakeClock();
      events = recordingEvents(() => store?.domain);
      harness = await factory(clock, events);
      store = harness.store;
    });

    afterEach(async () => {
      await harness.cleanup();
    });

    async function grant(resource: LeaseResource, ttlMs = TTL, owner = "worker"): Promise<LeaseRecord> {
      return grantedLease(await store.tryAcquire({ resource, ttlMs, owner }), JSON.stringify(resource));
    }

    const context: LeaseStoreContext = {
      get store() {
        return store;
      },
      get clock() {
        return clock;
      },
      get events() {
        return events;
      },
      grant,
    };

    async function reopen(): Promise<void> {
      store = await harness.reopen!();
    }

    describe("tokens", () => {
      it("grants a lease with the requested resource, owner and times", async () => {
        const lease = await grant({ bucket: "b", key: "k" }, 30_000, "worker-7");
        expect(lease).toMatchObject({ bucket: "b", key: "k", owner: "worker-7", ttlMs: 30_000 });
        expect(lease.prefix).toBeUndefined();
        expect(lease.releasedAt).toBeUndefined();
        expect(lease.acquiredAt).toBe(clock());
        expect(lease.expiresAt).toBe(clock() + 30_000);
        expect(Number.isSafeInteger(lease.token) && lease.token > 0).toBe(true);
        expect(lease.leaseId).toMatch(/^[A-Za-z0-9_-]{8,}$/);
        expect(await store.get(lease.leaseId)).toEqual(lease);
      });

      it("grants a prefix lease", async () => {
        const lease = await grant({ bucket: "b", prefix: "logs/" });
        expect(lease).toMatchObject({ bucket: "b", prefix: "logs/" });
        expect(lease.key).toBeUndefined();
        expect(await store.get(lease.leaseId)).toEqual(lease);
      });

      it("gives every grant a higher token than the one before, released or not", async () => {
        const tokens: number[] = [];
        for (let i = 0; i < 20; i++) {
          const lease = await grant({ bucket: "b", key: i % 2 ? "same" : `k${i}` });
          tokens.push(lease.token);
          if (i % 2) await store.release(lease.leaseId);
          clock.advance(1);
        }
        for (let i = 1; i < tokens.length; i++) expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);
      });

      it("gives distinct ids and tokens to concurrent grants on distinct keys", async () => {
        const results = await Promise.all(
          Array.from({ length: 50 }, (_, i) =>
            store.tryAcquire({ resource: { bucket: "b", key: `k${i}` }, ttlMs: TTL, owner: `w${i}` }),
          ),
        );
        const leases = results.map((r) => (r.granted ? r.lease : null));
        expect(leases.every((l) => l !== null)).toBe(true);
        expect(new Set(leases.map((l) => l!.token)).size).toBe(50);
        expect(new Set(leases.map((l) => l!.leaseId)).size).toBe(50);
      });

      it("never reuses or lowers a token across a restart", async (ctx) => {
        ctx.skip(!harness.reopen, NO_RESTART);
        const before = [await grant({ bucket: "b", key: "a" }), await grant({ bucket: "b", key: "c" })];
        await store.release(before[1]!.leaseId);
        await reopen();
        const after = await grant({ bucket: "b", key: "d" });
        expect(after.token).toBeGreaterThan(Math.max(...before.map((l) => l.token)));
        // State survives too: the unreleased lease is still held, the released one still known.
        const held = await store.tryAcquire({ resource: { bucket: "b", key: "a" }, ttlMs: TTL, owner: "x" });
        expect(held).toMatchObject({ granted: false, heldBy: { leaseId: before[0]!.leaseId } });
        expect((await store.get(before[1]!.leaseId))?.releasedAt).toBe(clock());
      });
    });

    describe("mutual exclusion", () => {
      type Case = [string, LeaseResource, LeaseResource, boolean];
      const cases: Case[] = [
        ["same key", { bucket: "b", key: "a/b" }, { bucket: "b", key: "a/b" }, true],
        ["different keys", { bucket: "b", key: "a/b" }, { bucket: "b", key: "a/c" }, false],
        ["a key and a longer key", { bucket: "b", key: "a/b" }, { bucket: "b", key: "a/b/c" }, false],
        ["key under a prefix", { bucket: "b", key: "logs/1" }, { bucket: "b", prefix: "logs/" }, true],
        ["prefix over a key", { bucket: "b", prefix: "logs/" }, { bucket: "b", key: "logs/1" }, true],
        ["key equal to the prefix", { bucket: "b", prefix: "logs/" }, { bucket: "b", key: "logs/" }, true],
        ["key not under the prefix", { bucket: "b", key: "log" }, { bucket: "b", prefix: "logs/" }, false],
        ["same prefix", { bucket: "b", prefix: "a/" }, { bucket: "b", prefix: "a/" }, true],
        ["nested prefix, outer first", { bucket: "b", prefix: "a/" }, { bucket: "b", prefix: "a/b/" }, true],
        ["nested prefix, inner first", { bucket: "b", prefix: "a/b/" }, { bucket: "b", prefix: "a/" }, true],
        ["disjoint prefixes", { bucket: "b", prefix: "a/" }, { bucket: "b", prefix: "b/" }, false],
        ["sibling prefixes", { bucket: "b", prefix: "a/b/" }, { bucket: "b", prefix: "a/c/" }, false],
        [
          "empty prefix (whole bucket) over a key",
          { bucket: "b", prefix: "" },
          { bucket: "b", key: "x" },
          true,
        ],
        ["key under the empty prefix", { bucket: "b", key: "x" }, { bucket: "b", prefix: "" }, true],
        ["same key, different buckets", { bucket: "b1", key: "k" }, { bucket: "b2", key: "k" }, false],
        [
          "nested prefixes, different buckets",
          { bucket: "b1", prefix: "a/" },
          { bucket: "b2", prefix: "a/b/" },
          false,
        ],
        ["`_` is not a wildcard", { bucket: "b", prefix: "a_" }, { bucket: "b", key: "ab" }, false],
        ["`%` is not a wildcard", { bucket: "b", prefix: "a%" }, { bucket: "b", prefix: "abc/" }, false],
        ["non-ASCII prefix over a key", { bucket: "b", prefix: "ü/" }, { bucket: "b", key: "ü/1" }, true],
        ["non-ASCII sibling", { bucket: "b", prefix: "ü/" }, { bucket: "b", key: "ü0" }, false],
      ];

      it.each(cases)("%s", async (_name, first, second, conflict) => {
        const held = await grant(first);
        const result = await store.tryAcquire({ resource: second, ttlMs: TTL, owner: "other" });
        if (conflict) {
          expect(result.granted).toBe(false);
          expect(result).toEqual({ granted: false, heldBy: held });
        } else {
          expect(result.granted).toBe(true);
          if (result.granted) expect(result.lease.token).toBeGreaterThan(held.token);
        }
      });

      it("grants exactly one of many concurrent attempts on one key", async () => {
        const results = await Promise.all(
          Array.from({ length: 50 }, (_, i) =>
            store.tryAcquire({ resource: { bucket: "b", key: "hot" }, ttlMs: TTL, owner: `w${i}` }),
          ),
        );
        const granted = results.filter((r) => r.granted);
        expect(granted).toHaveLength(1);
        const winner = granted[0]!.granted ? granted[0]!.lease : null;
        for (const r of results)
          if (!r.granted) expect(r).toMatchObject({ heldBy: { leaseId: winner!.leaseId } });
      });

      it("never grants overlapping leases to concurrent attempts on a prefix and the keys under it", async () => {
        const resources: LeaseResource[] = [
          { bucket: "b", prefix: "p/" },
          { bucket: "b", prefix: "p/q/" },
          ...Array.from(
            { length: 20 },
            (_, i): LeaseResource => ({ bucket: "b", key: `p/${i % 2 ? "q/" : ""}${i}` }),
          ),
        ];
        const results = await Promise.all(
          resources.map((resource, i) => store.tryAcquire({ resource, ttlMs: TTL, owner: `w${i}` })),
        );
        const granted = results.flatMap((r) => (r.granted ? [r.lease] : []));
        expect(granted.length).toBeGreaterThan(0);
        for (const a of granted) for (const b of granted) if (a !== b) expect(overlaps(a, b)).toBe(false);
        expect(await store.list({ bucket: "b" })).toEqual([...granted].sort((a, b) => a.token - b.token));
      });
    });

    describe("expiry", () => {
      it("holds the resource until expiresAt, then grants it again with a higher token", async () => {
        const first = await grant({ bucket: "b", key: "k" }, 1_000);
        clock.advance(999);
        expect(
          (await store.tryAcquire({ resource: { bucket: "b", key: "k" }, ttlMs: TTL, owner: "o" })).granted,
        ).toBe(false);
        clock.advance(1); // now == expiresAt: expired
        const second = await grant({ bucket: "b", key: "k" });
        expect(second.token).toBeGreaterThan(first.token);
      });

      it("frees a prefix when its lease expires", async () => {
        const first = await grant({ bucket: "b", prefix: "p/" }, 1_000);
        clock.advance(1_000);
        const second = await grant({ bucket: "b", key: "p/x" });
        expect(second.token).toBeGreaterThan(first.token);
        // Still remembered, and seen to end by the grant (it stays ended whatever the clock does).
        expect(await store.get(first.leaseId)).toEqual({ ...first, endedAt: first.expiresAt });
      });
    });

    describe("renew", () => {
      it("extends an active lease from now and keeps its token", async () => {
        const lease = await grant({ bucket: "b", key: "k" }, 1_000);
        clock.advance(900);
        const renewed = await store.renew(lease.leaseId, 5_000);
        expect(renewed).toEqual({ ...lease, ttlMs: 5_000, expiresAt: clock() + 5_000 });
        expect(await store.get(lease.leaseId)).toEqual(renewed);
        clock.advance(4_999);
        expect(
          (await store.tryAcquire({ resource: { bucket: "b", key: "k" }, ttlMs: TTL, owner: "o" })).granted,
        ).toBe(false);
        expect((await store.findActiveCovering("b", "k"))?.leaseId).toBe(lease.leaseId);
      });

      it("refuses an expired lease with LeaseLost, even if nobody took the resource", async () => {
        const lease = await grant({ bucket: "b", key: "k" }, 1_000);
        clock.advance(1_000);
        const error = await expectDomainError(store.renew(lease.leaseId, 1_000), "LeaseLost");
        expect(error.message).toMatch(/expired/);
        expect((await store.get(lease.leaseId))?.expiresAt).toBe(lease.expiresAt);
      });

      it("refuses an expired lease whose resource was granted again", async () => {
        const lease = await grant({ bucket: "b", key: "k" }, 1_000);
        clock.advance(2_000);
        await grant({ bucket: "b", key: "k" });
        await expectDomainError(store.renew(lease.leaseId, 1_000), "LeaseLost");
      });

      it("refuses a released lease with LeaseLost", async () => {
        const lease = await grant({ bucket: "b", key: "k" });
        await store.release(lease.leaseId);
        const error = await expectDomainError(store.renew(lease.leaseId, 1_000), "LeaseLost");
        expect(error.message).toMatch(/released/);
      });

      it("refuses an unknown lease with LeaseNotFound", async () => {
        await expectDomainError(store.renew("no-such-lease", 1_000), "LeaseNotFound");
      });
    });

    describe("release", () => {
      it("ends the lease, frees the resource and keeps the lease answerable", async () => {
        const lease = await grant({ bucket: "b", prefix: "p/" });
        clock.advance(10);
        const released = await store.release(lease.leaseId);
        expect(released).toEqual({ ...lease, releasedAt: clock(), endedAt: clock() });
        expect(await store.get(lease.leaseId)).toEqual(released);
        expect(await store.findActiveCovering("b", "p/x")).toBeNull();
        await grant({ bucket: "b", key: "p/x" });
      });

      it("refuses a second release with LeaseNotFound", async () => {
        const lease = await grant({ bucket: "b", key: "k" });
        await store.release(lease.leaseId);
        await expectDomainError(store.release(lease.leaseId), "LeaseNotFound");
      });

      it("refuses an unknown lease with LeaseNotFound", async () => {
        await expectDomainError(store.release("no-such-lease"), "LeaseNotFound");
        expect(await store.get("no-such-lease")).toBeNull();
      });

      it("reports the expiry of a lease released after it expired, instead of a release", async () => {
        const lease = await grant({ bucket: "b", key: "k" }, 1_000);
        clock.advance(5_000);
        const ended = await store.release(lease.leaseId);
        expect(ended).toEqual({ ...lease, endedAt: lease.expiresAt });
        expect(ended.releasedAt).toBeUndefined();
        // Reported once: neither the sweep nor a second release reports it again.
        expect(await store.collectExpired()).toEqual([]);
        await expectDomainError(store.release(lease.leaseId), "LeaseNotFound");
      });
    });

    describe("findNewerOverlapping", () => {
      it("finds a newer lease on an overlapping resource, whatever its state", async () => {
        const old = await grant({ bucket: "b", key: "p/k" }, 1_000);
        clock.advance(1_000);
        await grant({ bucket: "b", key: "q/k" }); // newer, but elsewhere
        await grant({ bucket: "other", key: "p/k" }); // newer, but another bucket
        expect(await store.findNewerOverlapping(old)).toBeNull();

        const newer = await grant({ bucket: "b", prefix: "p/" });
        expect(await store.findNewerOverlapping(old)).toEqual(newer);
        expect(await store.findNewerOverlapping(newer)).toBeNull();

        await store.release(newer.leaseId);
        expect((await store.findNewerOverlapping(old))?.leaseId).toBe(newer.leaseId);
      });

      it("sees a key lease under an older prefix lease, and a nested prefix", async () => {
        const outer = await grant({ bucket: "b", prefix: "a/" });
        await store.release(outer.leaseId);
        const inner = await grant({ bucket: "b", prefix: "a/b/" });
        expect(await store.findNewerOverlapping(outer)).toEqual(inner);
        await store.release(inner.leaseId);
        const key = await grant({ bucket: "b", key: "a/b/c" });
        expect(await store.findNewerOverlapping(inner)).toEqual(key);
        expect((await store.findNewerOverlapping(outer))?.token).toBeGreaterThan(outer.token);
      });

      it("ignores older overlapping leases", async () => {
        const first = await grant({ bucket: "b", key: "k" });
        await store.release(first.leaseId);
        const second = await grant({ bucket: "b", key: "k" });
        expect(await store.findNewerOverlapping(second)).toBeNull();
        expect(await store.findNewerOverlapping(first)).toEqual(second);
      });
    });

    describe("findActiveCovering", () => {
      it("finds the active key or prefix lease covering a key", async () => {
        const keyLease = await grant({ bucket: "b", key: "k" });
        const prefixLease = await grant({ bucket: "b", prefix: "p/" });
        expect(await store.findActiveCovering("b", "k")).toEqual(keyLease);
        expect(await store.findActiveCovering("b", "p/x/y")).toEqual(prefixLease);
        expect(await store.findActiveCovering("b", "p/")).toEqual(prefixLease);
        expect(await store.findActiveCovering("b", "kk")).toBeNull();
        expect(await store.findActiveCovering("b", "p")).toBeNull();
        expect(await store.findActiveCovering("other", "k")).toBeNull();
      });

      it("finds nothing once the lease expired or was released", async () => {
        await grant({ bucket: "b", key: "k" }, 1_000);
        const prefixLease = await grant({ bucket: "b", prefix: "p/" }, 5_000);
        await store.release(prefixLease.leaseId);
        expect(await store.findActiveCovering("b", "p/x")).toBeNull();
        clock.advance(1_000);
        expect(await store.findActiveCovering("b", "k")).toBeNull();
      });
    });

    describe("collectExpired", () => {
      it("reports each expired, unreleased lease once", async () => {
        const a = await grant({ bucket: "b", key: "a" }, 1_000);
        const b = await grant({ bucket: "b", key: "b" }, 2_000);
        const released = await grant({ bucket: "b", key: "c" }, 1_000);
        await store.release(released.leaseId);
        const live = await grant({ bucket: "b", key: "d" }, 60_000);
        const releasedLate = await grant({ bucket: "b", key: "e" }, 1_000);

        expect(await store.collectExpired()).toEqual([]);
        clock.advance(1_000);
        await store.release(releasedLate.leaseId); // expired but released before anyone collected it
        const ended = (l: LeaseRecord) => ({ ...l, endedAt: l.expiresAt });
        expect(await store.collectExpired()).toEqual([ended(a)]);
        expect(await store.collectExpired()).toEqual([]);
        clock.advance(1_000);
        expect(await store.collectExpired()).toEqual([ended(b)]);
        clock.advance(10_000);
        expect(await store.collectExpired()).toEqual([]);
        expect(await store.get(live.leaseId)).toEqual(live);
        // A reported lease is still remembered, and cannot be renewed.
        expect(await store.get(a.leaseId)).toEqual(ended(a));
        await expectDomainError(store.renew(a.leaseId, 1_000), "LeaseLost");
      });

      it("does not report a lease that was renewed in time", async () => {
        const lease = await grant({ bucket: "b", key: "k" }, 1_000);
        clock.advance(500);
        await store.renew(lease.leaseId, 1_000);
        clock.advance(999);
        expect(await store.collectExpired()).toEqual([]);
        clock.advance(1);
        expect((await store.collectExpired()).map((l) => l.leaseId)).toEqual([lease.leaseId]);
      });

      it("does not report again after a restart", async (ctx) => {
        ctx.skip(!harness.reopen, NO_RESTART);
        await grant({ bucket: "b", key: "k" }, 1_000);
        clock.advance(1_000);
        expect(await store.collectExpired()).toHaveLength(1);
        await reopen();
        expect(await store.collectExpired()).toEqual([]);
      });
    });

    describe("list", () => {
      it("lists active leases by bucket and resource prefix, in token order", async () => {
        const a = await grant({ bucket: "b", key: "logs/1" });
        const b = await grant({ bucket: "b", prefix: "logs/2/" });
        const c = await grant({ bucket: "b", key: "data/1" });
        const d = await grant({ bucket: "b2", key: "logs/1" });
        const expired = await grant({ bucket: "b", key: "logs/3" }, 1_000);
        const released = await grant({ bucket: "b", key: "logs/4" });
        await store.release(released.leaseId);
        expect(await store.list({})).toContainEqual(expired);
        clock.advance(1_000);

        expect(await store.list({})).toEqual([a, b, c, d]);
        expect(await store.list({ bucket: "b" })).toEqual([a, b, c]);
        expect(await store.list({ bucket: "b", prefix: "logs/" })).toEqual([a, b]);
        expect(await store.list({ bucket: "b", prefix: "logs/2" })).toEqual([b]);
        expect(await store.list({ prefix: "logs/1" })).toEqual([a, d]);
        expect(await store.list({ bucket: "nope" })).toEqual([]);
        expect(await store.list({ bucket: "b", prefix: "logs_" })).toEqual([]);
      });
    });

    it("answers ping", async () => {
      await expect(store.ping()).resolves.toBeUndefined();
    });

    describeLeaseModelContract(context);
    describeCommitIntentContract(context);
    describeLeaseDomainContract(context);
    describeLeaseEndingContract(context);
  });
}
