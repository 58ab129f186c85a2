import { prefixUpperBound } from "../../core/prefix-range.js";
import type { EmbeddedDb } from "../../sqlite/db.js";

/**
 * How an audit query reads audit_records (schema.ts has the indexes). Every answer is a page of
 * records in seq order after a cursor, so every access path that yields rows in seq order can
 * stop at the page's end: an equality filter's (column, seq) index, or the table itself in seq
 * order. A key prefix is a range of keys, not in seq order: its rows are collected and sorted.
 *
 * The path is chosen per query, by counting (up to COUNT_CAP, along the indexes, after the
 * cursor) the rows each filter lets through: the most selective filter drives the read and the
 * others are checked on its rows. When no filter is selective, the table is read in seq order
 * from the cursor: then most rows match and the page fills quickly. Time filters become seq
 * bounds while the log's times never went backwards (the usual case): one index seek each.
 */

/** Counting stops here: a filter that lets this many rows through is not selective. */
const COUNT_CAP = 20_000;

export type PlannedFilters = {
  /** Equality filters on indexed columns (column name -> value). */
  equal: Array<{ column: EqualColumn; value: string }>;
  /** Records whose key, or lease prefix, starts with this. */
  prefix?: string;
  sinceMs?: number;
  untilMs?: number;
  /** Rows after this seq. */
  after: number;
};

export type EqualColumn = "bucket" | "key" | "lease_id" | "op" | "decision" | "transaction_id";

const EQUAL_INDEX: Record<EqualColumn, string> = {
  bucket: "audit_records_bucket",
  key: "audit_records_key",
  lease_id: "audit_records_lease",
  op: "audit_records_op",
  decision: "audit_records_decision",
  transaction_id: "audit_records_transaction",
};

type Planned = { sql: string; params: Record<string, string | number> };

/** `countCap` other than COUNT_CAP: for tests, to reach every path with few records. */
export function createAuditPlanner(db: EmbeddedDb, countCap = COUNT_CAP) {
  const statements = new Map<string, ReturnType<EmbeddedDb["prepare"]>>();
  const prepared = (sql: string) => {
    let stmt = statements.get(sql);
    if (!stmt) {
      stmt = db.prepare(sql);
      statements.set(sql, stmt);
    }
    return stmt;
  };
  const count = (sql: string, params: Record<string, string | number>): number =>
    (prepared(`SELECT count(*) AS n FROM (${sql} LIMIT ${countCap})`).get(params) as { n: number }).n;

  /** The first seq at or after a time (times following seqs); null when there is none. */
  const firstSeqAt = (timeMs: number): number | null =>
    (
      prepared(
        "SELECT seq FROM audit_records INDEXED BY audit_records_time WHERE time_ms >= ? ORDER BY time_ms, seq LIMIT 1",
      ).get(timeMs) as { seq: number } | undefined
    )?.seq ?? null;

  const maxSeq = db.prepare<[], { seq: number | null }>("SELECT max(seq) AS seq FROM audit_records");
  const lastSeq = (): number => maxSeq.get()?.seq ?? 0;

  /**
   * The statement for a page (`fetch` rows), the rows' columns as `columns`. `ordered` says
   * whether the log's times are known to follow its seqs.
   */
  return function plan(f: PlannedFilters, columns: string, fetch: number, ordered: boolean): Planned {
    const params: Record<string, string | number> = { after: f.after, fetch };
    const where: string[] = ["seq > @after"];
    const equal = f.equal.map(({ column, value }, i) => {
      params[`e${i}`] = value;
      return `${column} = @e${i}`;
    });
    where.push(...equal);
    let prefixRange: { key: string; prefix: string } | undefined;
    if (f.prefix !== undefined) {
      params["lower"] = f.prefix;
      const upper = prefixUpperBound(f.prefix);
      if (upper !== null) params["upper"] = upper;
      const range = (c: string) => (upper === null ? `${c} >= @lower` : `${c} >= @lower AND ${c} < @upper`);
      prefixRange = { key: range("key"), prefix: range("prefix") };
    }
    if (f.sinceMs !== undefined) {
      where.push("time_ms >= @since");
      params["since"] = f.sinceMs;
    }
    if (f.untilMs !== undefined) {
      where.push("time_ms < @until");
      params["until"] = f.untilMs;
    }
    // A time window as seq bounds: exact while times follow seqs, so the window costs a seek.
    let seqHi = Number.POSITIVE_INFINITY;
    if (ordered && (f.sinceMs !== undefined || f.untilMs !== undefined)) {
      if (f.sinceMs !== undefined) {
        const lo = firstSeqAt(f.sinceMs);
        params["after"] = lo === null ? Number.MAX_SAFE_INTEGER : Math.max(f.after, lo - 1);
      }
      if (f.untilMs !== undefined) {
        const hi = firstSeqAt(f.untilMs);
        if (hi !== null) {
          seqHi = hi;
          where.push("seq < @seqHi");
          params["seqHi"] = hi;
        }
      }
    }
    // Without the prefix: each half of the prefix path checks its own range instead.
    const rest = where.join(" AND ");
    const filters = prefixRange
      ? `${rest} AND ((key IS NOT NULL AND ${prefixRange.key}) OR (prefix IS NOT NULL AND ${prefixRange.prefix}))`
      : rest;

    // What each path would read, counted up to the cap.
    type Path = { rows: number; sql: () => string };
    const paths: Path[] = [];
    const window = Math.max(0, Math.min(seqHi - 1, lastSeq()) - Number(params["after"]));
    paths.push({
      rows: window,
      sql: () =>
        `SELECT ${columns} FROM audit_records NOT INDEXED WHERE ${filters} ORDER BY seq LIMIT @fetch`,
    });
    f.equal.forEach(({ column }, i) => {
      const index = EQUAL_INDEX[column];
      const own = `${column} = @e${i}`;
      paths.push({
        rows: count(
          `SELECT 1 FROM audit_records INDEXED BY ${index} WHERE ${own} AND seq > @after${seqHi < Infinity ? " AND seq < @seqHi" : ""}`,
          params,
        ),
        sql: () =>
          `SELECT ${columns} FROM audit_records INDEXED BY ${index} WHERE ${filters} ORDER BY seq LIMIT @fetch`,
      });
    });
    if (prefixRange) {
      const bound = `seq > @after${seqHi < Infinity ? " AND seq < @seqHi" : ""}`;
      const keyRows = count(
        `SELECT 1 FROM audit_records INDEXED BY audit_records_key WHERE ${prefixRange.key} AND ${bound}`,
        params,
      );
      const prefixRows = count(
        `SELECT 1 FROM audit_records INDEXED BY audit_records_prefix WHERE ${prefixRange.prefix} AND ${bound}`,
        params,
      );
      paths.push({
        // Either half at the cap: the range's size is unknown, and it is not selective.
        rows: keyRows >= countCap || prefixRows >= countCap ? countCap : keyRows + prefixRows,
        // The page's seqs first, from the two ranges (index-only when no other filter needs the
        // row), then the page's rows.
        sql: () =>
          `SELECT ${columns} FROM audit_records WHERE seq IN (
             SELECT seq FROM audit_records INDEXED BY audit_records_key WHERE ${prefixRange.key} AND ${rest}
             UNION
             SELECT seq FROM audit_records INDEXED BY audit_records_prefix WHERE ${prefixRange.prefix} AND ${rest}
             ORDER BY seq LIMIT @fetch
           ) ORDER BY seq`,
      });
    } else if (!ordered && (f.sinceMs !== undefined || f.untilMs !== undefined)) {
      paths.push({
        rows: count(
          `SELECT 1 FROM audit_records INDEXED BY audit_records_time WHERE ${where.filter((w) => w.startsWith("time_ms")).join(" AND ")} AND seq > @after`,
          params,
        ),
        sql: () =>
          `SELECT ${columns} FROM audit_records INDEXED BY audit_records_time WHERE ${filters} ORDER BY seq LIMIT @fetch`,
      });
    }
    // The fewest rows to read, among paths whose count stayed under the cap; on a tie, the first
    // (the table in seq order, then the equalities). With none under it nothing is selective:
    // most rows match every filter, and the table read in seq order fills the page soonest.
    const selective = paths.filter((p) => p.rows < countCap);
    const chosen = selective.length === 0 ? paths[0]! : selective.reduce((a, b) => (b.rows < a.rows ? b : a));
    return { sql: chosen.sql(), params };
  };
}
