/**
 * The LeaseService over a store (run by every store's test file, like the lease-store contract):
 * fair FIFO waiting per resource. Waiters are served in arrival order; a lease that ends wakes
 * only the next waiter of its resource (counted at the store: one tryAcquire per release); a
 * waiter that gives up or whose client disconnects leaves the queue at once; a prefix waiter is
 * not starved by key requests under it; listings show each resource's queue length. An
 * administrator's break wakes the next waiter like a release; delegates are added, seen and removed.
 * Real time (the waiting is on timers), short TTLs.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { AuditLog } from "../../src/audit/audit-log.js";
import { createEmbeddedAuditLog } from "../../src/audit/embedded/embedded-audit-log.js";
import { systemClock } from "../../src/core/clock.js";
import { DomainError } from "../../src/core/errors.js";
import { covers, groupOf, parseGroupKey } from "../../src/leases/lease-rules.js";
import { type Caller, type LeaseInfo, LeaseService } from "../../src/leases/lease-service.js";
import type { LeaseEvents, LeaseResource, LeaseStore } from "../../src/leases/lease-store.js";
import { Pools } from "../../src/leases/pools.js";
import { type SharedWaitLine, type SharesWaiting, sharesWaiting } from "../../src/leases/wait-queue.js";

/** Builds the store under test, recording its lease events in `events`. */
export type ServiceStoreFactory = (
  events: LeaseEvents,
) => Promise<{ store: LeaseStore; cleanup: () => Promise<void> }>;

const CALLER: Caller = { principal: null, requestId: null };
const LIMITS = { minTtlMs: 1, maxTtlMs: 3_600_000, maxWaitMs: 60_000 };

/** Resolves once `check` holds, polling briefly (test-side only). */
async function until(
  check: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 5_000,
): Promise<void> {
  const start = Date.now();
  while (!(await check())) {
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

export function describeLeaseServiceContract(name: string, factory: ServiceStoreFactory): void {
  describe(`LeaseService over ${name}: fair waiting`, () => {
    let store: LeaseStore;
    let cleanup: () => Promise<void>;
    let service: LeaseService;
    let audit: AuditLog;
    let attempts: number;
    /** While set, every grant attempt's answer is held back until it resolves. */
    let gate: Promise<void> | null;

    beforeEach(async () => {
      audit = createEmbeddedAuditLog({ gatewayId: "test" });
      ({ store, cleanup } = await factory(audit));
      attempts = 0;
      gate = null;
      // Counts the store's grant attempts: how many waiters each event woke.
      const counting: LeaseStore = Object.create(store);
      counting.tryAcquire = async (input, by) => {
        attempts++;
        const result = await store.tryAcquire(input, by);
        if (gate) await gate;
        return result;
      };
      // A store shared by replicas grants a waiter through its shared queue: counted alike.
      if (sharesWaiting(store)) {
        const line = store.sharedWaitLine();
        const countingLine: SharedWaitLine = {
          ...line,
          tryAcquireAsHead: async (ticket, input, by) => {
            attempts++;
            const result = await line.tryAcquireAsHead(ticket, input, by);
            if (gate) await gate;
            return result;
          },
        };
        (counting as LeaseStore & SharesWaiting).sharedWaitLine = () => countingLine;
      }
      service = new LeaseService({
        store: counting,
        audit,
        clock: systemClock,
        limits: LIMITS,
        fenceObject: async () => {},
        delegateSecret: (id) => `secret-of-${id}`,
      });
    });

    afterEach(async () => {
      await cleanup();
      await audit.close();
    });

    const acquire = (resource: LeaseResource, waitMs: number, owner: string, signal?: AbortSignal) =>
      service.acquire({ resource, ttlMs: 60_000, waitMs, owner, ...(signal ? { signal } : {}) }, CALLER);

    type Outcome = { lease?: LeaseInfo; error?: unknown };
    function track(p: Promise<LeaseInfo>): Outcome {
      const outcome: Outcome = {};
      p.then(
        (lease) => {
          outcome.lease = lease;
        },
        (error: unknown) => {
          outcome.error = error;
        },
      );
      return outcome;
    }

    it("serves 20 waiters in arrival order, each release waking exactly one, and skips one that disconnected", async () => {
      const resource = { bucket: "b", key: "k" };
      const holder = await acquire(resource, 0, "holder");
      const aborts = Array.from({ length: 20 }, () => new AbortController());
      const waiters = aborts.map((ac, i) => track(acquire(resource, 30_000, `w${i}`, ac.signal)));
      // Only the first waiter tries on arrival: the others queue behind it without a store call.
      await until(() => attempts === 2, "the first waiter's attempt");
      expect(waiters.every((w) => !w.lease && !w.error)).toBe(true);
      const listed = await service.list({ bucket: "b" });
      expect(listed.map((l) => l.waiters)).toEqual([20]);

      aborts[7]!.abort(); // the client of waiter 7 hangs up
      await until(() => waiters[7]!.error !== undefined, "the disconnected waiter to leave");
      expect((await service.list({ bucket: "b" }))[0]!.waiters).toBe(19);

      const order: string[] = [];
      let current = holder;
      for (let served = 0; served < 19; served++) {
        const before = attempts;
        await service.release(current.leaseId, CALLER);
        await until(() => waiters.some((w) => w.lease && !order.includes(w.lease.owner)), "the next grant");
        const next = waiters.find((w) => w.lease && !order.includes(w.lease.owner))!.lease!;
        order.push(next.owner);
        // One release, one attempt: only the next waiter was woken.
        expect(attempts - before).toBe(1);
        expect(waiters.filter((w) => w.lease).length).toBe(served + 1);
        current = next;
      }
      expect(order).toEqual(Array.from({ length: 20 }, (_, i) => `w${i}`).filter((o) => o !== "w7"));
      expect(waiters[7]!.lease).toBeUndefined();
      expect((waiters[7]!.error as DomainError).code).toBe("RequestTimeout");
    });

    it("a waiter that gives up leaves the queue at once, with LeaseHeld; the next one keeps its place", async () => {
      const resource = { bucket: "b", key: "k" };
      const holder = await acquire(resource, 0, "holder");
      const impatient = track(acquire(resource, 50, "impatient"));
      const patient = track(acquire(resource, 30_000, "patient"));
      await until(() => impatient.error !== undefined, "the impatient waiter to give up");
      expect((impatient.error as DomainError).code).toBe("LeaseHeld");
      expect((await service.list({ bucket: "b" }))[0]!.waiters).toBe(1);
      await service.release(holder.leaseId, CALLER);
      await until(() => patient.lease !== undefined, "the patient waiter's grant");
    });

    it("a request that will not wait does not jump the queue", async () => {
      const resource = { bucket: "b", key: "k" };
      const holder = await acquire(resource, 0, "holder");
      const waiter = track(acquire(resource, 30_000, "waiter"));
      await until(() => attempts === 2, "the waiter's first attempt");
      await service.release(holder.leaseId, CALLER);
      const barging = await acquire(resource, 0, "barging").catch((e: unknown) => e);
      await until(() => waiter.lease !== undefined, "the waiter's grant");
      if (!(barging instanceof DomainError))
        expect.fail("the request without waitMs was granted ahead of the waiter");
      expect(barging.code).toBe("LeaseHeld");
    });

    it("a prefix waiter is not starved by a stream of key requests under it", async () => {
      const first = await acquire({ bucket: "b", key: "p/1" }, 0, "k1");
      const prefix = track(acquire({ bucket: "b", prefix: "p/" }, 30_000, "prefix"));
      await until(() => attempts === 2, "the prefix waiter's attempt");
      // Later key requests under the prefix queue behind it, free keys included.
      const later = track(acquire({ bucket: "b", key: "p/2" }, 30_000, "k2"));
      const refused = await acquire({ bucket: "b", key: "p/3" }, 0, "k3").catch((e: unknown) => e);
      expect((refused as DomainError).code).toBe("LeaseHeld");
      await service.release(first.leaseId, CALLER);
      await until(() => prefix.lease !== undefined, "the prefix grant");
      expect(later.lease).toBeUndefined();
      await service.release(prefix.lease!.leaseId, CALLER);
      await until(() => later.lease !== undefined, "the key grant after the prefix");
    });

    it("waiters on different resources do not wake each other", async () => {
      const a = await acquire({ bucket: "b", key: "a" }, 0, "a");
      await acquire({ bucket: "b", key: "c" }, 0, "c");
      const onA = track(acquire({ bucket: "b", key: "a" }, 30_000, "wa"));
      const onC = track(acquire({ bucket: "b", key: "c" }, 30_000, "wc"));
      await until(() => attempts === 4, "both first attempts");
      const before = attempts;
      await service.release(a.leaseId, CALLER);
      await until(() => onA.lease !== undefined, "the grant on a");
      expect(attempts - before).toBe(1);
      expect(onC.lease).toBeUndefined();
      expect((await service.list({ bucket: "b" })).find((l) => l.key === "c")!.waiters).toBe(1);
    });

    /** Holds back the answers of grant attempts until the returned function is called. */
    function holdAttempts(): () => void {
      let open!: () => void;
      gate = new Promise<void>((resolve) => {
        open = resolve;
      });
      return () => {
        gate = null;
        open();
      };
    }

    it("requests for different resources try side by side, not one after another", async () => {
      const open = holdAttempts();
      const outcomes = ["a", "b", "c", "d"].map((key) => track(acquire({ bucket: "b", key }, 0, key)));
      // All four attempts are under way at once, none waiting for another's answer.
      await until(() => attempts === 4, "four attempts in flight together");
      expect(outcomes.every((o) => !o.lease && !o.error)).toBe(true);
      open();
      await until(() => outcomes.every((o) => o.lease !== undefined), "the four grants");
      expect(new Set(outcomes.map((o) => o.lease!.token)).size).toBe(4);
    });

    it("a lease that ends while the next waiter's attempt is in flight still wakes that waiter", async () => {
      const resource = { bucket: "b", key: "k" };
      const holder = await acquire(resource, 0, "holder");
      const open = holdAttempts();
      // Its attempt sees the holder, and its answer is held back...
      const waiter = track(acquire(resource, 30_000, "waiter"));
      await until(() => attempts === 2, "the waiter's attempt");
      // ...while the holder releases: the wake-up finds the waiter still trying.
      await service.release(holder.leaseId, CALLER);
      open();
      // Granted now, not when the released lease would have expired (60 s).
      await until(() => waiter.lease !== undefined, "the waiter's grant", 3_000);
      expect(attempts).toBe(3);
    });

    it("a waiter leaving while the head's attempt is in flight does not make the head try twice", async () => {
      const resource = { bucket: "b", key: "k" };
      await acquire(resource, 0, "holder");
      const open = holdAttempts();
      const head = track(acquire(resource, 30_000, "head"));
      await until(() => attempts === 2, "the head's attempt");
      // A waiter behind it goes away: those first in line are woken, the head among them, while
      // its attempt (which will find the holder) has not answered yet.
      const leaving = new AbortController();
      const behind = track(acquire(resource, 30_000, "behind", leaving.signal));
      leaving.abort();
      await until(() => behind.error !== undefined, "the leaving waiter's answer");
      open();
      await new Promise((r) => setTimeout(r, 200));
      // The holder is still there: one attempt, not a second one for a wake-up that no longer applies.
      expect(attempts).toBe(2);
      expect(head.lease).toBeUndefined();
      expect(head.error).toBeUndefined();
    });

    it("pools: workers settle on fair shares of the groups, one owner per group, each group lease covering its keys", async () => {
      const pools = new Pools(service, { p: { bucket: "b", prefix: "g/", groups: 8 } });
      const settle = async (workers: string[]) => {
        for (let round = 0; round < 4; round++)
          for (const w of workers) await pools.claim("p", w, 60_000, CALLER);
        const leases = await service.list({ bucket: "b", prefix: "g/" });
        const groups = leases.map((l) => parseGroupKey(l.key!)!.group);
        expect(new Set(groups).size).toBe(groups.length); // never two owners of a group
        return leases;
      };
      let leases = await settle(["x", "y", "z"]);
      const shares = ["x", "y", "z"].map((w) => leases.filter((l) => l.owner === w).length).sort();
      expect(shares).toEqual([2, 3, 3]);
      for (const lease of leases) {
        const { group } = parseGroupKey(lease.key!)!;
        for (const key of ["g/a", "g/b", "g/c", "g/d", "g/e", "g/f"]) {
          expect(covers(lease, "b", key)).toBe(groupOf(key, 8) === group);
        }
        expect(covers(lease, "b", "elsewhere")).toBe(false);
      }
      await pools.leave("p", "y", CALLER);
      leases = await settle(["x", "z"]);
      expect(leases.filter((l) => l.owner === "x")).toHaveLength(4);
      expect(leases.filter((l) => l.owner === "z")).toHaveLength(4);
      expect(() => pools.checkOrdinary({ bucket: "b", key: "g/a" })).toThrow(/pool p/);
    });

    it("a break wakes the next waiter, and only it", async () => {
      const resource = { bucket: "b", key: "k" };
      const holder = await acquire(resource, 0, "holder");
      const first = track(acquire(resource, 30_000, "first"));
      await until(() => attempts === 2, "the first waiter's attempt");
      const second = track(acquire(resource, 30_000, "second"));
      await until(async () => (await service.list({ bucket: "b" }))[0]?.waiters === 2, "both queued");
      const before = attempts;
      const broken = await service.breakLease(holder.leaseId, CALLER);
      expect(broken.floorToken).toBeGreaterThan(holder.token);
      await until(() => first.lease !== undefined, "the grant after the break");
      expect(attempts - before).toBe(1);
      expect(second.lease).toBeUndefined();
      expect(first.lease!.token).toBeGreaterThan(broken.floorToken);
    });

    it("delegates: added by the lease's owner, known by their credential and scope, removed at once", async () => {
      const lease = await acquire({ bucket: "b", prefix: "d/" }, 0, "owner");
      const { delegate, secretAccessKey } = await service.addDelegate(lease.leaseId, CALLER);
      expect(secretAccessKey).toBe(`secret-of-${delegate.delegateId}`);
      expect(service.delegateSecretOf(delegate.delegateId)).toBe(secretAccessKey);
      expect(service.delegateScope(delegate.delegateId)).toMatchObject({
        bucket: "b",
        prefix: "d/",
        leaseId: lease.leaseId,
      });
      expect((await service.listDelegates(lease.leaseId, CALLER)).map((d) => d.delegateId)).toEqual([
        delegate.delegateId,
      ]);
      // The delegate renews the lease.
      const asDelegate: Caller = { principal: delegate.delegateId, requestId: null };
      expect((await service.renew(lease.leaseId, 60_000, asDelegate)).leaseId).toBe(lease.leaseId);
      await service.removeDelegate(lease.leaseId, delegate.delegateId, CALLER);
      expect(service.delegateSecretOf(delegate.delegateId)).toBeUndefined();
      expect(await service.listDelegates(lease.leaseId, CALLER)).toEqual([]);
    });

    it("wakes a waiter when the holder expires, without polling in between", async () => {
      const resource = { bucket: "b", key: "k" };
      await service.acquire({ resource, ttlMs: 300, waitMs: 0, owner: "short" }, CALLER);
      const waiter = track(acquire(resource, 30_000, "next"));
      await until(() => waiter.lease !== undefined, "the grant after expiry");
      // One attempt on arrival, one when the holder expired.
      expect(attempts).toBe(3);
    });
  });
}
