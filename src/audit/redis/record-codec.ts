import type { AuditField } from "../../core/redis/audit-append.js";
import { type AuditDraft, type AuditRecord, transactionFields } from "../audit-log.js";

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

function keysOf(stored: string | null): string[] | null {
  return stored === null ? null : (JSON.parse(stored) as string[]);
}

function decisionOf(stored: string | undefined): AuditRecord["decision"] {
  return stored === "rejected" || stored === "unknown" ? stored : "accepted";
}
