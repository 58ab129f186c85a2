import { DomainError } from "../../core/errors.js";
import type { AuditField } from "../../core/redis/audit-append.js";
import { type AuditDraft, type AuditQuery, type AuditRecord, transactionFields } from "../audit-log.js";

/** A draft as the stream fields the append script takes (field, value, ...); null fields left out. */
export function draftFields(draft: AuditDraft, timeMs: number, gatewayId: string): string[] {
  const fields: Partial<Record<AuditField, string | null>> = {
    t: String(timeMs),
    op: draft.op,
    b: draft.bucket,
    k: draft.key,
    p: draft.prefix,
    tok: draft.token === null ? null : String(draft.token),
    lid: draft.leaseId,
    own: draft.owner,
    pr: draft.principal,
    d: draft.decision,
    r: draft.reason,
    ht: draft.highestToken === null ? null : String(draft.highestToken),
    rq: draft.requestId,
    gw: draft.gateway ?? gatewayId,
    tx: draft.transactionId,
    ks: draft.keys === null || draft.keys === undefined ? null : JSON.stringify(draft.keys),
  };
  const out: string[] = [];
  for (const [name, value] of Object.entries(fields)) {
    if (value !== null && value !== undefined) out.push(name, value);
  }
  return out;
}

/**
 * A record from its stream id (`0-<seq>`) and fields (a flat name, value list). Entries written
 * before records carried a transaction have no `tx` or `ks`: their records have neither field.
 */
export function recordFrom(id: string, flat: readonly string[]): AuditRecord {
  const f = new Map<string, string>();
  for (let i = 0; i + 1 < flat.length; i += 2) f.set(flat[i]!, flat[i + 1]!);
  const text = (name: AuditField) => f.get(name) ?? null;
  const num = (name: AuditField) => {
    const v = f.get(name);
    return v === undefined ? null : Number(v);
  };
  return {
    seq: Number(id.slice(2)),
    time: new Date(Number(f.get("t"))).toISOString(),
    op: f.get("op") ?? "",
    bucket: text("b"),
    key: text("k"),
    prefix: text("p"),
    token: num("tok"),
    leaseId: text("lid"),
    owner: text("own"),
    principal: text("pr"),
    decision: decisionOf(f.get("d")),
    reason: text("r"),
    highestToken: num("ht"),
    requestId: text("rq"),
    gateway: f.get("gw") ?? "",
    ...transactionFields(text("tx"), keysOf(text("ks"))),
  };
}

export function parseTime(value: string, field: string): number {
  const ms = Date.parse(value);
  if (Number.isNaN(ms))
    throw new DomainError("InvalidArgument", `${field} is not an ISO 8601 time: ${value}`);
  return ms;
}

/** The filters of a query, parsed once; `matches` is the same test the query script makes. */
export type ParsedFilters = {
  equal: Array<[keyof AuditRecord, string]>;
  prefix: string | undefined;
  sinceMs: number | undefined;
  untilMs: number | undefined;
};

export function parseFilters(query: AuditQuery): ParsedFilters {
  const equal: ParsedFilters["equal"] = [];
  if (query.bucket !== undefined) equal.push(["bucket", query.bucket]);
  if (query.key !== undefined) equal.push(["key", query.key]);
  if (query.leaseId !== undefined) equal.push(["leaseId", query.leaseId]);
  if (query.decision !== undefined) equal.push(["decision", query.decision]);
  if (query.op !== undefined) equal.push(["op", query.op]);
  if (query.transactionId !== undefined) equal.push(["transactionId", query.transactionId]);
  return {
    equal,
    // An empty prefix filters nothing, as in the other logs.
    prefix: query.prefix ? query.prefix : undefined,
    sinceMs: query.since === undefined ? undefined : parseTime(query.since, "since"),
    untilMs: query.until === undefined ? undefined : parseTime(query.until, "until"),
  };
}

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

function keysOf(stored: string | null): string[] | null {
  return stored === null ? null : (JSON.parse(stored) as string[]);
}

function decisionOf(stored: string | undefined): AuditRecord["decision"] {
  return stored === "rejected" || stored === "unknown" ? stored : "accepted";
}
