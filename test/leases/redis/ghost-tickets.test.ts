/**
 * Tickets nobody waits on in the wait queue every replica shares (see
 * test/safety/nemesis/ghost-waiter.test.ts for one gateway): a waiter whose leave (or the answer
 * to its enqueue) was lost has its ticket left again in the background until Redis answers, so
 * that other replicas' requests are not kept out until the ticket's deadline; a leave that
 * reaches Redis before its ticket's enqueue makes that enqueue queue nothing.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createEmbeddedAuditLog } from "../../../src/audit/embedded/embedded-audit-log.js";
import { systemClock } from "../../../src/core/clock.js";
import { DomainError } from "../../../src/core/errors.js";
import { LuaScript } from "../../../src/core/lua-source.js";
import { type Caller, type LeaseInfo, LeaseService } from "../../../src/leases/lease-service.js";
import { LEAVE } from "../../../src/leases/redis/lua/wait-scripts.js";
import { createRedisLeaseStore, type RedisLeaseStore } from "../../../src/leases/redis/redis-lease-store.js";
import { createFileEpochStore } from "../../../src/leases/redis-shared/file-epoch-store.js";
import { useRedisForFile } from "../../support/redis.js";
import { type RedisFaultProxy, startRedisFaultProxy } from "../../support/redis-fault-proxy.js";
import { sleep } from "../../support/wait.js";

const CALLER: Caller = { principal: null, requestId: null };
const LIMITS = { minTtlMs: 1, maxTtlMs: 3_600_000, maxWaitMs: 60_000 };
/** Far longer than any wait below: a ticket left behind would keep requests out this long. */
const TICKET_TTL_MS = 30_000;
const LEAVE_SHA = new LuaScript("wait", LEAVE).sha;

const shared = useRedisForFile();
let proxy: RedisFaultProxy;
beforeAll(async () => {
  proxy = await startRedisFaultProxy(shared.server.port);
});
afterAll(async () => {
  await proxy?.close();
});

let deployments = 0;
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

type Replica = { store: RedisLeaseStore; service: LeaseService };

/** Replicas of one deployment, each on its own connections: the first through the fault proxy. */
async function replicas(n: number): Promise<Replica[]> {
  const prefix = `{ghost${++deployments}}`;
  const out: Replica[] = [];
  for (let i = 0; i < n; i++) {
    const audit = createEmbeddedAuditLog({ gatewayId: `gw${i}` });
    closers.push(() => audit.close());
    const store = createRedisLeaseStore({
      url: i === 0 ? proxy.url : shared.server.url,
      keyPrefix: prefix,
      epochs: createFileEpochStore(`${shared.epochDir}/${prefix}`),
      waitTicketTtlMs: TICKET_TTL_MS,
      events: audit,
    });
    closers.push(() => store.close());
    if (!(await store.ready(5_000))) throw new Error("no connection to Redis");
    const service = new LeaseService({
      store,
      audit,
      clock: systemClock,
      limits: LIMITS,
      fenceObject: async () => {},
    });
    await service.loadDelegates();
    out.push({ store, service });
  }
  return out;
}

const acquire = (r: Replica, waitMs: number, owner: string) =>
  r.service.acquire({ resource: { bucket: "b", key: "k" }, ttlMs: 60_000, waitMs, owner }, CALLER);

const code = (e: unknown) => (e instanceof DomainError ? e.code : String(e));

/** A waiter on replica `r` that gives up behind a holder, and whose leave never reaches Redis. */
async function ghostOn(r: Replica): Promise<void> {
  const lost = proxy.on({ command: "EVALSHA", args: (a) => a[0] === LEAVE_SHA }, { kind: "reset" });
  const waiter = await acquire(r, 200, "ghost").catch((e: unknown) => e);
  lost.cancel();
  expect(lost.count).toBe(1);
  expect(code(waiter)).toBe("LeaseHeld");
}

const leavesSeen = () => proxy.seen.filter((c) => c.command === "EVALSHA" && c.args[0] === LEAVE_SHA).length;

describe("a ticket whose leave was lost, with several replicas", () => {
  it("is left again in the background: another replica's next request is granted long before the ticket's deadline", async () => {
    const [a, b] = await replicas(2);
    const holder = await acquire(b!, 0, "holder");
    const leavesBefore = leavesSeen();
    await ghostOn(a!);
    await b!.service.release(holder.leaseId, CALLER);
    const start = Date.now();
    let next: LeaseInfo | unknown;
    do {
      next = await acquire(b!, 0, "next").catch((e: unknown) => e);
      if (!(next instanceof DomainError)) break;
      // Only while replica A has not yet been heard from again.
      expect(next.code).toBe("LeaseHeld");
      await sleep(50);
    } while (Date.now() - start < 5_000);
    expect(next).toMatchObject({ bucket: "b", key: "k", owner: "next" });
    expect(Date.now() - start).toBeLessThan(5_000);
    expect(leavesSeen() - leavesBefore).toBeGreaterThanOrEqual(2);
  }, 20_000);

  it("waiters of another replica queued behind it are woken when it leaves, and served in order", async () => {
    const [a, b] = await replicas(2);
    const holder = await acquire(b!, 0, "holder");
    await ghostOn(a!);
    const start = Date.now();
    // Nothing more goes through replica A: only its background retry removes the ticket.
    const first = acquire(b!, 10_000, "first");
    await sleep(50);
    const second = acquire(b!, 10_000, "second");
    second.catch(() => undefined);
    await sleep(50);
    await b!.service.release(holder.leaseId, CALLER);
    const lease = await first;
    expect(lease.owner).toBe("first");
    expect(Date.now() - start).toBeLessThan(5_000);
    await b!.service.release(lease.leaseId, CALLER);
    expect((await second).owner).toBe("second");
  }, 20_000);
});

describe("a leave that reaches Redis before its ticket's enqueue", () => {
  it("makes that enqueue queue nothing (the waiter is gone)", async () => {
    const [r] = await replicas(1);
    const line = r!.store.sharedWaitLine();
    const resource = { bucket: "b", key: "k" };
    await line.leave("late-ticket");
    expect(await line.enqueue("late-ticket", resource)).toBe(false);
    expect(await line.waitingOn([resource])).toEqual([0]);
    expect(await line.enqueue("other-ticket", resource)).toBe(true);
    await line.leave("other-ticket");
    expect(await line.waitingOn([resource])).toEqual([0]);
  });
});
