import type { Redis } from "ioredis";
import type { Logger } from "../../core/log.js";
import { LuaScript } from "../../core/lua-source.js";
import { assertFailClosed, openSubscriber } from "../../core/redis-connection.js";
import { newLeaseId } from "../lease-rules.js";
import type { LeaseEventContext, LeaseResource } from "../lease-store.js";
import { validateAcquire } from "../lease-validation.js";
import { decodeIntents, decodeLease, decodeLeases } from "../redis-shared/lease-codec.js";
import type {
  DelegateNotice,
  HeadAttempt,
  PoolMembership,
  SharedWaitLine,
  WaitNotice,
} from "../wait-queue.js";
import {
  ACQUIRE_AS_HEAD,
  ANNOUNCE,
  COUNT,
  ENDED,
  ENQUEUE,
  LEAVE,
  POOL_JOIN,
  POOL_LEAVE,
  REFRESH,
} from "./lua/wait-scripts.js";

const SCRIPTS = {
  enqueue: new LuaScript("wait-enqueue", ENQUEUE),
  acquireAsHead: new LuaScript("wait-acquire", ACQUIRE_AS_HEAD),
  leave: new LuaScript("wait-leave", LEAVE),
  ended: new LuaScript("wait-ended", ENDED),
  count: new LuaScript("wait-count", COUNT),
  refresh: new LuaScript("wait-refresh", REFRESH),
  poolJoin: new LuaScript("pool-join", POOL_JOIN),
  poolLeave: new LuaScript("pool-leave", POOL_LEAVE),
  announce: new LuaScript("announce", ANNOUNCE),
};

type RedisWaitingDeps = {
  /** The store's connection: commands run on it; wake-ups arrive on a duplicate of it. */
  redis: Redis;
  keyPrefix: string;
  /** The store's script runner (clock and retention arguments, fail-closed errors). */
  run(script: LuaScript, args: readonly (string | number)[]): Promise<unknown>;
  /**
   * How the store runs its acquire script (token floor, epoch, quarantine, and the lease events'
   * records of the grant's lease events, asked by `by`).
   */
  runAcquire(
    script: LuaScript,
    args: readonly (string | number)[],
    by: LeaseEventContext | undefined,
  ): Promise<unknown[]>;
  ticketTtlMs: number;
  log?: Logger;
};

/** Tickets left in one script run, at most. */
const LEAVE_BATCH = 500;

const resourceArgs = (r: LeaseResource): [string, string, string] =>
  r.key !== undefined ? ["k", r.bucket, r.key] : ["p", r.bucket, r.prefix];

/**
 * The wait queue and pool membership of every gateway replica on one Redis (scripts in
 * lua/wait-scripts.ts). Wake-ups come by pub/sub on one channel, on a connection of their own,
 * opened on the first listen() and closed with the store's connection.
 */
export function createRedisWaiting(deps: RedisWaitingDeps): { line: SharedWaitLine; pools: PoolMembership } {
  const { run, runAcquire, ticketTtlMs } = deps;
  assertFailClosed(deps.redis, "the Redis wait queue's connection");
  const channel = `${deps.keyPrefix}:wake`;
  const listeners: Array<(n: WaitNotice | DelegateNotice) => void> = [];
  let listening: Promise<void> | null = null;

  /**
   * Tickets whose leave Redis has not confirmed (its answer, or the answer to their enqueue, was
   * lost), with when they were first left: left again in the background until Redis answers, and
   * before this replica queues another ticket. Otherwise a ticket nobody waits on would stand in
   * front of every request for its resource until its deadline, each refused with LeaseHeld
   * although nothing is held. Once a ticket's TTL has passed, Redis skips it anyway: forgotten.
   */
  const leaving = new Map<string, number>();
  let retryTimer: NodeJS.Timeout | undefined;
  let retries = 0;
  let closed = false;

  /** Leaves every ticket whose leave is pending (LEAVE is idempotent: repeating one is harmless). */
  async function leavePending(): Promise<void> {
    const forgetBefore = performance.now() - ticketTtlMs;
    for (const [ticket, since] of leaving) if (since < forgetBefore) leaving.delete(ticket);
    const tickets = [...leaving.keys()];
    for (let i = 0; i < tickets.length; i += LEAVE_BATCH) {
      const batch = tickets.slice(i, i + LEAVE_BATCH);
      await run(SCRIPTS.leave, [ticketTtlMs, ...batch]);
      for (const ticket of batch) leaving.delete(ticket);
    }
    retries = 0;
  }

  /** Tries the pending leaves again, backing off up to a second, until Redis has taken them all. */
  function retryLeaves(): void {
    if (retryTimer || closed || leaving.size === 0) return;
    retryTimer = setTimeout(
      () => {
        retryTimer = undefined;
        leavePending()
          .catch((e: unknown) => {
            if (retries++ === 0) deps.log?.warn({ err: (e as Error).message }, "Redis wait queue: leave");
          })
          .finally(retryLeaves);
      },
      Math.min(100 * 2 ** retries, 1_000),
    );
    retryTimer.unref();
  }
  deps.redis.once("end", () => {
    closed = true;
    clearTimeout(retryTimer);
    leaving.clear();
  });

  const enqueue = async (ticket: string, resource: LeaseResource): Promise<boolean> => {
    // This replica's own left tickets go first: none of them is in front of this one. Until
    // Redis confirms they are gone, nothing is queued (the answer would be a guess).
    if (leaving.size > 0) await leavePending().finally(retryLeaves);
    return Number(await run(SCRIPTS.enqueue, [ticket, ...resourceArgs(resource), ticketTtlMs])) === 1;
  };

  function subscribe(): Promise<void> {
    const sub = openSubscriber(deps.redis);
    sub.on("error", (e: Error) => deps.log?.warn({ err: e.message }, "Redis wait queue: wake-ups"));
    // Back after a lost connection (ioredis subscribes again by itself): what was published
    // meanwhile is lost, and the listeners catch up.
    let connections = 0;
    sub.on("ready", () => {
      if (++connections > 1) for (const listener of listeners) listener({ kind: "resubscribed" });
    });
    sub.on("message", (_channel: string, message: string) => {
      let notice: WaitNotice | DelegateNotice;
      try {
        const m = JSON.parse(message) as { m: string; t: unknown; l?: unknown; d?: unknown; r?: unknown };
        const tickets = Array.isArray(m.t) ? m.t.map(String) : [];
        if (m.m === "held") {
          const lease = decodeLease(m.l);
          if (!lease) return;
          notice = { kind: "held", tickets, lease };
        } else if (m.m === "ended" || m.m === "left") {
          notice = { kind: m.m, tickets };
        } else if (m.m === "delegate-added" || m.m === "delegate-removed") {
          notice = { ...(m as object), kind: m.m } as DelegateNotice;
        } else return;
      } catch {
        return;
      }
      for (const listener of listeners) listener(notice);
    });
    // The store's connection ends only when the store is closed: so do wake-ups.
    deps.redis.once("end", () => sub.disconnect());
    return sub.subscribe(channel).then(() => undefined);
  }

  const line: SharedWaitLine = {
    ticketTtlMs,
    enqueue,

    async tryAcquireAsHead(ticket, input, by): Promise<HeadAttempt> {
      validateAcquire(input);
      // A left ticket still in front of it would make it `behind`; the background retry's
      // wake-up would come later. Best effort: `behind` is safe, and the retry goes on.
      if (leaving.size > 0) await leavePending().catch(retryLeaves);
      const [kind, bucket, s] = resourceArgs(input.resource);
      for (let attempt = 0; attempt < 3; attempt++) {
        const script = withTicketKey(SCRIPTS.acquireAsHead, `${deps.keyPrefix}:wt:${ticket}`);
        const args = [kind, bucket, s, input.owner, input.ttlMs, newLeaseId(), input.principal ?? ""];
        const reply = await runAcquire(script, args, by);
        switch (reply[0]) {
          case "granted":
            return { granted: true, lease: decodeLease(reply[1])!, expired: decodeLeases(reply[2]) };
          case "held":
            return { granted: false, heldBy: decodeLease(reply[1])! };
          case "fence":
            return { granted: false, fence: { token: Number(reply[1]), intents: decodeIntents(reply[2]) } };
          case "behind":
            return { granted: false, behind: true };
          case "gone":
            // Its deadline passed (the gateway could not refresh it): queued again, at the back.
            if (!(await enqueue(ticket, input.resource))) return { granted: false, behind: true };
            continue;
          default:
            throw new Error(`unexpected answer from the acquire script: ${String(reply[0])}`);
        }
      }
      return { granted: false, behind: true };
    },

    async leave(ticket) {
      leaving.set(ticket, performance.now());
      try {
        await leavePending();
      } catch (e) {
        retryLeaves();
        throw e;
      }
    },

    async ended(resources) {
      if (resources.length > 0) await run(SCRIPTS.ended, resources.flatMap(resourceArgs));
    },

    async waitingOn(resources) {
      if (resources.length === 0) return [];
      if (leaving.size > 0) await leavePending().catch(retryLeaves);
      const counts = (await run(SCRIPTS.count, resources.flatMap(resourceArgs))) as unknown[];
      return counts.map(Number);
    },

    async refresh(tickets) {
      if (tickets.length === 0) return [];
      return ((await run(SCRIPTS.refresh, [ticketTtlMs, ...tickets])) as unknown[]).map(String);
    },

    async announce(notice) {
      await run(SCRIPTS.announce, [JSON.stringify({ m: notice.kind, ...notice })]);
    },

    listen(onNotice) {
      listeners.push(onNotice);
      listening ??= subscribe().catch((e: unknown) => {
        listening = null;
        throw e;
      });
      return listening;
    },
  };

  const pools: PoolMembership = {
    async join(pool, owner, ttlMs) {
      return ((await run(SCRIPTS.poolJoin, [pool, owner, ttlMs])) as unknown[]).map(String);
    },
    async leave(pool, owner) {
      await run(SCRIPTS.poolLeave, [pool, owner]);
    },
  };
  return { line, pools };
}

/** The script run with one more key after the store's own (the ticket's key, KEYS[2]). */
function withTicketKey(script: LuaScript, ticketKey: string): LuaScript {
  const bound: LuaScript = Object.create(script);
  bound.run = (redis, keys, args) => script.run(redis, [...keys, ticketKey], args);
  return bound;
}
