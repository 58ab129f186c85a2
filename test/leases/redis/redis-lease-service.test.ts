/**
 * The LeaseService contract (fair waiting, pools) over the Redis store: waiting goes through the
 * wait queue every replica shares (src/leases/redis/redis-wait-queue.ts), pool membership through
 * Redis too. Across several replicas: replicas-fifo.test.ts.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { createEmbeddedAuditLog } from "../../../src/audit/embedded/embedded-audit-log.js";
import { systemClock } from "../../../src/core/clock.js";
import { DomainError } from "../../../src/core/errors.js";
import { LeaseService } from "../../../src/leases/lease-service.js";
import type { LeaseEvents, LeaseStore } from "../../../src/leases/lease-store.js";
import { createRedisLeaseStore } from "../../../src/leases/redis/redis-lease-store.js";
import { createFileEpochStore } from "../../../src/leases/redis-shared/file-epoch-store.js";
import type { SharedWaitLine, SharesWaiting } from "../../../src/leases/wait-queue.js";
import { useRedisForFile } from "../../support/redis.js";
import { describeLeaseServiceContract } from "../lease-service.contract.js";

const shared = useRedisForFile();

let harnesses = 0;

/** A store with a key prefix of its own: tests share nothing but the server. */
async function redisStore(name: string, events?: LeaseEvents) {
  const prefix = `{${name}${++harnesses}}`;
  const store = createRedisLeaseStore({
    url: shared.server.url,
    keyPrefix: prefix,
    epochs: createFileEpochStore(`${shared.epochDir}/${prefix}`),
    ...(events ? { events } : {}),
  });
  if (!(await store.ready(5_000))) throw new Error(`no connection to ${shared.server.url}`);
  return store;
}

describeLeaseServiceContract("the Redis store", async (events) => {
  const store = await redisStore("svc", events);
  return { store, cleanup: () => store.close() };
});

describe("LeaseService over the Redis store: a request that will not wait", () => {
  it("gives up, not waits, when it hears it is first behind a new holder before its own ticket is answered", async () => {
    const store = await redisStore("nowait");
    try {
      const line = store.sharedWaitLine();
      const heldNamed = new Set<string>();
      let enqueued = () => {};
      let holdBack = false;
      // The notices and the answers travel on two Redis connections: here the "held" notice
      // naming the ticket is made to arrive before the answer to its enqueue.
      const racing: SharedWaitLine = {
        ...line,
        listen: (onNotice) =>
          line.listen((notice) => {
            if (notice.kind === "held") for (const t of notice.tickets) heldNamed.add(t);
            onNotice(notice);
          }),
        enqueue: async (ticket, resource) => {
          const first = await line.enqueue(ticket, resource);
          if (holdBack) {
            enqueued();
            const since = Date.now();
            while (!heldNamed.has(ticket) && Date.now() - since < 5_000) await sleep(2);
          }
          return first;
        },
      };
      const racingStore: LeaseStore = Object.create(store);
      (racingStore as LeaseStore & SharesWaiting).sharedWaitLine = () => racing;
      const service = new LeaseService({
        store: racingStore,
        audit: createEmbeddedAuditLog({ gatewayId: "test" }),
        clock: systemClock,
        limits: { minTtlMs: 1, maxTtlMs: 3_600_000, maxWaitMs: 60_000 },
        fenceObject: async () => {},
      });
      const caller = { principal: null, requestId: null };
      const resource = { bucket: "b", key: "k" };
      const acquire = (waitMs: number, owner: string) =>
        service.acquire({ resource, ttlMs: 60_000, waitMs, owner }, caller);
      const holder = await acquire(0, "holder");
      const waiter = acquire(30_000, "waiter");
      await sleep(50);
      holdBack = true;
      const ticketQueued = new Promise<void>((resolve) => {
        enqueued = () => resolve();
      });
      const barging = acquire(0, "barging").then(
        () => "granted",
        (e: unknown) => (e instanceof DomainError ? e.code : String(e)),
      );
      await ticketQueued;
      // The waiter ahead is granted; its grant tells the barging ticket it is first behind it.
      await service.release(holder.leaseId, caller);
      expect((await waiter).owner).toBe("waiter");
      const outcome = await Promise.race([barging, sleep(5_000).then(() => "still waiting after 5 s")]);
      expect(heldNamed.size).toBeGreaterThan(0);
      expect(outcome).toBe("LeaseHeld");
    } finally {
      await store.close();
    }
  });
});
