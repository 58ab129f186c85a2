/**
 * How a lease ends and stays ended, and what a store accepts: ill-formed strings are refused
 * before they reach the store's state; a lease seen to end (released, expiry reported, or found
 * expired by a grant) stays ended whatever the clock does afterwards; expiries a grant finds are
 * reported with it, before it; the access key that acquired a lease is kept. Part of the
 * lease-store contract.
 */
import { describe, expect, it } from "vitest";
import type { LeaseRecord, LeaseResource } from "../../src/leases/lease-store.js";
import { expectDomainError, type LeaseStoreContext, TTL } from "./lease-store-context.js";

export function describeLeaseEndingContract(t: LeaseStoreContext): void {
  const attempt = (resource: LeaseResource, extra: { owner?: string; principal?: string } = {}) =>
    t.store.tryAcquire({ resource, ttlMs: TTL, owner: extra.owner ?? "o", ...extra });

  describe("well-formed input", () => {
    it("refuses a lone UTF-16 surrogate in a prefix, key, bucket, owner or principal, and stores nothing", async () => {
      await expectDomainError(attempt({ bucket: "b", prefix: "a\uD800" }), "InvalidArgument");
      await expectDomainError(attempt({ bucket: "b", prefix: "a\uDC00" }), "InvalidArgument");
      await expectDomainError(attempt({ bucket: "b", key: "k\uDBFF" }), "InvalidArgument");
      await expectDomainError(attempt({ bucket: "b\uD800", key: "k" }), "InvalidArgument");
      await expectDomainError(attempt({ bucket: "b", key: "k" }, { owner: "\uDFFFo" }), "InvalidArgument");
      await expectDomainError(
        attempt({ bucket: "b", key: "k" }, { principal: "p\uD800" }),
        "InvalidArgument",
      );
      expect(await t.store.list({})).toEqual([]);
      // A well-formed astral character is fine, and a prefix "a" covers it.
      const astral = await t.grant({ bucket: "b", key: "a\u{10000}" });
      expect((await t.store.get(astral.leaseId))?.key).toBe("a\u{10000}");
      const refused = await attempt({ bucket: "b", prefix: "a" });
      expect(refused.granted).toBe(false);
    });
  });

  describe("a lease seen to end stays ended, whatever the clock does", () => {
    it("an expired lease superseded by a grant does not come back when the clock steps back", async () => {
      const a = await t.grant({ bucket: "b", key: "k" }, 1_000);
      t.clock.advance(1_000); // a expired; nobody has reported it yet
      const b = await t.grant({ bucket: "b", key: "k" }, 60_000);
      t.clock.advance(-1_500); // the wall clock steps back before a's expiry

      expect((await t.store.get(a.leaseId))?.endedAt).toBe(a.expiresAt);
      expect(await t.store.findActiveCovering("b", "k")).toEqual(b);
      expect(await t.store.list({})).toEqual([b]);
      await expectDomainError(t.store.renew(a.leaseId, 1_000), "LeaseLost");
      const write = { kind: "fenced", leaseId: a.leaseId, token: a.token, bucket: "b", key: "k" } as const;
      await expectDomainError(t.store.beginCommit(write), "StaleFencingToken");
      expect((await attempt({ bucket: "b", key: "k" })).granted).toBe(false);
    });

    it("a prefix lease found expired by a grant under it stays ended", async () => {
      const a = await t.grant({ bucket: "b", prefix: "p/" }, 1_000);
      t.clock.advance(2_000);
      const b = await t.grant({ bucket: "b", key: "p/x" });
      t.clock.advance(-5_000);
      expect(await t.store.findActiveCovering("b", "p/y")).toBeNull();
      expect(await t.store.findActiveCovering("b", "p/x")).toEqual(b);
      await expectDomainError(t.store.renew(a.leaseId, 1_000), "LeaseLost");
      // Another key under the prefix is free: the old prefix lease holds nothing.
      await t.grant({ bucket: "b", key: "p/y" });
    });

    it("a reported expiry and a release stay ended when the clock steps back", async () => {
      const expired = await t.grant({ bucket: "b", key: "e" }, 1_000);
      const released = await t.grant({ bucket: "b", key: "r" }, 60_000);
      t.clock.advance(1_000);
      expect((await t.store.collectExpired()).map((l) => l.leaseId)).toEqual([expired.leaseId]);
      await t.store.release(released.leaseId);
      t.clock.advance(-10_000);
      for (const lease of [expired, released]) {
        expect(await t.store.findActiveCovering("b", lease.key!)).toBeNull();
        await expectDomainError(t.store.renew(lease.leaseId, 1_000), "LeaseLost");
        const write = {
          kind: "fenced",
          leaseId: lease.leaseId,
          token: lease.token,
          bucket: "b",
          key: lease.key!,
        } as const;
        await expectDomainError(t.store.beginCommit(write), "LeaseExpired");
      }
      expect(await t.store.list({})).toEqual([]);
      await t.grant({ bucket: "b", key: "e" });
      await t.grant({ bucket: "b", key: "r" });
    });
  });

  describe("expiry reported in order", () => {
    it("a grant reports the overlapping leases that expired unnoticed, before its own event", async () => {
      const a = await t.grant({ bucket: "b", key: "p/1" }, 1_000);
      const c = await t.grant({ bucket: "b", key: "p/2" }, 1_000);
      const elsewhere = await t.grant({ bucket: "b", key: "q" }, 1_000);
      t.clock.advance(1_000);
      const from = t.events.records.length;
      const result = await t.store.tryAcquire({
        resource: { bucket: "b", prefix: "p/" },
        ttlMs: TTL,
        owner: "o",
      });
      if (!result.granted) throw new Error(`expected a grant: ${JSON.stringify(result)}`);
      const ended = (l: LeaseRecord) => ({ ...l, endedAt: l.expiresAt });
      expect(result.expired).toEqual([ended(a), ended(c)]);
      expect(t.events.records.slice(from).map((r) => [r.op, r.leaseId])).toEqual([
        ["LeaseExpired", a.leaseId],
        ["LeaseExpired", c.leaseId],
        ["LeaseAcquired", result.lease.leaseId],
      ]);
      // Reported once: the sweep reports only the lease the grant did not overlap.
      expect((await t.store.collectExpired()).map((l) => l.leaseId)).toEqual([elsewhere.leaseId]);
    });

    it("a release after expiry is recorded as the expiry, nobody's doing", async () => {
      const lease = await t.grant({ bucket: "b", key: "k" }, 1_000);
      t.clock.advance(1_001);
      const from = t.events.records.length;
      const ended = await t.store.release(lease.leaseId, { principal: "alice", requestId: "rq-1" });
      expect(ended.releasedAt).toBeUndefined();
      expect(ended.endedAt).toBe(lease.expiresAt);
      expect(t.events.records.slice(from).map((r) => [r.op, r.leaseId, r.principal])).toEqual([
        ["LeaseExpired", lease.leaseId, null],
      ]);
    });
  });

  describe("breakLease", () => {
    it("ends an active lease and hands back a fresh token and the intents under it, in one step", async () => {
      const held = await t.grant({ bucket: "b", prefix: "p/" });
      const other = await t.grant({ bucket: "b", key: "q" });
      const write = {
        kind: "fenced",
        leaseId: held.leaseId,
        token: held.token,
        bucket: "b",
        key: "p/x",
      } as const;
      const intent = await t.store.beginCommit(write);
      await t.store.beginCommit({
        kind: "fenced",
        leaseId: other.leaseId,
        token: other.token,
        bucket: "b",
        key: "q",
      });
      t.clock.advance(10);
      const from = t.events.records.length;
      const broken = await t.store.breakLease(held.leaseId, { principal: "admin", requestId: "rq-1" });
      expect(broken.lease).toMatchObject({ leaseId: held.leaseId, releasedAt: t.clock() });
      expect(broken.fence.token).toBeGreaterThan(other.token);
      expect(broken.fence.intents).toEqual([{ intentId: intent.intentId, bucket: "b", key: "p/x" }]);
      expect(t.events.records.slice(from).map((r) => [r.op, r.leaseId, r.principal])).toEqual([
        ["LeaseBroken", held.leaseId, "admin"],
      ]);
      // Ended: no renewal, no new commit, and the resource is free once the intents are fenced.
      await expectDomainError(t.store.renew(held.leaseId, 1_000), "LeaseLost");
      await expectDomainError(t.store.beginCommit(write), "LeaseExpired");
      await t.store.clearIntents([intent.intentId]);
      const next = await t.grant({ bucket: "b", key: "p/x" });
      expect(next.token).toBeGreaterThan(broken.fence.token);
      await expectDomainError(t.store.breakLease(held.leaseId), "LeaseNotFound");
      await expectDomainError(t.store.breakLease("no-such-lease"), "LeaseNotFound");
    });

    it("remembers that the lease was broken, not released: its renewal and its writes say so", async () => {
      const broken = await t.grant({ bucket: "b", key: "k" });
      const released = await t.grant({ bucket: "b", key: "r" });
      t.clock.advance(10);
      const result = await t.store.breakLease(broken.leaseId);
      expect(result.lease.brokenAt).toBe(t.clock());
      expect(result.lease.releasedAt).toBe(t.clock());
      expect((await t.store.get(broken.leaseId))?.brokenAt).toBe(t.clock());
      const lost = await expectDomainError(t.store.renew(broken.leaseId, 1_000), "LeaseLost");
      expect(lost.details).toMatchObject({ reason: "broken" });
      expect(lost.message).toContain("broken by an administrator");
      const refused = await expectDomainError(
        t.store.beginCommit({
          kind: "fenced",
          leaseId: broken.leaseId,
          token: broken.token,
          bucket: "b",
          key: "k",
        }),
        "LeaseExpired",
      );
      expect(refused.message).toContain("broken by an administrator");

      // A release by its holder stays a release, in the same words as before.
      const ended = await t.store.release(released.leaseId);
      expect(ended.brokenAt).toBeUndefined();
      expect((await t.store.get(released.leaseId))?.brokenAt).toBeUndefined();
      const relLost = await expectDomainError(t.store.renew(released.leaseId, 1_000), "LeaseLost");
      expect(relLost.details).toMatchObject({ reason: "released" });
      expect(relLost.message).toContain("was released");
      const relRefused = await expectDomainError(
        t.store.beginCommit({
          kind: "fenced",
          leaseId: released.leaseId,
          token: released.token,
          bucket: "b",
          key: "r",
        }),
        "LeaseExpired",
      );
      expect(relRefused.message).toContain("was released");
      expect(relRefused.message).not.toContain("broken");
    });

    it("reports the expiry of a lease that had expired unnoticed, and still fences", async () => {
      const lease = await t.grant({ bucket: "b", key: "k" }, 1_000);
      t.clock.advance(1_000);
      const broken = await t.store.breakLease(lease.leaseId);
      expect(broken.lease).toEqual({ ...lease, endedAt: lease.expiresAt });
      expect(broken.fence.token).toBeGreaterThan(lease.token);
      expect(await t.store.collectExpired()).toEqual([]);
    });
  });

  describe("delegates", () => {
    it("adds, lists in creation order, and removes a lease's delegates", async () => {
      const lease = await t.grant({ bucket: "b", key: "k" });
      const other = await t.grant({ bucket: "b", key: "other" });
      const d = (delegateId: string, leaseId = lease.leaseId) => ({
        delegateId,
        leaseId,
        createdBy: "owner-key",
        createdAt: t.clock(),
      });
      await t.store.addDelegate!(d("FGD1"));
      await t.store.addDelegate!(d("FGD2"));
      await t.store.addDelegate!(d("FGD3", other.leaseId));
      expect(await t.store.listDelegates!(lease.leaseId)).toEqual([d("FGD1"), d("FGD2")]);
      expect((await t.store.listDelegates!()).map((x) => x.delegateId)).toEqual(["FGD1", "FGD2", "FGD3"]);
      expect(await t.store.removeDelegate!(lease.leaseId, "FGD1")).toBe(true);
      expect(await t.store.removeDelegate!(lease.leaseId, "FGD1")).toBe(false);
      expect(await t.store.removeDelegate!(other.leaseId, "FGD2")).toBe(false);
      expect(await t.store.listDelegates!(lease.leaseId)).toEqual([d("FGD2")]);
      await expectDomainError(t.store.addDelegate!(d("FGD4", "no-such-lease")), "LeaseNotFound");
    });
  });

  describe("principal", () => {
    it("keeps the access key that acquired the lease", async () => {
      const result = await attempt({ bucket: "b", key: "k" }, { principal: "writer-key" });
      if (!result.granted) throw new Error("expected a grant");
      expect(result.lease.principal).toBe("writer-key");
      expect((await t.store.get(result.lease.leaseId))?.principal).toBe("writer-key");
      expect((await t.store.list({}))[0]?.principal).toBe("writer-key");
      const plain = await t.grant({ bucket: "b", key: "other" });
      expect(plain.principal).toBeUndefined();
    });
  });
}
