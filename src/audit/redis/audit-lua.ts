import { luaFiles } from "../../core/lua-source.js";

const lua = luaFiles(import.meta.url);

/**
 * The audit append as a Lua function, shared by the audit log's own append script and by the
 * lease scripts (src/leases/redis), which record a lease event in the same script that changes
 * the lease: the event and its record commit together or not at all.
 *
 * A script that includes AUDIT_APPEND_LUA defines `P` (the deployment's key prefix, KEYS[1])
 * before it, and calls `audit_append(r)` with `r` a table of record fields (AUDIT_FIELDS, all
 * strings, `t` the time in ms, absent fields nil). It returns the record's seq. Before changing
 * anything it calls `audit_ready()` and refuses when it is false (Redis writes made before an
 * error in a script stay): the log's counter is gone, Redis lost its data, and the gateway
 * restores the counter above every seq given out before the log takes records again.
 *
 * Layout under the deployment's key prefix P (every key carries the same hash tag):
 * - `P:a`               the log: one stream entry per record, id `0-<seq>`, in commit order;
 * - `P:a:seq`           the last seq given out (INCR inside the appending script: one total
 *                       order for every replica, see below);
 * - `P:a:x:<f>:<value>` one index per filter value: streams with the log's ids and no payload
 *                       for b bucket, d decision, o op; sorted sets of seqs (score = member =
 *                       seq) for k key, p lease prefix, l lease, tx transaction. A filtered page
 *                       reads only its own index (the keys of a transaction, `ks`, have none);
 * - `P:a:n:k`, `P:a:n:p` every key and every lease prefix that has an index (sorted by bytes):
 *                       a prefix filter finds its indexes with one range read;
 * - `P:a:last`          the latest record time (ms), and `h` in each record: the latest time of
 *                       the log up to and including that record, which never decreases with seq;
 * - `P:a:lag`           how far (ms) any record's time was behind the latest time before it
 *                       (replicas' clocks differ): a record with time t has h - lag <= t <= h,
 *                       so a time window is a seq range found by binary search on h;
 * - `P:a:archived`, `P:a:seg`  the last seq moved to the archive, and the archive's segments by
 *                       their last seq (redis-archiver.ts).
 */

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

/** The query filter -> the index name (`P:a:x:<name>:<value>`). */
export const AUDIT_INDEXES = {
  bucket: "b",
  key: "k",
  leaseId: "l",
  decision: "d",
  op: "o",
  transactionId: "tx",
} as const;

/** The key prefix used when the configuration names none (the hash tag keeps one slot). */
export const DEFAULT_REDIS_KEY_PREFIX = "{fencegate}";

/** Lua: `audit_append(r)` appends record `r` (field -> string, `t` in ms) and returns its seq. */
export const AUDIT_APPEND_LUA = lua("lua/audit-append.lua", {
  AUDIT_FIELDS: AUDIT_FIELDS.map((f) => `'${f}'`).join(", "),
});
