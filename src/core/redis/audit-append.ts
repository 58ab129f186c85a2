import type { Redis } from "ioredis";
import { luaFiles } from "../lua-source.js";

const lua = luaFiles(import.meta.url);

/**
 * The audit append as a Lua function, shared by the Redis audit log's own append scripts
 * (src/audit/redis) and by the Redis lease scripts (src/leases/redis-shared/lua/prelude.ts),
 * which record a lease event in the same script that changes the lease: the event and its record
 * commit together or not at all. It lives here, apart from both, so that neither imports the
 * other; the key layout it writes is described in src/audit/redis/audit-lua.ts.
 *
 * A script that includes AUDIT_APPEND_LUA defines `P` (the deployment's key prefix, KEYS[1])
 * before it, and calls `audit_append(r)` with `r` a table of record fields (AUDIT_FIELDS, all
 * strings, `t` the time in ms, absent fields nil). It returns the record's seq. Before changing
 * anything it calls `audit_ready()` and refuses when it is false (Redis writes made before an
 * error in a script stay): the log's counter is gone, Redis lost its data, and the gateway
 * restores the counter above every seq given out before the log takes records again.
 */

/** The key prefix P when the configuration names none (its hash tag keeps every key in one slot). */
export const DEFAULT_REDIS_KEY_PREFIX = "{fencegate}";

/** Stream fields of a record, in the order the log writes them; a null field is left out. */
export const AUDIT_FIELDS = [
  "t",
  "op",
  "b",
  "k",
  "p",
  "tok",
  "lid",
  "own",
  "pr",
  "d",
  "r",
  "ht",
  "rq",
  "gw",
  // Added later (records from before have neither): the fenced transaction, and the keys of a
  // transaction's commit or abort as one JSON array.
  "tx",
  "ks",
] as const;

export type AuditField = (typeof AUDIT_FIELDS)[number];

/**
 * What a lease store on the same Redis needs to append lease events with audit_append
 * (above) inside its own scripts, so that a lease change and its record commit together.
 */
export type InScriptAppends = {
  /** The key prefix the log's keys live under (the script's P must be the same). */
  readonly keyPrefix: string;
  /** Written into every record's `gw`. */
  readonly gatewayId: string;
  /** The Redis server and database the log lives in (redisServerOf). */
  readonly server: string;
  /** The time (ms) of a record appended now: the log's own clock. */
  now(): number;
  /** Reports seqs a script gave out: numbering after a loss of data continues above them. */
  appended(seq: number): void;
  /** Restores the log's counter after Redis lost its data (before that, audit_ready() is false). */
  restore(): Promise<void>;
};

/** An audit log in Redis whose records a lease store's scripts can append (InScriptAppends). */
interface AppendsInScript {
  readonly inScript: InScriptAppends;
}

/** Whether the audit log lets scripts on its Redis append its records. */
export function appendsInScript<L extends object>(log: L): log is L & AppendsInScript {
  return typeof (log as { inScript?: unknown }).inScript === "object";
}

/**
 * The Redis server and database a connection reaches, as a string: two connections with the
 * same one write the same keys.
 */
export function redisServerOf(redis: Redis): string {
  const o = redis.options;
  const where = o.path ? `unix:${o.path}` : `${o.host ?? "localhost"}:${o.port ?? 6379}`;
  return `${where}/${o.db ?? 0}`;
}

/** Lua: `audit_append(r)` appends record `r` (field -> string, `t` in ms) and returns its seq. */
export const AUDIT_APPEND_LUA = lua("audit-append.lua", {
  AUDIT_FIELDS: AUDIT_FIELDS.map((f) => `'${f}'`).join(", "),
});
