import { prefixUpperBound } from "../../core/prefix-range.js";
import type { EmbeddedDb } from "../../sqlite/db.js";
import type { LeaseResource } from "../lease-store.js";
import { ACTIVE_SQL, LAPSED_SQL, LEASE_COLUMNS, type LeaseRow } from "./rows.js";

/** Which overlapping leases a lookup wants: the active ones, or those granted after / before a token. */
export type OverlapFilter =
  | { kind: "active"; now: number }
  /** Expired, but not yet seen to end (neither released nor reported). */
  | { kind: "lapsed"; now: number }
  | { kind: "newer"; token: number }
  | { kind: "older"; token: number };

const WHERE: Record<OverlapFilter["kind"], string> = {
  active: ACTIVE_SQL,
  lapsed: LAPSED_SQL,
  newer: "token > @token",
  older: "token < @token",
};

/**
 * Lookups of the leases that overlap a resource, each a few index seeks or one index range,
 * whatever the number of leases (schema.ts has the indexes). The SQL conditions are exactly the
 * overlap rule of lease-rules.ts (`overlaps`), split by the kind of the other lease:
 *
 * - key leases: the same key (for a key), or every key in the prefix's range (for a prefix);
 * - prefix leases that contain the resource: their prefix is one of the resource's own prefixes
 *   ("", "a", "ab", ... the whole key or prefix), each looked up by equality;
 * - prefix leases inside a prefix: their prefix is in the prefix's range.
 *
 * Ranges use prefixUpperBound (code point order = SQLite's BINARY order), never LIKE, and the
 * prefixes are cut by SQLite's substr, which counts code points as String.prototype.startsWith
 * does for well-formed keys.
 */
export function createOverlapQueries(db: EmbeddedDb) {
  const statements = new Map<string, ReturnType<EmbeddedDb["prepare"]>>();
  const first = (sql: string, params: Record<string, unknown>): LeaseRow | undefined => {
    let stmt = statements.get(sql);
    if (!stmt) {
      stmt = db.prepare(sql);
      statements.set(sql, stmt);
    }
    return stmt.get(params) as LeaseRow | undefined;
  };

  /**
   * The overlapping lease with the lowest token where that costs nothing more than a seek (an
   * exact key, a resource's own prefixes); within a range, the first one the index yields:
   * callers need "is there one" and the lease to name, not the oldest of many.
   */
  return function firstOverlapping(resource: LeaseResource, filter: OverlapFilter): LeaseRow | undefined {
    const where = WHERE[filter.kind];
    const active = filter.kind === "active" || filter.kind === "lapsed";
    // Active lookups read the open leases' indexes: a key leased again and again keeps a day of
    // ended leases, which the token-ordered indexes would make a lookup wade through.
    // Newer or older ones, those of the resource's own keys and prefixes, however many leases
    // were granted elsewhere.
    const keyIndex = `INDEXED BY ${active ? "lease_leases_open_key" : "lease_leases_key"}`;
    const prefixIndex = `INDEXED BY ${active ? "lease_leases_open_prefix_path" : "lease_leases_prefix_path"}`;
    const base =
      filter.kind === "active" || filter.kind === "lapsed"
        ? { bucket: resource.bucket, now: filter.now }
        : { bucket: resource.bucket, token: filter.token };
    const found: Array<LeaseRow | undefined> = [];
    const path = resource.key ?? resource.prefix;

    // Prefix leases whose prefix is one of `path`'s own prefixes (including `path` itself).
    found.push(
      first(
        `WITH RECURSIVE cut(len) AS (SELECT 0 UNION ALL SELECT len + 1 FROM cut WHERE len < length(@path))
         SELECT ${LEASE_COLUMNS} FROM cut CROSS JOIN lease_leases ${prefixIndex}
         WHERE bucket = @bucket AND prefix IS NOT NULL AND prefix = substr(@path, 1, len) AND ${where}
         ORDER BY token LIMIT 1`,
        { ...base, path },
      ),
    );
    if (resource.key !== undefined) {
      found.push(
        first(
          `SELECT ${LEASE_COLUMNS} FROM lease_leases ${keyIndex}
           WHERE bucket = @bucket AND key IS NOT NULL AND key = @key AND ${where} ORDER BY token LIMIT 1`,
          { ...base, key: resource.key },
        ),
      );
    } else {
      const upper = prefixUpperBound(resource.prefix);
      const range = (column: string) =>
        upper === null ? `${column} >= @lower` : `${column} >= @lower AND ${column} < @upper`;
      const params =
        upper === null ? { ...base, lower: resource.prefix } : { ...base, lower: resource.prefix, upper };
      found.push(
        first(
          `SELECT ${LEASE_COLUMNS} FROM lease_leases ${keyIndex}
           WHERE bucket = @bucket AND key IS NOT NULL AND ${range("key")} AND ${where} LIMIT 1`,
          params,
        ),
        first(
          `SELECT ${LEASE_COLUMNS} FROM lease_leases ${prefixIndex}
           WHERE bucket = @bucket AND prefix IS NOT NULL AND ${range("prefix")} AND ${where} LIMIT 1`,
          params,
        ),
      );
    }
    let best: LeaseRow | undefined;
    for (const row of found) if (row && (!best || row.token < best.token)) best = row;
    return best;
  };
}
