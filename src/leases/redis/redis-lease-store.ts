import { randomBytes } from "node:crypto";
import { EventEmitter } from "node:events";
import type { Redis } from "ioredis";
import type { Clock } from "../../core/clock.js";
import { DomainError } from "../../core/errors.js";
import type { Logger } from "../../core/log.js";
import { LuaScript } from "../../core/lua-source.js";
import {
  appendsInScript,
  DEFAULT_REDIS_KEY_PREFIX,
  type InScriptAppends,
  redisServerOf,
} from "../../core/redis/audit-append.js";
import { eventWithin, openFailClosedRedis, redactUrl, warnOnErrors } from "../../core/redis-connection.js";
import type { LeaseEvent } from "../../metrics/observe.js";
import { eventsOf, expiries, recordAfter } from "../lease-events.js";
import { leaseNotFound, lostByExpiry, lostByRelease, newLeaseId } from "../lease-rules.js";
import type {
  AcquireResult,
  CommitIntent,
  LeaseEventContext,
  LeaseEvents,
  LeaseStore,
} from "../lease-store.js";
import { validateAcquire, validateTtl } from "../lease-validation.js";
import { type EpochStore, MAX_EPOCH } from "../redis-shared/epoch-store.js";
import {
  acquireArgs,
  decodeDelegate,
  decodeIntents,
  decodeLease,
  decodeLeases,
  intentArgs,
  listArgs,
  resourceArgs,
  throwIntentRefusal,
} from "../redis-shared/lease-codec.js";
import { EVENT_ARGS } from "../redis-shared/lua/prelude.js";
import { checkRedisSettings, type RedisSettingsReport } from "../redis-shared/redis-settings.js";
import { DEFAULTS, SHARED_SCRIPTS } from "../redis-shared/scripts.js";
import type { PoolMembership, SharedWaitLine } from "../wait-queue.js";
import { ACQUIRE, BEGIN_COMMIT, BREAK, INSTALL_EPOCH } from "./lua/lease-scripts.js";
import { RELEASE_AND_WAKE } from "./lua/wait-scripts.js";
import { createRedisWaiting } from "./redis-wait-queue.js";

export type RedisLeaseStoreOptions = {
  /** redis://[user:password@]host:port[/db], or rediss:// for TLS. */
  url: string;
  /** Where token epochs live durably (see epoch-store.ts). */
  epochs: EpochStore;
  /** Every key starts with this; the braces make it a hash tag (one cluster slot). Default {fencegate}. */
  keyPrefix?: string;
  /** Decide with this clock instead of Redis's TIME (tests). Default: Redis's TIME, one clock for every replica. */
  clock?: Clock;
  /** How long an ended lease stays answerable by get/findNewerOverlapping. Default 24h. */
  retainMs?: number;
  /** Minimum interval between retention sweeps (run from collectExpired). Default 1 min. */
  sweepEveryMs?: number;
  /** A Redis command that has not answered by then fails (and the operation answers 503). Default 2 s. */
  commandTimeoutMs?: number;
  /**
   * What to do when Redis runs with settings that break mutual exclusion (an eviction policy,
   * see redis-settings.ts), checked on every (re)connect: "refuse" (the default) answers 503
   * until they are fixed; "warn" logs and serves.
   */
  unsafeSettings?: "refuse" | "warn";
  /**
   * After Redis lost its data (a restart without persistence, a failover to a replica that missed
   * writes), grant nothing and accept no unfenced write for this long (ms): leases granted before
   * the loss may still be held, up to the longest TTL. Default 0: grant at once (tokens stay
   * monotonic either way; see docs/deployment.md for what that gives up).
   */
  quarantineMs?: number;
  log?: Logger;
  /**
   * A waiter's ticket in the shared wait queue is skipped once its gateway has not refreshed it
   * for this long (the gateway died). Default 10 s.
   */
  waitTicketTtlMs?: number;
  /**
   * Records the store's lease events: in the store's own scripts, in the same step as the change,
   * when it is the audit log in this Redis under the same key prefix (appendsInScript); right
   * after each script otherwise.
   */
  events?: LeaseEvents;
};

export type RedisLeaseStore = LeaseStore & {
  /** The connection, for the start-up settings check and tests. */
  readonly redis: Redis;
  /** Whether its scripts append the records of its lease events (the audit log in this Redis). */
  readonly recordsInScript: boolean;
  /** Stops every operation with LeaseStoreUnavailable and this reason (unsafe settings), or resumes (null). */
  refuse(reason: string | null): void;
  /** Forgets ended leases older than retainMs now; returns how many. Runs by itself too. */
  sweep(): Promise<number>;
  /**
   * Resolves once connected and its settings checked (true), or false after `timeoutMs` without
   * a connection.
   */
  ready(timeoutMs: number): Promise<boolean>;
  /** What the last settings check found (null before the first connection). */
  readonly settings: RedisSettingsReport | null;
  /** Checks the settings again now (it also runs on every reconnect and every 30 s). */
  checkSettings(): Promise<RedisSettingsReport>;
  /** The wait queue every replica on this Redis shares (redis-wait-queue.ts). */
  sharedWaitLine(): SharedWaitLine;
  /** Pool members of every replica on this Redis. */
  sharedPoolMembership(): PoolMembership;
  /** A release tells the waiters now first in line in its own script (one call to Redis). */
  readonly releaseWakesWaiters: true;
};

const SCRIPTS = {
  ...SHARED_SCRIPTS,
  acquire: new LuaScript("acquire", ACQUIRE),
  // Release and the wake-up of the waiters first in line, in one call (wait-scripts.ts).
  release: new LuaScript("release", RELEASE_AND_WAKE),
  breakLease: new LuaScript("break", BREAK),
  installEpoch: new LuaScript("install-epoch", INSTALL_EPOCH),
  beginCommit: new LuaScript("begin-commit", BEGIN_COMMIT),
};

/** Where each lease event's script answers its last seq, and which of its answers made the event. */
const EVENT_REPLIES: Record<LeaseEvent, { seqAt: number; made: (status: unknown) => boolean }> = {
  LeaseAcquired: { seqAt: 3, made: (status) => status === "granted" },
  LeaseRenewed: { seqAt: 2, made: (status) => status === "ok" },
  LeaseReleased: { seqAt: 2, made: (status) => status !== "notfound" },
  LeaseBroken: { seqAt: 4, made: (status) => status !== "notfound" },
  LeaseExpired: { seqAt: 2, made: () => true },
};

/**
 * A lease store on one Redis (or a Redis primary with replicas), shared by every gateway replica.
 * Each operation is one Lua script (src/leases/redis/lua), so that a check and the change it
 * allows are one atomic step for all replicas. Tokens are epoch × 2^32 + counter: the counter in
 * Redis, the epoch in an EpochStore outside it, advanced whenever Redis may have lost the counter.
 *
 * It fails closed: while Redis cannot be reached, or the token floor is unknown, every operation
 * throws DomainError LeaseStoreUnavailable (503); it resumes by itself once Redis is back.
 * Commands are never queued while disconnected nor resent after a reconnect: an operation whose
 * outcome is unknown answers 503, and whatever it left behind (a lease nobody holds, an intent)
 * only expires or gets fenced.
 */
export function createRedisLeaseStore(opts: RedisLeaseStoreOptions): RedisLeaseStore {
  const P = opts.keyPrefix ?? DEFAULT_REDIS_KEY_PREFIX;
  const retainMs = opts.retainMs ?? DEFAULTS.retainMs;
  const sweepEveryMs = opts.sweepEveryMs ?? DEFAULTS.sweepEveryMs;
  const where = redactUrl(opts.url);
  // Reconnects for ever, at most a second apart: service resumes by itself.
  const redis = openFailClosedRedis(opts.url, { timeoutMs: opts.commandTimeoutMs ?? 2_000 });
  warnOnErrors(redis, opts.log, "Redis lease store", where);
  let refusal: string | null = null;
  // Settings are checked on every connection before any operation runs on it.
  let settings: RedisSettingsReport | null = null;
  let settingsRefusal: string | null = "not connected yet";
  const settled = new EventEmitter();
  // Whether this connection's settings were read once: until then operations wait (503); after
  // that a periodic check that fails (a slow moment) keeps the verdict it had.
  let checkedThisConnection = false;
  let retry: NodeJS.Timeout | undefined;
  redis.on("close", () => {
    settingsRefusal = "not connected";
    checkedThisConnection = false;
  });
  const check = (): Promise<RedisSettingsReport> =>
    checkRedisSettings(redis)
      .then((report) => {
        // Logged when it changes, not on every periodic check.
        const changed = JSON.stringify(report) !== JSON.stringify(settings);
        settings = report;
        checkedThisConnection = true;
        if (changed)
          for (const w of report.warnings) opts.log?.warn({ redis: where }, `Redis lease store: ${w}`);
        if (changed)
          for (const u of report.unsafe) opts.log?.error({ redis: where }, `Redis lease store: unsafe: ${u}`);
        settingsRefusal =
          report.unsafe.length > 0 && (opts.unsafeSettings ?? "refuse") === "refuse"
            ? `unsafe Redis settings: ${report.unsafe.join("; ")}`
            : null;
        return report;
      })
      .catch((e: Error) => {
        if (!checkedThisConnection) {
          settingsRefusal = `cannot check the Redis server's settings: ${e.message}`;
          // Try again soon rather than refusing until the next periodic check.
          clearTimeout(retry);
          retry = setTimeout(() => {
            if (redis.status === "ready" && !closed) check().catch(() => undefined);
          }, 500);
          retry.unref();
        }
        throw e;
      })
      .finally(() => settled.emit("settled"));
  redis.on("ready", () => {
    settingsRefusal = "checking the Redis server's settings";
    check().catch(() => undefined);
  });
  // Settings fixed (or broken) while connected are noticed within this long.
  const recheck = setInterval(() => {
    if (redis.status === "ready") check().catch(() => undefined);
  }, 30_000);
  recheck.unref();

  let closed = false;
  let advancing: Promise<void> | null = null;
  let lastSweepAt = Number.NEGATIVE_INFINITY;
  let waiting: ReturnType<typeof createRedisWaiting> | undefined;
  const sharedWaiting = () =>
    (waiting ??= createRedisWaiting({
      redis,
      keyPrefix: P,
      run,
      runAcquire,
      ticketTtlMs: opts.waitTicketTtlMs ?? 10_000,
      ...(opts.log ? { log: opts.log } : {}),
    }));

  const unavailable = (why: string) =>
    new DomainError("LeaseStoreUnavailable", `the Redis lease store (${where}) is unavailable: ${why}`);

  function assertServing(): void {
    if (closed) throw unavailable("the store is closed");
    if (refusal) throw unavailable(refusal);
    if (settingsRefusal) throw unavailable(settingsRefusal);
  }

  async function run(script: LuaScript, args: readonly (string | number)[]): Promise<unknown> {
    assertServing();
    const now = opts.clock ? String(opts.clock()) : "";
    try {
      return await script.run(redis, [P], [now, retainMs, ...args]);
    } catch (e) {
      throw unavailable((e as Error).message);
    }
  }

  /**
   * Runs a script that takes tokens; installs a new epoch when it finds the floor unknown, and
   * answers 503 during a quarantine after a loss of data.
   */
  async function runWithFloor(script: LuaScript, args: readonly (string | number)[]): Promise<unknown[]> {
    for (let attempt = 0; attempt < 4; attempt++) {
      const reply = (await run(script, args)) as unknown[];
      if (reply[0] === "quarantine") {
        const until = new Date(Number(reply[1])).toISOString();
        throw unavailable(
          `Redis lost its data; leases granted before may still be held, so nothing is granted until ${until}`,
        );
      }
      if (reply[0] !== "epoch") return reply;
      await advanceEpoch();
    }
    throw unavailable("the token floor keeps changing (is Redis restarting?)");
  }

  /** One advance at a time per gateway; others wait for it. */
  function advanceEpoch(): Promise<void> {
    advancing ??= installNextEpoch().finally(() => {
      advancing = null;
    });
    return advancing;
  }

  async function installNextEpoch(): Promise<void> {
    let seen = -1;
    for (let attempt = 0; attempt < 16; attempt++) {
      let next: number;
      try {
        next = Math.max(await opts.epochs.highest(), seen) + 1;
        if (next > MAX_EPOCH) throw new Error("every epoch is used up");
        if (!(await opts.epochs.create(next))) continue; // another gateway took it: take the next
      } catch (e) {
        throw unavailable(
          `the token floor is unknown and the epoch store cannot advance it: ${(e as Error).message}`,
        );
      }
      // The very first epoch of a deployment follows no loss: no quarantine.
      const quarantine = next === 0 ? 0 : (opts.quarantineMs ?? 0);
      const [status, value] = (await run(SCRIPTS.installEpoch, [next, quarantine])) as [string, string];
      opts.log?.info({ epoch: next, status, redis: where }, "Redis lease store: token epoch");
      if (status !== "stale") return;
      seen = Number(value);
    }
    throw unavailable("could not install a new token epoch");
  }

  /**
   * The audit log this store appends its lease events to in its own scripts: the same Redis server
   * and database, and the same key prefix (the log's keys are the ones the scripts reach, in one
   * cluster slot with the lease keys: the same hash tag).
   */
  const sink: InScriptAppends | undefined =
    opts.events &&
    appendsInScript(opts.events) &&
    opts.events.inScript.keyPrefix === P &&
    opts.events.inScript.server === redisServerOf(redis)
      ? opts.events.inScript
      : undefined;

  /** The event context of a call (EVENT_ARGS in lua/prelude.ts); none when the log is elsewhere. */
  function eventArgs(op: LeaseEvent, by: LeaseEventContext | null): string[] {
    if (!sink) return [];
    const opt = (v: string | null | undefined) => (v === null || v === undefined ? "-" : `=${v}`);
    const args = [sink.gatewayId, String(sink.now()), op, opt(by?.principal), opt(by?.requestId)];
    if (args.length !== EVENT_ARGS) throw new Error("event context arguments out of step with the scripts");
    return args;
  }

  /**
   * Runs a script that makes lease events (op `op`, asked by `by`). With the audit log in this
   * Redis, the script appends their records itself, or changes nothing while the log's counter is
   * gone (Redis lost its data): the log restores it, and the script runs once more. Otherwise the
   * events its answer reports (EVENT_REPLIES) are recorded right after it.
   */
  async function runEvents(
    runner: (script: LuaScript, args: readonly (string | number)[]) => Promise<unknown>,
    script: LuaScript,
    args: readonly (string | number)[],
    op: LeaseEvent,
    by?: LeaseEventContext,
  ): Promise<unknown[]> {
    const { seqAt, made } = EVENT_REPLIES[op];
    for (let attempt = 0; ; attempt++) {
      const reply = (await runner(script, [...args, ...eventArgs(op, by ?? null)])) as unknown[];
      if (reply[0] !== "auditlost") {
        if (!made(reply[0])) return reply;
        const seq = Number(reply[seqAt] ?? 0);
        if (sink && seq > 0) sink.appended(seq);
        if (sink) return reply;
        const lapsed = decodeLeases(
          op === "LeaseAcquired" ? reply[2] : op === "LeaseExpired" ? reply[1] : [],
        );
        const events =
          op === "LeaseExpired" ? expiries(lapsed) : eventsOf(op, decodeLease(reply[1])!, by, lapsed);
        await recordAfter(opts.events, events);
        return reply;
      }
      if (attempt > 0 || !sink) {
        throw unavailable(
          "the audit log in Redis lost its counter (Redis lost its data): no lease event can be recorded",
        );
      }
      await sink.restore().catch((e: unknown) => {
        throw unavailable(`the audit log in Redis cannot take records: ${(e as Error).message}`);
      });
    }
  }

  /** Runs an acquire script (here or the shared queue's): a grant records its events. */
  const runAcquire = (script: LuaScript, args: readonly (string | number)[], by?: LeaseEventContext) =>
    runEvents(runWithFloor, script, args, "LeaseAcquired", by);

  async function maybeSweep(): Promise<void> {
    const now = Date.now();
    if (now - lastSweepAt < sweepEveryMs && now >= lastSweepAt) return;
    lastSweepAt = now;
    await run(SCRIPTS.sweep, [DEFAULTS.sweepLimit]);
  }

  return {
    kind: "redis",
    redis,
    recordsInScript: sink !== undefined,

    async tryAcquire(input, by): Promise<AcquireResult> {
      validateAcquire(input);
      const args = acquireArgs(input, newLeaseId());
      const reply = await runAcquire(SCRIPTS.acquire, args, by);
      if (reply[0] === "granted") {
        return { granted: true, lease: decodeLease(reply[1])!, expired: decodeLeases(reply[2]) };
      }
      if (reply[0] === "held") return { granted: false, heldBy: decodeLease(reply[1])! };
      return { granted: false, fence: { token: Number(reply[1]), intents: decodeIntents(reply[2]) } };
    },

    async get(leaseId) {
      return decodeLease(await run(SCRIPTS.get, [leaseId]));
    },

    async renew(leaseId, ttlMs, by) {
      validateTtl(ttlMs);
      const reply = await runEvents(run, SCRIPTS.renew, [leaseId, ttlMs], "LeaseRenewed", by);
      const [status, value] = reply as [string, unknown];
      if (status === "ok") return decodeLease(value)!;
      if (status === "notfound") throw leaseNotFound(leaseId);
      if (status === "released" || status === "broken") throw lostByRelease(leaseId, status === "broken");
      throw lostByExpiry(leaseId, Number(value));
    },

    async release(leaseId, by) {
      const reply = await runEvents(run, SCRIPTS.release, [leaseId], "LeaseReleased", by);
      const [status, value] = reply as [string, unknown];
      if (status === "notfound") throw leaseNotFound(leaseId);
      return decodeLease(value)!;
    },

    async breakLease(leaseId, by) {
      const reply = await runEvents(runWithFloor, SCRIPTS.breakLease, [leaseId], "LeaseBroken", by);
      if (reply[0] === "notfound") throw leaseNotFound(leaseId);
      return {
        lease: decodeLease(reply[1])!,
        fence: { token: Number(reply[2]), intents: decodeIntents(reply[3]) },
      };
    },

    async addDelegate(d) {
      const args = [d.leaseId, d.delegateId, d.createdBy, d.createdAt];
      if ((await run(SCRIPTS.addDelegate, args)) !== "ok") throw leaseNotFound(d.leaseId);
    },

    async listDelegates(leaseId) {
      const raw = (await run(SCRIPTS.listDelegates, [leaseId ?? ""])) as Array<string | null>;
      return raw.flatMap((json) => (json === null ? [] : [decodeDelegate(json)]));
    },

    async removeDelegate(leaseId, delegateId) {
      return Number(await run(SCRIPTS.removeDelegate, [leaseId, delegateId])) === 1;
    },

    async list(filter) {
      return decodeLeases(await run(SCRIPTS.list, listArgs(filter)));
    },

    async findActiveCovering(bucket, key) {
      return decodeLease(await run(SCRIPTS.findCovering, [bucket, key]));
    },

    async findNewerOverlapping(lease) {
      const [kind, s] = resourceArgs(lease);
      return decodeLease(await run(SCRIPTS.findNewer, [kind, lease.bucket, s, lease.token]));
    },

    async collectExpired() {
      const reply = await runEvents(run, SCRIPTS.collectExpired, [DEFAULTS.collectLimit], "LeaseExpired");
      const expired = decodeLeases(reply[1]);
      await maybeSweep();
      return expired;
    },

    async beginCommit(intent): Promise<CommitIntent> {
      const intentId = randomBytes(12).toString("base64url");
      const reply = await runWithFloor(SCRIPTS.beginCommit, intentArgs(intentId, intent));
      if (reply[0] === "ok") return { intentId, ceiling: Number(reply[1]) };
      throwIntentRefusal(intent, reply);
    },

    async endCommit(intentId) {
      await run(SCRIPTS.forgetIntents, [intentId]);
    },

    async intentsUnder(resource) {
      const [kind, s] = resourceArgs(resource);
      return decodeIntents(await run(SCRIPTS.intentsUnder, [kind, resource.bucket, s]));
    },

    async clearIntents(intentIds) {
      if (intentIds.length > 0) await run(SCRIPTS.forgetIntents, intentIds);
    },

    async ping() {
      assertServing();
      try {
        await redis.ping();
      } catch (e) {
        throw unavailable((e as Error).message);
      }
    },

    async close() {
      if (closed) return;
      closed = true;
      clearInterval(recheck);
      clearTimeout(retry);
      // Not QUIT, which waits for an answer a silent Redis never gives: a shutdown must not wait.
      redis.disconnect();
    },

    refuse(reason) {
      refusal = reason;
    },

    get settings() {
      return settings;
    },

    checkSettings: check,

    ready(timeoutMs) {
      if (redis.status === "ready" && settings !== null && !settingsRefusal?.startsWith("checking")) {
        return Promise.resolve(true);
      }
      return eventWithin(settled, "settled", timeoutMs);
    },

    async sweep() {
      lastSweepAt = Date.now();
      return Number(await run(SCRIPTS.sweep, [DEFAULTS.sweepLimit]));
    },

    sharedWaitLine: () => sharedWaiting().line,

    releaseWakesWaiters: true,

    sharedPoolMembership: () => sharedWaiting().pools,
  };
}
