import { DomainError } from "../core/errors.js";
import type { TxDomain } from "../core/tx.js";

/**
 * The contract every audit log (embedded, on a file or in memory; redis) fulfils. Records are
 * numbered by `seq` in commit order; `append` resolves only once the record is durable.
 *
 * A log that shares a TxDomain with a storage backend or a lease store (src/core/tx.ts) offers
 * `appendInStep`: called inside one of that domain's atomic steps, the record commits or rolls
 * back with the step's other changes.
 */

/**
 * accepted / rejected: what happened to a write or lease event. unknown: a write whose commit
 * was sent and whose answer never came; a later record with the same requestId gives the outcome
 * once the gateway has learnt it.
 */
export type AuditDecision = "accepted" | "rejected" | "unknown";

/** Page sizes of audit queries (contract: default 100, at most 1000). */
export const DEFAULT_AUDIT_LIMIT = 100;
export const MAX_AUDIT_LIMIT = 1000;

export type AuditRecord = {
  seq: number;
  time: string; // ISO 8601
  op: string; // S3 operation (PutObject, DeleteObject, ...) or lease event (LeaseAcquired, ...)
  bucket: string | null;
  key: string | null;
  prefix: string | null;
  token: number | null;
  leaseId: string | null;
  owner: string | null;
  principal: string | null; // access key id
  decision: AuditDecision;
  reason: string | null; // error code when rejected (or unknown)
  highestToken: number | null;
  requestId: string | null;
  gateway: string; // instance id
  /**
   * The fenced transaction the record belongs to (a staged write, or the transaction's own
   * commit or abort). Absent, never null, on records outside a transaction.
   */
  transactionId?: string;
  /**
   * The keys a transaction's commit or abort (TransactionCommitted, TransactionAborted) covered,
   * in the order it names them (at most 10,000 keys of at most 1,024 bytes each: the logs keep
   * them as one JSON text, not indexed). Absent, never null, on other records.
   */
  keys?: string[];
};

export type AuditDraft = Omit<AuditRecord, "seq" | "time" | "gateway" | "transactionId" | "keys"> & {
  time?: string;
  /** The gateway that made the decision, when another one records it (default: this one). */
  gateway?: string;
  transactionId?: string | null;
  keys?: readonly string[] | null;
};

/**
 * A record's transaction fields from a draft's (or a stored row's): each present only when it
 * is not null, so that a record outside a transaction has neither. The keys are a copy.
 */
export function transactionFields(
  transactionId: string | null | undefined,
  keys: readonly string[] | null | undefined,
): Pick<AuditRecord, "transactionId" | "keys"> {
  const out: Pick<AuditRecord, "transactionId" | "keys"> = {};
  if (transactionId !== null && transactionId !== undefined) out.transactionId = transactionId;
  if (keys !== null && keys !== undefined) out.keys = [...keys];
  return out;
}

/** An ISO 8601 time given as `field`, in ms; InvalidArgument when it is none. */
export function parseTime(value: string, field: string): number {
  const ms = Date.parse(value);
  if (Number.isNaN(ms))
    throw new DomainError("InvalidArgument", `${field} is not an ISO 8601 time: ${value}`);
  return ms;
}

/** The time (ms) of a record appended now from `draft`: its own time, or the clock's. */
export const draftTime = (draft: AuditDraft, clock: () => number): number =>
  draft.time === undefined ? clock() : parseTime(draft.time, "time");

/** The API validates the bounds; this only keeps a bad caller from asking for everything. */
export function clampLimit(limit: number): number {
  if (!Number.isFinite(limit)) return DEFAULT_AUDIT_LIMIT;
  return Math.min(MAX_AUDIT_LIMIT, Math.max(1, Math.floor(limit)));
}

/**
 * The record of `draft` appended at `timeMs`, but for its seq: absent fields null, the gateway
 * the draft names or else `gatewayId`. Every audit log builds its records with this.
 */
export function recordOf(draft: AuditDraft, timeMs: number, gatewayId: string): Omit<AuditRecord, "seq"> {
  return {
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
    gateway: draft.gateway ?? gatewayId,
    ...transactionFields(draft.transactionId, draft.keys),
  };
}

export type AuditQuery = {
  bucket?: string;
  key?: string;
  /** Records whose key (or lease prefix) starts with this. */
  prefix?: string;
  leaseId?: string;
  decision?: AuditDecision;
  op?: string;
  /** Records of this fenced transaction (exact match). */
  transactionId?: string;
  since?: string; // ISO 8601, inclusive
  until?: string; // ISO 8601, exclusive
  limit: number; // 1..1000
  /** Opaque cursor returned by the previous page. */
  cursor?: string;
};

/**
 * The filters of a query, parsed once; `matches` is the test every log makes (the embedded one
 * in SQL, the Redis one in its query script too).
 */
export type ParsedFilters = {
  equal: Array<[keyof AuditRecord, string]>;
  prefix: string | undefined;
  sinceMs: number | undefined;
  untilMs: number | undefined;
};

export function parseFilters(query: AuditQuery): ParsedFilters {
  const equal = (["bucket", "key", "leaseId", "decision", "op", "transactionId"] as const).flatMap(
    (field): ParsedFilters["equal"] => (query[field] === undefined ? [] : [[field, query[field]]]),
  );
  return {
    equal,
    // An empty prefix filters nothing.
    prefix: query.prefix ? query.prefix : undefined,
    sinceMs: query.since === undefined ? undefined : parseTime(query.since, "since"),
    untilMs: query.until === undefined ? undefined : parseTime(query.until, "until"),
  };
}

/** Whether `record` passes the filters `f`. */
export function matches(f: ParsedFilters, record: AuditRecord): boolean {
  for (const [field, value] of f.equal) if (record[field] !== value) return false;
  if (f.prefix !== undefined) {
    const p = f.prefix;
    if (!record.key?.startsWith(p) && !record.prefix?.startsWith(p)) return false;
  }
  const t = Date.parse(record.time);
  if (f.sinceMs !== undefined && t < f.sinceMs) return false;
  if (f.untilMs !== undefined && t >= f.untilMs) return false;
  return true;
}

export type AuditPage = { records: AuditRecord[]; nextCursor: string | null };

export interface AuditLog {
  readonly kind: string;
  /** The domain of the log's own appends, when co-located components can share it. */
  readonly domain?: TxDomain;
  /** Present exactly when `domain` is: appends synchronously, inside a step of that domain. */
  readonly appendInStep?: (draft: AuditDraft) => AuditRecord;
  append(draft: AuditDraft): Promise<AuditRecord>;
  /**
   * Appends the record unless a record was appended under `once` already, by any replica: how the
   * outcome of a write is recorded exactly once, whoever learns it first (the gateway that sent
   * it, or the grant that fences its commit before a newer lease writes). False when it was there.
   * `unless`: nor when a record was appended under that key (a write's "unknown" record is not
   * appended once its outcome is recorded: the outcome's record would otherwise come first).
   */
  appendOnce(draft: AuditDraft, once: string, unless?: string): Promise<boolean>;
  query(query: AuditQuery): Promise<AuditPage>;
  ping(): Promise<void>;
  close(): Promise<void>;
}
