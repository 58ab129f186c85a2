import { type Clock, systemClock } from "../../core/clock.js";
import { DomainError } from "../../core/errors.js";
import { prefixUpperBound } from "../../core/prefix-range.js";
import type { EmbeddedDb } from "../../embedded/db.js";
import {
  type AuditDraft,
  type AuditLog,
  type AuditQuery,
  type AuditRecord,
  DEFAULT_AUDIT_LIMIT,
  MAX_AUDIT_LIMIT,
} from "../audit-log.js";
import { decodeCursor, encodeCursor } from "./cursor.js";
import { migrateAuditTables } from "./schema.js";

export type EmbeddedAuditLogOptions = {
  /** The shared state database (src/embedded/db.ts); not closed by the log. */
  db: EmbeddedDb;
  /** This gateway instance, written into every record's `gateway`. */
  gatewayId: string;
  clock?: Clock;
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
};

const COLUMNS =
  "seq, time, op, bucket, key, prefix, token, lease_id, owner, principal, decision, reason, highest_token, request_id, gateway";

/**
 * The audit log kept in the gateway's own SQLite file. append is one autocommit INSERT: with
 * synchronous=FULL it returns only once the record is on disk, so the caller may answer the
 * request it audits.
 */
export type EmbeddedAuditLog = AuditLog & {
  /**
   * Appends synchronously. Called inside another transaction on the same database (the fs
   * backend's commit), the record commits or rolls back with it.
   */
  appendSync(draft: AuditDraft): AuditRecord;
};

export function createEmbeddedAuditLog({
  db,
  gatewayId,
  clock = systemClock,
}: EmbeddedAuditLogOptions): EmbeddedAuditLog {
  migrateAuditTables(db);

  const insert = db.prepare(
    `INSERT INTO audit_records (time, time_ms, op, bucket, key, prefix, token, lease_id, owner, principal,
       decision, reason, highest_token, request_id, gateway)
     VALUES (@time, @timeMs, @op, @bucket, @key, @prefix, @token, @leaseId, @owner, @principal,
       @decision, @reason, @highestToken, @requestId, @gateway)`,
  );
  const ping = db.prepare("SELECT 1");
  // One statement per combination of filters (at most 2^8), prepared on first use.
  const statements = new Map<string, ReturnType<EmbeddedDb["prepare"]>>();

  let closed = false;
  const open = () => {
    if (closed || !db.open) throw new DomainError("ServiceUnavailable", "the embedded audit log is closed");
  };

  const appendSync = (draft: AuditDraft): AuditRecord => {
    open();
    const timeMs = draft.time === undefined ? clock() : parseTime(draft.time, "time");
    const record: Omit<AuditRecord, "seq"> = {
      time: new Date(timeMs).toISOString(),
      op: draft.op,
      bucket: draft.bucket ?? null,
      key: draft.key ?? null,
      prefix: draft.prefix ?? null,
      token: draft.token ?? null,
      leaseId: draft.leaseId ?? null,
      owner: draft.owner ?? null,
      principal: draft.principal ?? null,
      decision: draft.decision,
      reason: draft.reason ?? null,
      highestToken: draft.highestToken ?? null,
      requestId: draft.requestId ?? null,
      gateway: gatewayId,
    };
    const { lastInsertRowid } = insert.run({ ...record, timeMs });
    return { seq: Number(lastInsertRowid), ...record };
  };

  return {
    kind: "embedded",
    appendSync,

    async append(draft: AuditDraft): Promise<AuditRecord> {
      return appendSync(draft);
    },

    async query(query: AuditQuery) {
      open();
      const where: string[] = [];
      const params: Record<string, string | number> = {};
      const equal = (column: string, name: string, value: string | undefined) => {
        if (value === undefined) return;
        where.push(`${column} = @${name}`);
        params[name] = value;
      };
      equal("bucket", "bucket", query.bucket);
      equal("key", "key", query.key);
      equal("lease_id", "leaseId", query.leaseId);
      equal("decision", "decision", query.decision);
      equal("op", "op", query.op);
      if (query.prefix) {
        // Ranges, not LIKE: `%` and `_` are ordinary characters in object keys.
        params["lower"] = query.prefix;
        const upperPrefix = prefixUpperBound(query.prefix);
        if (upperPrefix === null) {
          where.push("(key >= @lower OR prefix >= @lower)");
        } else {
          params["upper"] = upperPrefix;
          where.push("((key >= @lower AND key < @upper) OR (prefix >= @lower AND prefix < @upper))");
        }
      }
      if (query.since !== undefined) {
        where.push("time_ms >= @since");
        params["since"] = parseTime(query.since, "since");
      }
      if (query.until !== undefined) {
        where.push("time_ms < @until");
        params["until"] = parseTime(query.until, "until");
      }
      if (query.cursor !== undefined) {
        where.push("seq > @after");
        params["after"] = decodeCursor(query.cursor);
      }
      const limit = clampLimit(query.limit);
      params["fetch"] = limit + 1; // one more than asked tells whether another page exists

      const sql = `SELECT ${COLUMNS} FROM audit_records${where.length ? ` WHERE ${where.join(" AND ")}` : ""} ORDER BY seq LIMIT @fetch`;
      let stmt = statements.get(sql);
      if (!stmt) {
        stmt = db.prepare(sql);
        statements.set(sql, stmt);
      }
      const rows = stmt.all(params) as AuditRow[];
      const page = rows.slice(0, limit).map(toRecord);
      const last = page.at(-1);
      return { records: page, nextCursor: rows.length > limit && last ? encodeCursor(last.seq) : null };
    },

    async ping() {
      open();
      ping.get();
    },

    async close() {
      // The db belongs to whoever opened it (shared with the backend and the lease store).
      closed = true;
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
  };
}

function parseTime(value: string, field: string): number {
  const ms = Date.parse(value);
  if (Number.isNaN(ms))
    throw new DomainError("InvalidArgument", `${field} is not an ISO 8601 time: ${value}`);
  return ms;
}

/** The API validates the bounds; this only keeps a bad caller from asking for everything. */
function clampLimit(limit: number): number {
  if (!Number.isFinite(limit)) return DEFAULT_AUDIT_LIMIT;
  return Math.min(MAX_AUDIT_LIMIT, Math.max(1, Math.floor(limit)));
}
