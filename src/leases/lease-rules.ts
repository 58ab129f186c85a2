import { createHash } from "node:crypto";
/**
 * The lease rules every store applies: what a lease's resource overlaps, which keys it covers,
 * and what state it is in at a given instant. Pure functions of their arguments (time is passed
 * in), so that the embedded and Redis stores decide exactly alike.
 */
import { DomainError } from "../core/errors.js";
import { randomHex } from "../core/random.js";
import type { IntentInput, LeaseReads, LeaseRecord, LeaseResource } from "./lease-store.js";

export type LeaseState = "active" | "expired" | "released";

/**
 * A resource as it appears on a LeaseResource or on a stored LeaseRecord (whose `key` and
 * `prefix` are both optional). A defined `key` wins; otherwise the lease is a prefix lease.
 */
export type ResourceRef = Pick<LeaseResource, "bucket"> & {
  key?: string | undefined;
  prefix?: string | undefined;
};

/** Same bucket, and one resource contains the other (the two leases would guard a common key). */
export function overlaps(a: ResourceRef, b: ResourceRef): boolean {
  if (a.bucket !== b.bucket) return false;
  if (a.key !== undefined && b.key !== undefined) return a.key === b.key;
  if (a.key !== undefined) return a.key.startsWith(b.prefix ?? "");
  if (b.key !== undefined) return b.key.startsWith(a.prefix ?? "");
  const pa = a.prefix ?? "";
  const pb = b.prefix ?? "";
  return pa.startsWith(pb) || pb.startsWith(pa);
}

/** Whether the lease's resource includes this object key (a pool group's lease: its group's keys). */
export function covers(lease: ResourceRef, bucket: string, key: string): boolean {
  if (lease.bucket !== bucket) return false;
  if (lease.key !== undefined) {
    const group = parseGroupKey(lease.key);
    if (group)
      return key.startsWith(group.prefix) && !isGroupKey(key) && groupOf(key, group.groups) === group.group;
    return lease.key === key;
  }
  return key.startsWith(lease.prefix ?? "");
}

/**
 * A lease is released only when released while active (a release after expiry reports the
 * expiry instead, see LeaseStore.release). Once the store has seen it end (`endedAt`), it stays
 * ended whatever `now` says: a clock stepped back does not revive it.
 */
export function leaseState(
  lease: Pick<LeaseRecord, "expiresAt" | "releasedAt" | "endedAt">,
  now: number,
): LeaseState {
  if (lease.releasedAt !== undefined) return "released";
  if (lease.endedAt !== undefined) return "expired";
  return lease.expiresAt <= now ? "expired" : "active";
}

export const isActive = (
  lease: Pick<LeaseRecord, "expiresAt" | "releasedAt" | "endedAt">,
  now: number,
): boolean => leaseState(lease, now) === "active";

/**
 * Why a string cannot go into a lease (bucket, key, prefix, owner, principal): it must be
 * well-formed Unicode, since a lone UTF-16 surrogate has no UTF-8 form and each store, the token
 * and each backend would otherwise see a different string. Null when it is fine. The lease API
 * applies the S3 key and bucket rules on top of this (src/core/key-rules.ts).
 */
export function textProblem(name: string, value: string): string | null {
  return LONE_SURROGATE.test(value) ? `${name} is not well-formed Unicode (a lone UTF-16 surrogate)` : null;
}

/**
 * Throws DomainError InvalidArgument unless every string of a grant is well-formed: what each
 * store checks before anything reaches its state, whoever calls it.
 */
export function assertWellFormedAcquire(input: {
  resource: ResourceRef;
  owner: string;
  principal?: string | undefined;
}): void {
  const { resource, owner, principal } = input;
  const problem =
    textProblem("bucket", resource.bucket) ??
    (resource.key !== undefined ? textProblem("key", resource.key) : null) ??
    (resource.prefix !== undefined ? textProblem("prefix", resource.prefix) : null) ??
    textProblem("owner", owner) ??
    (principal !== undefined ? textProblem("principal", principal) : null);
  if (problem) throw new DomainError("InvalidArgument", problem);
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/**
 * The instant the lease stopped being active: its release or its expiry, whichever came first.
 * Meaningful only for an ended lease; stores use it to decide how long to remember it.
 */
export function endedAt(lease: Pick<LeaseRecord, "expiresAt" | "releasedAt">): number {
  return lease.releasedAt === undefined ? lease.expiresAt : Math.min(lease.releasedAt, lease.expiresAt);
}

/** The resource of a stored lease, in the discriminated form. */
export function resourceOf(lease: ResourceRef): LeaseResource {
  return lease.key !== undefined
    ? { bucket: lease.bucket, key: lease.key }
    : { bucket: lease.bucket, prefix: lease.prefix ?? "" };
}

/**
 * Ownership groups (pools): the keys under a pool's prefix are spread over `groups` groups by a
 * stable hash, and a group is leased as one reserved key under the prefix, `<prefix>\0group:<g>/<G>`.
 * No object key can be that (the S3 rules refuse a NUL), a prefix lease containing the pool's
 * prefix overlaps every group lease (the reserved key starts with it), and covers() gives a group
 * lease its group's keys, so that a write is checked with its group's token.
 */
const GROUP_MARK = "\u0000group:";

/** The group of a key: the first 32 bits of its SHA-256, modulo the number of groups. */
export function groupOf(key: string, groups: number): number {
  return createHash("sha256").update(key, "utf8").digest().readUInt32BE(0) % groups;
}

export function groupKey(prefix: string, group: number, groups: number): string {
  return `${prefix}${GROUP_MARK}${group}/${groups}`;
}

const isGroupKey = (key: string): boolean => key.includes(GROUP_MARK);

export function parseGroupKey(key: string): { prefix: string; group: number; groups: number } | null {
  const at = key.lastIndexOf(GROUP_MARK);
  if (at < 0) return null;
  const m = /^(\d+)\/(\d+)$/.exec(key.slice(at + GROUP_MARK.length));
  if (!m) return null;
  return { prefix: key.slice(0, at), group: Number(m[1]), groups: Number(m[2]) };
}

/** Human-readable resource, for messages: `bucket/key` or `bucket/prefix*`. */
export function describeResource(lease: ResourceRef): string {
  return lease.key !== undefined ? `${lease.bucket}/${lease.key}` : `${lease.bucket}/${lease.prefix ?? ""}*`;
}

/** What a fencing token claims about its lease (the signed claims, or an upload's binding). */
export type LeaseClaims = ResourceRef & { leaseId: string; token: number };

/**
 * Rule 4 of the contract, in one place for the fencing core and for every store's
 * beginCommit: refuses unless the claimed lease is current at `now`. `newer` is asked only for
 * an inactive lease: a newer overlapping lease makes the refusal StaleFencingToken (superseded),
 * otherwise it is LeaseExpired. A lease whose stored token or scope differs from the claims is
 * InvalidFencingToken (a reused signing key, or a replaced store).
 */
export function judgeLease(
  claims: LeaseClaims,
  lease: LeaseRecord | null,
  now: number,
  newer: (lease: LeaseRecord) => LeaseRecord | null,
): void {
  const details = { token: claims.token, leaseId: claims.leaseId };
  if (!lease) {
    throw new DomainError(
      "LeaseExpired",
      "the fencing token's lease has ended and is no longer known",
      details,
    );
  }
  if (
    lease.token !== claims.token ||
    lease.bucket !== claims.bucket ||
    lease.key !== claims.key ||
    (lease.key === undefined && lease.prefix !== claims.prefix)
  ) {
    throw new DomainError("InvalidFencingToken", "the fencing token does not match its lease", details);
  }
  const state = leaseState(lease, now);
  if (state === "active") return;
  const successor = newer(lease);
  if (successor) {
    throw new DomainError(
      "StaleFencingToken",
      `the lease was superseded by a newer lease (token ${successor.token})`,
      details,
    );
  }
  throw new DomainError("LeaseExpired", `the lease ${howEnded(lease)}`, details);
}

/**
 * How an ended lease ended, in words (after "the lease" or "lease <id>"): "was broken by an
 * administrator", "was released", or "expired (not renewed in time)". A successor, when there is
 * one, is named by the caller ("superseded by token N").
 */
function howEnded(lease: Pick<LeaseRecord, "releasedAt" | "brokenAt">): string {
  if (lease.brokenAt !== undefined) return "was broken by an administrator";
  if (lease.releasedAt !== undefined) return "was released";
  return "expired (not renewed in time)";
}

/**
 * The LeaseLost of a renewal of a lease that was released or broken: its `reason` ("broken" or
 * "released") is what the SDK's LeaseLostError reports.
 */
export function lostByRelease(leaseId: string, broken: boolean): DomainError {
  const how = broken ? "was broken by an administrator" : "was released";
  return new DomainError("LeaseLost", `lease ${leaseId} ${how}`, {
    leaseId,
    reason: broken ? "broken" : "released",
  });
}

/** The LeaseLost of a renewal of a lease that expired (at `expiredAt`, ms) before it was renewed. */
export function lostByExpiry(leaseId: string, expiredAt: number): DomainError {
  const at = new Date(expiredAt).toISOString();
  return new DomainError("LeaseLost", `lease ${leaseId} expired at ${at}`, { leaseId, reason: "expired" });
}

/** Refuses an unfenced write to a key that an active lease covers. */
export function judgeUnfenced(covering: LeaseRecord | null): void {
  if (covering) {
    throw new DomainError(
      "FencingTokenRequired",
      "an active lease covers this key; writes to it must carry that lease's fencing token",
      { leaseId: covering.leaseId },
    );
  }
}

/**
 * The check of LeaseStore.beginCommit, for stores that can read synchronously inside their own
 * atomic operation: a fenced write's lease is current and covers the object; no active lease
 * covers an unfenced write's object.
 */
export function judgeIntent(intent: IntentInput, now: number, reads: LeaseReads): void {
  if (intent.kind === "unfenced") {
    judgeUnfenced(reads.findActiveCovering(intent.bucket, intent.key));
    return;
  }
  const lease = reads.get(intent.leaseId);
  if (lease && !covers(lease, intent.bucket, intent.key)) {
    throw new DomainError("FencingTokenScopeMismatch", "the lease does not cover this object", {
      token: intent.token,
      leaseId: intent.leaseId,
    });
  }
  const claims: LeaseClaims = lease
    ? { ...resourceOf(lease), leaseId: intent.leaseId, token: intent.token }
    : { bucket: intent.bucket, key: intent.key, leaseId: intent.leaseId, token: intent.token };
  judgeLease(claims, lease, now, (l) => reads.findNewerOverlapping(l));
}

/**
 * A new lease id: 32 hex digits. Never starting with "-", so that command lines (and anything
 * else that parses options) cannot mistake it for a flag. The first 12 are the millisecond time
 * it was made, the other 20 random (80 bits: not guessable): ids made close in time sort close
 * together, so each index on them (the lease table's, the audit log's) takes a batch of new
 * grants on its last page or two instead of on one page each, scattered over the whole index.
 */
export function newLeaseId(): string {
  return Date.now().toString(16).padStart(12, "0") + randomHex(10);
}

/** The refusal for a lease id a store does not know (never issued, forgotten, or released). */
export function leaseNotFound(leaseId: string): DomainError {
  return new DomainError(
    "LeaseNotFound",
    `lease ${leaseId} not found (unknown, forgotten, or already released)`,
    {
      leaseId,
    },
  );
}
