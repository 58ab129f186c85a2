import { type Clock, systemClock } from "../../core/clock.js";
import { DomainError } from "../../core/errors.js";
import { closeEmbeddedDb, type EmbeddedDb, embeddedDomain } from "../../sqlite/db.js";
import { Database } from "../../sqlite/sqlite.js";
import { decodeCursor, encodeCursor } from "../audit-cursor.js";
import {
  type AuditDraft,
  type AuditLog,
  type AuditQuery,
  type AuditRecord,
  clampLimit,
  draftTime,
  parseTime,
  recordOf,
  transactionFields,
} from "../audit-log.js";
import { createAuditPlanner, type EqualColumn, type PlannedFilters } from "./query-plan.js";
import { migrateAuditTables } from "./schema.js";

type EmbeddedAuditLogOptions = {
  /**
   * The shared state database (src/sqlite/db.ts); not closed by the log. Default: a database
   * of the log's own in memory (nothing survives the process), closed with the log.
   */
  db?: EmbeddedDb;
  /** This gateway instance, written into every record's `gateway`. */
  gatewayId: string;
  clock?: Clock;
  /** The query planner's count cap (query-plan.ts); tests lower it to reach every path. */
  planCountCap?: number;
};

type AuditRow = {
  seq: number;
  time: string;
  op: string;
  bucket: string | null;
  key: string | null;
  prefix: string | null;
  token: number | null;
  lease_id: string | null;
  owner: string | null;
  principal: string | null;
  decision: AuditRecord["decision"];
  reason: string | null;
  highest_token: number | null;
  request_id: string | null;
  gateway: string;
  transaction_id: string | null;
  /** A JSON array of strings. */
  transaction_keys: string | null;
};

/** How long the key of a record appended once is kept: longer than a write's outcome stays unsettled. */
const ONCE_KEPT_MS = 3 * 24 * 3600_000;

const COLUMNS =
  "seq, time, op, bucket, key, prefix, token, lease_id, owner, principal, decision, reason, highest_token, request_id, gateway, transaction_id, transaction_keys";

/**
 * The audit log kept in the gateway's own SQLite file (or, for tests and single-process setups,
 * in a database in memory: the same records, filters and cursors without durability). append is
 * one step of the database's domain: with synchronous=FULL it resolves only once the record is on
 * disk, so the caller may answer the request it audits. appendInStep joins another component's step on the same
 * database (the fs backend's commit, the embedded lease store's grant): the record then commits
 * or rolls back with it.
 */
export type EmbeddedAuditLog = AuditLog & { appendInStep: (draft: AuditDraft) => AuditRecord };

export function createEmbeddedAuditLog({
  db: given,
  gatewayId,
  clock = systemClock,
  planCountCap,
}: EmbeddedAuditLogOptions): EmbeddedAuditLog {
  const db = given ?? new Database(":memory:");
  migrateAuditTables(db);
  const domain = embeddedDomain(db);

  // Positional parameters: binding them costs less than looking each name up on an object.
  // Columns added later come last, so that the earlier ones keep their positions.
  const insert = db.prepare(
    `INSERT INTO audit_records (time, time_ms, op, bucket, key, prefix, token, lease_id, owner, principal,
       decision, reason, highest_token, request_id, gateway, transaction_id, transaction_keys)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const ping = db.prepare("SELECT 1");
  const claimOnce = db.prepare<[string, number]>(
    "INSERT OR IGNORE INTO audit_once (key, time_ms) VALUES (?, ?)",
  );
  const forgetOnce = db.prepare<[number]>("DELETE FROM audit_once WHERE time_ms < ?");
  const onceClaimed = db.prepare<[string], { key: string }>("SELECT key FROM audit_once WHERE key = ?");
  let claims = 0;
  const plan = createAuditPlanner(db, planCountCap);
  const statements = new Map<string, ReturnType<EmbeddedDb["prepare"]>>();

  // Whether record times have followed seqs so far (a time window is then a seq range), and the
  // latest time: a record stamped before it (a clock stepping back) ends that, durably, in its
  // own step. A step rolled back after that leaves the flag off here: slower plans, same answers.
  let timesOrdered =
    (db.prepare("SELECT value FROM audit_meta WHERE name = 'times_ordered'").get() as { value: number })
      .value === 1;
  let latestTime =
    (db.prepare("SELECT max(time_ms) AS t FROM audit_records").get() as { t: number | null }).t ??
    Number.NEGATIVE_INFINITY;
  const markUnordered = db.prepare("UPDATE audit_meta SET value = 0 WHERE name = 'times_ordered'");

  let closed = false;
  const open = () => {
    if (closed || !db.open) throw new DomainError("ServiceUnavailable", "the embedded audit log is closed");
  };

  const appendInStep = (draft: AuditDraft): AuditRecord => {
    open();
    const timeMs = draftTime(draft, clock);
    const record = recordOf(draft, timeMs, gatewayId);
    const { lastInsertRowid } = insert.run(
      record.time,
      timeMs,
      record.op,
      record.bucket,
      record.key,
      record.prefix,
      record.token,
      record.leaseId,
      record.owner,
      record.principal,
      record.decision,
      record.reason,
      record.highestToken,
      record.requestId,
      record.gateway,
      record.transactionId ?? null,
      record.keys === undefined ? null : JSON.stringify(record.keys),
    );
    if (timeMs < latestTime && timesOrdered) {
      markUnordered.run();
      timesOrdered = false;
    }
    latestTime = Math.max(latestTime, timeMs);
    return { seq: Number(lastInsertRowid), ...record };
  };

  return {
    kind: "embedded",
    domain,
    appendInStep,

    async append(draft: AuditDraft): Promise<AuditRecord> {
      open();
      return domain.run(() => appendInStep(draft));
    },

    async appendOnce(draft: AuditDraft, once: string, unless?: string): Promise<boolean> {
      open();
      return domain.run(() => {
        const now = clock();
        if (unless !== undefined && onceClaimed.get(unless) !== undefined) return false;
        if (claimOnce.run(once, now).changes === 0) return false;
        if (++claims % 1000 === 0) forgetOnce.run(now - ONCE_KEPT_MS);
        appendInStep(draft);
        return true;
      });
    },

    async query(query: AuditQuery) {
      open();
      const equal: PlannedFilters["equal"] = [];
      const add = (column: EqualColumn, value: string | undefined) => {
        if (value !== undefined) equal.push({ column, value });
      };
      add("bucket", query.bucket);
      add("key", query.key);
      add("lease_id", query.leaseId);
      add("decision", query.decision);
      add("op", query.op);
      add("transaction_id", query.transactionId);
      const limit = clampLimit(query.limit);
      const filters: PlannedFilters = {
        equal,
        // Ranges, not LIKE: `%` and `_` are ordinary characters in object keys.
        ...(query.prefix ? { prefix: query.prefix } : {}),
        ...(query.since !== undefined ? { sinceMs: parseTime(query.since, "since") } : {}),
        ...(query.until !== undefined ? { untilMs: parseTime(query.until, "until") } : {}),
        after: query.cursor !== undefined ? decodeCursor(query.cursor) : 0,
      };
      // One more than asked tells whether another page exists.
      const planned = plan(filters, COLUMNS, limit + 1, timesOrdered);
      let stmt = statements.get(planned.sql);
      if (!stmt) {
        stmt = db.prepare(planned.sql);
        statements.set(planned.sql, stmt);
      }
      const rows = stmt.all(planned.params) as AuditRow[];
      const page = rows.slice(0, limit).map(toRecord);
      const last = page.at(-1);
      return { records: page, nextCursor: rows.length > limit && last ? encodeCursor(last.seq) : null };
    },

    async ping() {
      open();
      ping.get();
    },

    async close() {
      // A given db belongs to whoever opened it (shared with the backend and the lease store).
      closed = true;
      if (!given) closeEmbeddedDb(db);
    },
  };
}

function toRecord(row: AuditRow): AuditRecord {
  return {
    seq: row.seq,
    time: row.time,
    op: row.op,
    bucket: row.bucket,
    key: row.key,
    prefix: row.prefix,
    token: row.token,
    leaseId: row.lease_id,
    owner: row.owner,
    principal: row.principal,
    decision: row.decision,
    reason: row.reason,
    highestToken: row.highest_token,
    requestId: row.request_id,
    gateway: row.gateway,
    ...transactionFields(
      row.transaction_id,
      row.transaction_keys === null ? null : (JSON.parse(row.transaction_keys) as string[]),
    ),
  };
}
