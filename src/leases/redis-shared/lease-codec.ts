import { DomainError } from "../../core/errors.js";
import { judgeIntent } from "../lease-rules.js";
import type {
  AcquireInput,
  CommitIntentRef,
  DelegateRecord,
  IntentInput,
  LeaseRecord,
} from "../lease-store.js";

/** A lease's resource as script arguments: kind ('k' | 'p') and the key or prefix. */
export const resourceArgs = (l: Pick<LeaseRecord, "key" | "prefix">): [string, string] =>
  l.key !== undefined ? ["k", l.key] : ["p", l.prefix ?? ""];

/** An acquire's arguments (ARGV[3..9] of the acquire scripts), for a new lease with id `id`. */
export function acquireArgs(input: AcquireInput, id: string): (string | number)[] {
  const [kind, s] = resourceArgs(input.resource);
  return [kind, input.resource.bucket, s, input.owner, input.ttlMs, id, input.principal ?? ""];
}

/** A list's filters as the list script takes them: bucket, '1' when it filters, prefix, same. */
export const listArgs = ({ bucket, prefix }: { bucket?: string; prefix?: string }): string[] => [
  bucket ?? "",
  bucket === undefined ? "0" : "1",
  prefix ?? "",
  prefix === undefined ? "0" : "1",
];

/** A commit intent's arguments (ARGV[3..8] of the begin-commit scripts). */
export const intentArgs = (intentId: string, intent: IntentInput): (string | number)[] => [
  intentId,
  intent.kind,
  intent.bucket,
  intent.key,
  intent.kind === "fenced" ? intent.leaseId : "",
  intent.kind === "fenced" ? intent.token : 0,
];

/** A delegate's record (JSON) as the delegate scripts store it. */
export function decodeDelegate(json: string): DelegateRecord {
  const d = JSON.parse(json) as Record<string, string>;
  return {
    delegateId: d.delegateId!,
    leaseId: d.leaseId!,
    createdBy: d.createdBy!,
    createdAt: Number(d.createdAt),
  };
}

/** A lease hash as Redis returns it (HGETALL: field, value, field, value, ...), as a LeaseRecord. */
export function decodeLease(raw: unknown): LeaseRecord | null {
  if (!Array.isArray(raw) || raw.length === 0) return null;
  const f = new Map<string, string>();
  for (let i = 0; i + 1 < raw.length; i += 2) f.set(String(raw[i]), String(raw[i + 1]));
  const lease: LeaseRecord = {
    leaseId: f.get("id")!,
    bucket: f.get("b")!,
    ...(f.has("k") ? { key: f.get("k")! } : { prefix: f.get("p")! }),
    owner: f.get("o") ?? "",
    token: Number(f.get("tok")),
    ttlMs: Number(f.get("ttl")),
    acquiredAt: Number(f.get("acq")),
    expiresAt: Number(f.get("exp")),
  };
  if (f.has("rel")) lease.releasedAt = Number(f.get("rel"));
  if (f.has("brk")) lease.brokenAt = Number(f.get("brk"));
  if (f.has("end")) lease.endedAt = Number(f.get("end"));
  if (f.has("pr")) lease.principal = f.get("pr")!;
  return lease;
}

/** A lease as the fields of its Redis hash (the reverse of decodeLease). */
export function encodeLease(l: LeaseRecord): Record<string, string> {
  const f: Record<string, string> = {
    id: l.leaseId,
    b: l.bucket,
    o: l.owner,
    tok: String(l.token),
    ttl: String(l.ttlMs),
    acq: String(l.acquiredAt),
    exp: String(l.expiresAt),
  };
  if (l.key !== undefined) f.k = l.key;
  else f.p = l.prefix ?? "";
  if (l.principal !== undefined) f.pr = l.principal;
  if (l.releasedAt !== undefined) f.rel = String(l.releasedAt);
  if (l.brokenAt !== undefined) f.brk = String(l.brokenAt);
  if (l.endedAt !== undefined) f.end = String(l.endedAt);
  return f;
}

export function decodeLeases(raw: unknown): LeaseRecord[] {
  return Array.isArray(raw) ? raw.map((r) => decodeLease(r)!).filter((l) => l !== null) : [];
}

/** (id, bucket, key) triples, as intents_under returns them. */
export function decodeIntents(raw: unknown): CommitIntentRef[] {
  const flat = Array.isArray(raw) ? raw.map(String) : [];
  const out: CommitIntentRef[] = [];
  for (let i = 0; i + 2 < flat.length; i += 3)
    out.push({ intentId: flat[i]!, bucket: flat[i + 1]!, key: flat[i + 2]! });
  return out;
}

/**
 * Throws the refusal of a begin-commit script's answer `["refused", now, lease, newer, covering]`:
 * the lease rules decide which error from the facts the script read.
 */
export function throwIntentRefusal(intent: IntentInput, reply: unknown[]): never {
  const [, now, lease, newer, covering] = reply;
  const facts = { lease: decodeLease(lease), newer: decodeLease(newer), covering: decodeLease(covering) };
  judgeIntent(intent, Number(now), {
    get: (id) => (facts.lease?.leaseId === id ? facts.lease : null),
    findNewerOverlapping: () => facts.newer,
    findActiveCovering: () => facts.covering,
  });
  throw new DomainError("LeaseExpired", "the fencing token's lease is not current", {
    leaseId: intent.kind === "fenced" ? intent.leaseId : undefined,
  });
}
