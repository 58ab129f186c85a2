/**
 * What a store with a domain promises (src/core/tx.ts): synchronous reads that agree with the
 * async ones, and lease events recorded inside the store's step when the audit log shares its
 * domain, so that a record the log cannot take (it throws) takes the whole event back. A store
 * without a domain records right after its step. Part of the lease-store contract.
 */
import { describe, expect, it } from "vitest";
import type { LeaseRecord, LeaseStore } from "../../src/leases/lease-store.js";
import { type LeaseStoreContext, TTL } from "./lease-store-context.js";

const NO_DOMAIN = "the store has no domain: no synchronous reads, and no records inside its steps";

const BY = { principal: "alice", requestId: "rq-1" };

export function describeLeaseDomainContract(t: LeaseStoreContext): void {
  const domainOf = (store: LeaseStore) => store.domain!;

  describe("domain", () => {
    it("offers synchronous reads exactly when it has a domain", () => {
      expect(t.store.inDomain !== undefined).toBe(t.store.domain !== undefined);
    });

    it("answers the synchronous reads as the async ones, inside a step", async (ctx) => {
      ctx.skip(!t.store.inDomain, NO_DOMAIN);
      const reads = t.store.inDomain!;
      const released = await t.grant({ bucket: "b", prefix: "p/" });
      await t.store.release(released.leaseId);
      const expired = await t.grant({ bucket: "b", key: "p/q" }, 1_000);
      const active = await t.grant({ bucket: "b", key: "k" });
      t.clock.advance(1_000);
      const after = await t.grant({ bucket: "b", prefix: "p/q" });
      const leases = [released, expired, active, after];
      const keys = ["k", "p/q", "p/q/r", "p/x", "nothing"];

      const sync = await domainOf(t.store).run(() => ({
        get: [...leases.map((l) => l.leaseId), "no-such-lease"].map((id) => reads.get(id)),
        newer: leases.map((l) => reads.findNewerOverlapping(l)),
        covering: keys.map((key) => reads.findActiveCovering("b", key)),
      }));
      expect(sync).toEqual({
        get: await Promise.all(
          [...leases.map((l) => l.leaseId), "no-such-lease"].map((id) => t.store.get(id)),
        ),
        newer: await Promise.all(leases.map((l) => t.store.findNewerOverlapping(l))),
        covering: await Promise.all(keys.map((key) => t.store.findActiveCovering("b", key))),
      });
      // The answers themselves, so that agreeing on nothing does not pass.
      expect(sync.newer.map((l) => l?.leaseId ?? null)).toEqual([expired.leaseId, after.leaseId, null, null]);
      expect(sync.covering.map((l) => l?.leaseId ?? null)).toEqual([
        active.leaseId,
        after.leaseId,
        after.leaseId,
        null,
        null,
      ]);
    });

    it("records each accepted event once, with its lease and who asked, in its step exactly when it has a domain", async () => {
      const granted = await t.store.tryAcquire(
        { resource: { bucket: "b", key: "k" }, ttlMs: 1_000, owner: "o" },
        BY,
      );
      const lease = granted.granted ? granted.lease : null;
      await t.store.tryAcquire({ resource: { bucket: "b", key: "k" }, ttlMs: TTL, owner: "o" }, BY);
      const renewed = await t.store.renew(lease!.leaseId, 1_000, BY);
      const other = await t.grant({ bucket: "b", key: "other" }, 1_000);
      const released = await t.store.release(other.leaseId, BY);
      t.clock.advance(1_000);
      const expired = await t.store.collectExpired();
      const reported = { ...renewed, endedAt: renewed.expiresAt };
      expect(expired).toEqual([reported]);
      const inStep = t.store.domain !== undefined;
      const row = (op: string, l: LeaseRecord, by: typeof BY | null) => [
        op,
        l.leaseId,
        l.token,
        by?.principal ?? null,
        by?.requestId ?? null,
        inStep,
      ];
      expect(
        t.events.records.map((r) => [r.op, r.leaseId, r.token, r.principal, r.requestId, r.inStep]),
      ).toEqual([
        row("LeaseAcquired", lease!, BY),
        row("LeaseRenewed", renewed, BY),
        row("LeaseAcquired", other, null),
        row("LeaseReleased", released, BY),
        row("LeaseExpired", reported, null),
      ]);
    });

    describe("a record the log cannot take changes nothing", () => {
      /** The next `n`th record fails, and every one after it, until `heal`. */
      const failFrom = (n: number) => {
        t.events.failAt = t.events.records.length + n;
        return t.events.records.length;
      };
      const heal = () => {
        t.events.failAt = Number.POSITIVE_INFINITY;
      };

      it("on a grant", async (ctx) => {
        ctx.skip(!t.store.domain, NO_DOMAIN);
        const held = await t.grant({ bucket: "b", key: "held" });
        const before = await t.store.list({});
        const from = failFrom(1);
        const attempt = t.store.tryAcquire({
          resource: { bucket: "b", prefix: "p/" },
          ttlMs: TTL,
          owner: "o",
        });
        await expect(attempt).rejects.toBe(t.events.failure);
        heal();
        const tried = t.events.records.slice(from);
        expect(tried.map((r) => r.op)).toEqual(["LeaseAcquired"]);
        expect(await t.store.get(tried[0]!.leaseId!)).toBeNull();
        expect(await t.store.list({})).toEqual(before);
        expect(await t.store.findActiveCovering("b", "p/x")).toBeNull();
        expect(await t.store.findNewerOverlapping(held)).toBeNull();
        const next = await t.grant({ bucket: "b", key: "p/x" });
        expect(next.token).toBeGreaterThan(held.token);
      });

      it("on a renewal", async (ctx) => {
        ctx.skip(!t.store.domain, NO_DOMAIN);
        const lease = await t.grant({ bucket: "b", key: "k" }, 1_000);
        t.clock.advance(500);
        failFrom(1);
        await expect(t.store.renew(lease.leaseId, 5_000)).rejects.toBe(t.events.failure);
        heal();
        expect(await t.store.get(lease.leaseId)).toEqual(lease);
        t.clock.advance(500);
        expect(await t.store.findActiveCovering("b", "k")).toBeNull();
        expect((await t.store.collectExpired()).map((l) => l.leaseId)).toEqual([lease.leaseId]);
      });

      it("on a release", async (ctx) => {
        ctx.skip(!t.store.domain, NO_DOMAIN);
        const lease = await t.grant({ bucket: "b", prefix: "p/" });
        const from = failFrom(1);
        await expect(t.store.release(lease.leaseId)).rejects.toBe(t.events.failure);
        heal();
        expect(t.events.records.slice(from).map((r) => [r.op, r.leaseId])).toEqual([
          ["LeaseReleased", lease.leaseId],
        ]);
        expect(await t.store.get(lease.leaseId)).toEqual(lease);
        expect(await t.store.findActiveCovering("b", "p/x")).toEqual(lease);
        expect(await t.store.list({})).toEqual([lease]);
        expect((await t.store.release(lease.leaseId)).releasedAt).toBe(t.clock());
      });

      it("on an expiry report, for every lease of the report", async (ctx) => {
        ctx.skip(!t.store.domain, NO_DOMAIN);
        const a = await t.grant({ bucket: "b", key: "a" }, 1_000);
        const b = await t.grant({ bucket: "b", key: "b" }, 1_000);
        t.clock.advance(1_000);
        const from = failFrom(2);
        await expect(t.store.collectExpired()).rejects.toBe(t.events.failure);
        heal();
        expect(t.events.records.slice(from).map((r) => [r.op, r.leaseId])).toEqual([
          ["LeaseExpired", a.leaseId],
          ["LeaseExpired", b.leaseId],
        ]);
        const ended = (l: LeaseRecord) => ({ ...l, endedAt: l.expiresAt });
        expect(await t.store.collectExpired()).toEqual([ended(a), ended(b)]);
        expect(await t.store.collectExpired()).toEqual([]);
      });
    });
  });
}
