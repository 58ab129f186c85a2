import type { Redis } from "ioredis";
import { type Clock, systemClock } from "../../core/clock.js";
import { DomainError, isDomainError } from "../../core/errors.js";
import type { Logger } from "../../core/log.js";
import type { LuaScript } from "../../core/lua-source.js";
import {
  DEFAULT_REDIS_KEY_PREFIX,
  type InScriptAppends,
  redisServerOf,
} from "../../core/redis/audit-append.js";
import {
  assertFailClosed,
  eventWithin,
  openFailClosedRedis,
  redactUrl,
} from "../../core/redis-connection.js";
import { decodeCursor, encodeCursor } from "../audit-cursor.js";
import {
  type AuditDraft,
  type AuditLog,
  type AuditQuery,
  type AuditRecord,
  clampLimit,
  draftTime,
  parseFilters,
  recordOf,
} from "../audit-log.js";
import { AUDIT_INDEXES } from "./audit-lua.js";
import { APPEND, APPEND_ONCE, QUERY, RESTORE, TRIM, UNLOCK } from "./audit-scripts.js";
import { draftFields, recordFrom } from "./record-codec.js";
import { type Archiver, createArchiver, type RedisAuditRetention } from "./redis-archiver.js";

/** How long the key of a record appended once is kept: longer than a write's outcome stays unsettled. */
const ONCE_KEPT_S = 3 * 24 * 3600;

export type RedisAuditLogOptions = {
  /** The connection (see connectRedis). */
  redis: Redis;
  /** Close the connection with the log. Default false: it belongs to whoever opened it. */
  ownsConnection?: boolean;
  /** The deployment's key prefix, the same for every replica and for the lease store. */
  keyPrefix?: string;
  /** This gateway instance, written into every record's `gateway`. */
  gatewayId: string;
  clock?: Clock;
  /** Records leaving Redis, and where they go. Without it every record stays in Redis. */
  retention?: RedisAuditRetention;
  /** Records one query examines at most before it answers with what it found and a cursor. */
  queryBudget?: number;
  log?: Logger;
};

export type RedisAuditLog = AuditLog & {
  readonly keyPrefix: string;
  /** Moves due records to the archive now (also done every retention.intervalMs). */
  archiveNow(): Promise<number>;
  /** Whether records are moved to an archive at all. */
  readonly archives: boolean;
  /** Records appended but not yet archived (0 without an archive). */
  archiveLag(): Promise<number>;
  /** For scripts of other components that append records themselves (see InScriptAppends). */
  readonly inScript: InScriptAppends;
};

/**
 * Work per query page at most (about one record read or index entry considered per unit):
 * Redis runs nothing else while a page is read, lease operations of every replica included,
 * so a page of a rare combination of filters answers early with a cursor instead.
 */
const DEFAULT_QUERY_BUDGET = 2_000;

/**
 * A Redis connection that fails closed: no offline queue and no resending after a reconnect,
 * so a command to an unreachable Redis fails at once (the caller answers 503) instead of
 * waiting or running twice. It connects in the background and reconnects for ever, at most a
 * second apart, so service resumes by itself.
 */
export function openRedis(url: string, commandTimeoutMs = 5_000): Redis {
  const redis = openFailClosedRedis(url, { timeoutMs: commandTimeoutMs });
  // Connection errors are reported by the commands that fail; without a listener ioredis
  // would print every reconnect attempt.
  redis.on("error", () => undefined);
  return redis;
}

/** Resolves true once `redis` is ready, false after `waitMs` without it. */
export function redisReady(redis: Redis, waitMs: number): Promise<boolean> {
  return redis.status === "ready" ? Promise.resolve(true) : eventWithin(redis, "ready", waitMs);
}

/** openRedis, connected: rejects when Redis does not answer within the command timeout. */
export async function connectRedis(url: string, commandTimeoutMs = 5_000): Promise<Redis> {
  const redis = openRedis(url, commandTimeoutMs);
  if (await redisReady(redis, commandTimeoutMs)) return redis;
  redis.disconnect();
  throw new Error(`cannot connect to Redis at ${redactUrl(url)}`);
}

/**
 * The audit log of every replica of a deployment, in one Redis (src/audit/redis/audit-lua.ts
 * has the layout). Appends are one script each: seq, record and index entries commit together,
 * in the one order Redis runs scripts in, so a cursor (the last seq a page covered) never skips
 * or repeats a record while others append. Queries are one script per page; records moved out
 * by retention are read from the archive by the same query.
 */
export async function createRedisAuditLog(o: RedisAuditLogOptions): Promise<RedisAuditLog> {
  const { redis, gatewayId } = o;
  assertFailClosed(redis, "the Redis audit log's connection");
  const clock = o.clock ?? systemClock;
  const prefix = o.keyPrefix ?? DEFAULT_REDIS_KEY_PREFIX;
  const budget = o.queryBudget ?? DEFAULT_QUERY_BUDGET;
  const unavailable = (e: unknown): never => {
    if (isDomainError(e)) throw e;
    throw new DomainError(
      "ServiceUnavailable",
      `the audit log in Redis is unavailable: ${(e as Error).message}`,
      {},
      { cause: e },
    );
  };
  // Loaded once here when Redis is up (LuaScript loads one again whenever Redis answers
  // NOSCRIPT: not up yet here, restarted, failed over).
  await Promise.all([APPEND, APPEND_ONCE, QUERY, TRIM, UNLOCK, RESTORE].map((s) => s.load(redis))).catch(
    () => undefined,
  );

  const archiver: Archiver | undefined = o.retention
    ? createArchiver({ redis, prefix, retention: o.retention, clock })
    : undefined;

  // The highest seq this gateway has given out or read: after Redis lost its data, numbering
  // continues above it (and above the archive), so that no seq is given out twice.
  let highestSeen = 0;
  const seen = (seq: number) => {
    if (seq > highestSeen) highestSeen = seq;
  };
  const restore = async (): Promise<void> => {
    let floor = highestSeen;
    const segments: string[] = [];
    if (archiver) {
      const found = await archiver.recover();
      floor = Math.max(floor, found.highest);
      for (const seg of found.chain) segments.push(JSON.stringify(seg), String(seg.last));
    }
    const created = await RESTORE.run(redis, [prefix], [floor, ...segments]);
    if (created === 1 && floor > 0) {
      o.log?.error(
        { floor },
        "the audit log's state in Redis was gone (Redis lost its data): numbering continues above the highest seq known; records that were only in Redis are lost",
      );
    }
  };
  // The counter of a new deployment, or of a Redis that lost its data while no gateway ran.
  await restore().catch(() => undefined);
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<number> | undefined;
  const archiveNow = async (): Promise<number> => {
    if (!archiver) return 0;
    // One run at a time per gateway; the lock in Redis keeps other gateways out.
    running ??= archiver.archiveNow().finally(() => {
      running = undefined;
    });
    return running;
  };
  const interval = o.retention?.intervalMs ?? 60_000;
  if (archiver && interval > 0) {
    timer = setInterval(() => {
      archiveNow().catch((e: unknown) =>
        o.log?.warn({ err: e }, "moving audit records to the archive failed; retrying later"),
      );
    }, interval);
    timer.unref();
  }

  let closed = false;
  const open = () => {
    if (closed) throw new DomainError("ServiceUnavailable", "the Redis audit log is closed");
  };

  /** Runs an append script; when Redis lost the log, restores its counter and runs it once more. */
  const runAppend = async (script: LuaScript, args: readonly (string | number)[]): Promise<number> =>
    Number(
      await script.run(redis, [prefix], args).catch(async (e: unknown) => {
        if (!(e instanceof Error) || !e.message.startsWith("AUDITLOST")) return unavailable(e);
        await restore().catch(unavailable);
        return script.run(redis, [prefix], args).catch(unavailable);
      }),
    );

  return {
    kind: "redis",
    keyPrefix: prefix,
    archiveNow,
    /** Records not yet moved to the archive; 0 without one (metrics). */
    archiveLag: async () => (archiver ? archiver.lag() : 0),
    archives: archiver !== undefined,
    inScript: {
      keyPrefix: prefix,
      gatewayId,
      server: redisServerOf(redis),
      now: () => clock(),
      appended: seen,
      restore: () => {
        open();
        return restore().catch(unavailable);
      },
    },

    async append(draft: AuditDraft): Promise<AuditRecord> {
      open();
      const timeMs = draftTime(draft, clock);
      const fields = draftFields(draft, timeMs, gatewayId);
      const seq = await runAppend(APPEND, fields);
      seen(seq);
      return { seq, ...recordOf(draft, timeMs, gatewayId) };
    },

    async appendOnce(draft: AuditDraft, once: string, unless?: string): Promise<boolean> {
      open();
      const timeMs = draftTime(draft, clock);
      const args = [once, ONCE_KEPT_S, unless ?? "", ...draftFields(draft, timeMs, gatewayId)];
      const seq = await runAppend(APPEND_ONCE, args);
      if (seq === 0) return false;
      seen(seq);
      return true;
    },

    async query(query: AuditQuery) {
      open();
      const filters = parseFilters(query);
      const after = query.cursor === undefined ? 0 : decodeCursor(query.cursor);
      const limit = clampLimit(query.limit);
      const fetch = limit + 1; // one more than asked tells whether another page exists
      const args: Array<string | number> = [
        after,
        fetch,
        budget,
        filters.sinceMs ?? "",
        filters.untilMs ?? "",
        filters.prefix ?? "",
      ];
      for (const [filter, index] of Object.entries(AUDIT_INDEXES)) {
        const value = query[filter as keyof typeof AUDIT_INDEXES];
        if (value !== undefined) args.push(index, value);
      }
      const reply = (await QUERY.run(redis, [prefix], args).catch(unavailable)) as [
        "full" | "end" | "budget",
        number,
        number,
        ...Array<[string, string[]]>,
      ];
      const [state, position, archived, ...found] = reply;
      let records = found.map(([id, fields]) => recordFrom(id, fields));
      let pageState: "full" | "end" | "budget" = state;
      let pagePosition = Number(position);
      // The part of the page that left Redis: (after, archived] is read from the archive, and the
      // script's own part starts after it. The script read `archived` with its records, so the
      // two parts neither overlap nor leave a gap.
      if (after < Number(archived)) {
        if (!archiver) unavailable(new Error("records were archived, but this gateway has no archive store"));
        const part = await archiver!
          .query(filters, after, Number(archived), fetch, budget)
          .catch((e: unknown) => unavailable(e));
        if (part.state !== "end") {
          records = part.records;
          pageState = part.state;
          pagePosition = part.position;
        } else {
          records = [...part.records, ...records];
        }
      }
      for (const r of records) seen(r.seq);
      if (records.length > limit) {
        const page = records.slice(0, limit);
        return { records: page, nextCursor: encodeCursor(page.at(-1)!.seq) };
      }
      // Stopped by the budget: what was found, and a cursor after everything examined.
      if (pageState === "budget") return { records, nextCursor: encodeCursor(pagePosition) };
      return { records, nextCursor: null };
    },

    async ping() {
      open();
      await redis.ping().catch(unavailable);
    },

    async close() {
      closed = true;
      if (timer) clearInterval(timer);
      await running?.catch(() => undefined);
      // Not QUIT, which waits for an answer a silent Redis never gives: a shutdown must not wait.
      if (o.ownsConnection) redis.disconnect();
    },
  };
}
