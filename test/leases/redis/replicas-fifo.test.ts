/**
 * Fair waiting and pools across gateway replicas on one Redis: three LeaseServices, each on its
 * own RedisLeaseStore (its own connections), as three gateways would be. Waiters that arrive
 * through different replicas are served in arrival order, a lease released on one replica wakes
 * the next waiter on another (one grant attempt per release, counted at every replica), a waiter
 * that disconnects or whose replica dies is skipped, and pool shares are computed over every
 * replica's workers. The grant's own script refuses a ticket that is not first in line.
 */
import { afterEach, describe, expect, it } from "vitest";
import { createEmbeddedAuditLog } from "../../../src/audit/embedded/embedded-audit-log.js";
import { systemClock } from "../../../src/core/clock.js";
import type { DomainError } from "../../../src/core/errors.js";
import { parseGroupKey } from "../../../src/leases/lease-rules.js";
import { type Caller, type LeaseInfo, LeaseService } from "../../../src/leases/lease-service.js";
import type { LeaseResource, LeaseStore } from "../../../src/leases/lease-store.js";
import { Pools } from "../../../src/leases/pools.js";
import { createRedisLeaseStore, type RedisLeaseStore } from "../../../src/leases/redis/redis-lease-store.js";
import { createFileEpochStore } from "../../../src/leases/redis-shared/file-epoch-store.js";
import type { SharedWaitLine, SharesWaiting } from "../../../src/leases/wait-queue.js";
import { useRedisForFile } from "../../support/redis.js";
import { sleep } from "../../support/wait.js";

const CALLER: Caller = { principal: null, requestId: null };
const LIMITS = { minTtlMs: 1, maxTtlMs: 3_600_000, maxWaitMs: 60_000 };

const shared = useRedisForFile();

type Replica = { store: RedisLeaseStore; service: LeaseService; attempts(): number };

let deployments = 0;
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

/** `n` replicas of one deployment: one key prefix, one epoch directory, separate connections. */
async function replicas(n: number, opts: { waitTicketTtlMs?: number } = {}): Promise<Replica[]> {
  const prefix = `{fifo${++deployments}}`;
  const out: Replica[] = [];
  for (let i = 0; i < n; i++) {
    const audit = createEmbeddedAuditLog({ gatewayId: `gw${i}` });
    closers.push(() => audit.close());
    const store = createRedisLeaseStore({
      url: shared.server.url,
      keyPrefix: prefix,
      epochs: createFileEpochStore(`${shared.epochDir}/${prefix}`),
      events: audit,
      ...opts,
    });
    closers.push(() => store.close());
    if (!(await store.ready(5_000))) throw new Error(`no connection to ${shared.server.url}`);
    // Grant attempts of this replica, through the store or through the shared queue.
    let attempts = 0;
    const counting: LeaseStore & SharesWaiting = Object.create(store);
    counting.tryAcquire = (input, by) => {
      attempts++;
      return store.tryAcquire(input, by);
    };
    const line = store.sharedWaitLine();
    const countingLine: SharedWaitLine = {
      ...line,
      tryAcquireAsHead: (ticket, input, by) => {
        attempts++;
        return line.tryAcquireAsHead(ticket, input, by);
      },
    };
    counting.sharedWaitLine = () => countingLine;
    const service = new LeaseService({
      store: counting,
      audit,
      clock: systemClock,
      limits: LIMITS,
      fenceObject: async () => {},
      delegateSecret: (id) => `secret-of-${id}`,
    });
    // As a gateway does at start: the delegates the store keeps, and those announced from now on.
    await service.loadDelegates();
    out.push({ store, service, attempts: () => attempts });
  }
  return out;
}

async function until(check: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000) {
  const start = Date.now();
  while (!(await check())) {
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

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

const acquire = (r: Replica, resource: LeaseResource, waitMs: number, owner: string, signal?: AbortSignal) =>
  r.service.acquire({ resource, ttlMs: 60_000, waitMs, owner, ...(signal ? { signal } : {}) }, CALLER);

const queued = async (r: Replica, bucket: string) =>
  (await r.service.list({ bucket })).reduce((n, l) => n + (l.waiters ?? 0), 0);

describe("fair waiting across three replicas on one Redis", () => {
  it("20 waiters queued on one resource through three replicas get the lease in arrival order, each release waking exactly one; a waiter that disconnects is skipped", async () => {
    const rs = await replicas(3);
    const total = () => rs.reduce((n, r) => n + r.attempts(), 0);
    const resource = { bucket: "b", key: "k" };
    const holder = await acquire(rs[0]!, resource, 0, "holder");
    const aborts = Array.from({ length: 20 }, () => new AbortController());
    const waiters: Outcome[] = [];
    for (let i = 0; i < 20; i++) {
      // Round-robin over the replicas, each arriving once the one before it is queued.
      waiters.push(track(acquire(rs[i % 3]!, resource, 30_000, `w${i}`, aborts[i]!.signal)));
      await until(async () => (await queued(rs[(i + 1) % 3]!, "b")) === i + 1, `waiter ${i} queued`);
    }
    // Only the first waiter tried on arrival; the others queued without a grant attempt.
    expect(total()).toBe(2);
    expect(waiters.every((w) => !w.lease && !w.error)).toBe(true);

    aborts[7]!.abort(); // the client of waiter 7 (on replica 1) hangs up
    await until(() => waiters[7]!.error !== undefined, "the disconnected waiter to leave");
    await until(async () => (await queued(rs[2]!, "b")) === 19, "its ticket to leave at once");

    const order: string[] = [];
    let current = holder;
    for (let served = 0; served < 19; served++) {
      const before = total();
      // Released through a replica other than the next waiter's, whenever the order allows.
      await rs[(served + 2) % 3]!.service.release(current.leaseId, CALLER);
      await until(() => waiters.some((w) => w.lease && !order.includes(w.lease.owner)), "the next grant");
      const next = waiters.find((w) => w.lease && !order.includes(w.lease.owner))!.lease!;
      order.push(next.owner);
      expect(total() - before).toBe(1); // one release, one attempt, on the next waiter's replica
      expect(waiters.filter((w) => w.lease).length).toBe(served + 1);
      current = next;
    }
    expect(order).toEqual(Array.from({ length: 20 }, (_, i) => `w${i}`).filter((o) => o !== "w7"));
    expect(waiters[7]!.lease).toBeUndefined();
    expect((waiters[7]!.error as DomainError).code).toBe("RequestTimeout");
    await sleep(200); // no late attempt anywhere
    expect(total()).toBe(2 + 19);
  }, 60_000);

  it("the grant's own script refuses a ticket that is not first in line, even on a free resource; an expired ticket ahead is skipped", async () => {
    const [r] = await replicas(1, { waitTicketTtlMs: 1_500 });
    const line = r!.store.sharedWaitLine();
    const resource = { bucket: "b", key: "free" };
    const input = { resource, ttlMs: 60_000, owner: "late" };
    expect(await line.enqueue("first", resource)).toBe(true);
    expect(await line.enqueue("second", resource)).toBe(false);
    expect(await line.tryAcquireAsHead("second", input)).toEqual({ granted: false, behind: true });
    expect(await r!.service.list({ bucket: "b" })).toEqual([]); // nothing was granted
    // "first" is never refreshed (its gateway died), "second" is: past the deadline of "first",
    // "second" is first in line (its own heartbeat says so).
    await sleep(100);
    expect(await line.refresh(["second"])).toEqual([]);
    await sleep(700);
    expect(await line.refresh(["second"])).toEqual([]);
    await sleep(800);
    expect(await line.refresh(["second"])).toEqual(["second"]);
    const granted = await line.tryAcquireAsHead("second", input);
    expect(granted.granted).toBe(true);
  });

  it("a waiter whose replica died is skipped once its ticket runs out, even after the release that named it", async () => {
    const rs = await replicas(3, { waitTicketTtlMs: 600 });
    const resource = { bucket: "b", key: "k" };
    const holder = await acquire(rs[0]!, resource, 0, "holder");
    const doomed = track(acquire(rs[1]!, resource, 30_000, "doomed"));
    await until(async () => (await queued(rs[0]!, "b")) === 1, "the first waiter queued");
    const next = track(acquire(rs[2]!, resource, 30_000, "next"));
    await until(async () => (await queued(rs[0]!, "b")) === 2, "the second waiter queued");
    // Replica 1 dies: its connections go, it never refreshes nor removes its waiter's ticket.
    rs[1]!.store.redis.disconnect();
    // Released while the dead waiter is still first in line: the wake-up names it, nobody tries.
    await rs[0]!.service.release(holder.leaseId, CALLER);
    await sleep(100);
    expect(next.lease).toBeUndefined();
    // Its ticket runs out; the live waiter's replica finds it first in line by its own heartbeat.
    await until(() => next.lease !== undefined, "the grant to the live waiter");
    expect(doomed.lease).toBeUndefined();
    expect(await queued(rs[0]!, "b")).toBe(0);
  }, 30_000);
});

describe("breaks and delegates across three replicas on one Redis", () => {
  it("a break through one replica wakes the next waiter on another; a delegate added through one replica is known to the others at once, and so is its removal", async () => {
    const rs = await replicas(3);
    const total = () => rs.reduce((n, r) => n + r.attempts(), 0);
    const resource = { bucket: "b", key: "k" };
    const holder = await acquire(rs[0]!, resource, 0, "holder");
    const next = track(acquire(rs[1]!, resource, 30_000, "next"));
    await until(async () => (await queued(rs[2]!, "b")) === 1, "the waiter queued");
    await until(() => total() === 2, "the waiter's attempt on arrival");
    const before = total();
    const broken = await rs[2]!.service.breakLease(holder.leaseId, CALLER);
    await until(() => next.lease !== undefined, "the grant after the break");
    expect(total() - before).toBe(1);
    expect(next.lease!.token).toBeGreaterThan(broken.floorToken);

    const leaseId = next.lease!.leaseId;
    const { delegate, secretAccessKey } = await rs[0]!.service.addDelegate(leaseId, CALLER);
    const id = delegate.delegateId;
    for (const r of rs)
      await until(() => r.service.delegateSecretOf(id) === secretAccessKey, "the delegate known");
    expect(rs[2]!.service.delegateScope(id)).toMatchObject({ bucket: "b", key: "k", leaseId });
    // The delegate renews through another replica than the one it was created on.
    const renewed = await rs[1]!.service.renew(leaseId, 60_000, { principal: id, requestId: null });
    expect(renewed.leaseId).toBe(leaseId);
    await rs[2]!.service.removeDelegate(leaseId, id, CALLER);
    for (const r of rs)
      await until(() => r.service.delegateSecretOf(id) === undefined, "the delegate forgotten");
  });
});

describe("a replica whose wake-up connection was lost", () => {
  it("catches up once it is back: its waiter first in line tries, and delegates added meanwhile are known", async () => {
    const rs = await replicas(2);
    const total = () => rs.reduce((n, r) => n + r.attempts(), 0);
    const resource = { bucket: "b", key: "k" };
    const holder = await acquire(rs[0]!, resource, 0, "holder");
    const waiter = track(acquire(rs[1]!, resource, 30_000, "waiter"));
    await until(() => total() === 2, "the waiter's attempt on arrival");
    const other = await acquire(rs[0]!, { bucket: "b", key: "other" }, 0, "other");
    // Every subscriber connection is cut: what is published until they are back is lost.
    expect(await shared.server.command("CLIENT", "KILL", "TYPE", "pubsub")).toBeGreaterThanOrEqual(2);
    await rs[0]!.service.release(holder.leaseId, CALLER);
    const { delegate } = await rs[0]!.service.addDelegate(other.leaseId, CALLER);
    // Back by itself: the waiter tries once and gets the lease long before the holder's TTL.
    await until(() => waiter.lease !== undefined, "the grant after the reconnection");
    await until(
      () => rs[1]!.service.delegateSecretOf(delegate.delegateId) !== undefined,
      "the delegate known",
    );
  });
});

describe("pools across three replicas on one Redis", () => {
  it("64 groups, 4 workers on different replicas: every worker settles within one of a fair share, no group ever has two owners", async () => {
    const rs = await replicas(3);
    const pools = rs.map((r) => new Pools(r.service, { p: { bucket: "b", prefix: "g/", groups: 64 } }));
    const workers = ["w0", "w1", "w2", "w3"];
    const owners = async () => {
      const leases = await rs[0]!.service.list({ bucket: "b", prefix: "g/" });
      const groups = leases.map((l) => parseGroupKey(l.key!)!.group);
      expect(new Set(groups).size).toBe(groups.length); // never two owners of a group
      return leases;
    };
    let last: Awaited<ReturnType<typeof owners>> = [];
    for (let round = 0; round < 5; round++) {
      for (const [i, w] of workers.entries()) {
        const claim = await pools[i % 3]!.claim("p", w, 60_000, CALLER);
        // Every replica counts every replica's workers.
        if (round > 0) expect(claim.workers).toBe(4);
        last = await owners();
      }
    }
    for (const w of workers) {
      const share = last.filter((l) => l.owner === w).length;
      expect(Math.abs(share - 64 / 4)).toBeLessThanOrEqual(1);
    }
    expect(last).toHaveLength(64);
    // A worker leaves through one replica; the others take its groups over.
    await pools[1]!.leave("p", "w1", CALLER);
    for (let round = 0; round < 3; round++) {
      for (const [i, w] of workers.entries())
        if (w !== "w1") await pools[(i + 1) % 3]!.claim("p", w, 60_000, CALLER);
    }
    last = await owners();
    expect(last).toHaveLength(64);
    for (const w of ["w0", "w2", "w3"]) {
      expect(Math.abs(last.filter((l) => l.owner === w).length - 64 / 3)).toBeLessThan(1);
    }
  }, 60_000);
});
