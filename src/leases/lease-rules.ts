/**
 * The lease rules every store applies: what a lease's resource overlaps, which keys it covers,
 * and what state it is in at a given instant. Pure functions of their arguments (time is passed
 * in), so that the embedded and Redis stores decide exactly alike.
 */
import type { LeaseRecord, LeaseResource } from "./lease-store.js";

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

/** Whether the lease's resource includes this object key. */
export function covers(lease: ResourceRef, bucket: string, key: string): boolean {
  if (lease.bucket !== bucket) return false;
  if (lease.key !== undefined) return lease.key === key;
  return key.startsWith(lease.prefix ?? "");
}

/** Release wins over expiry: a lease released after it expired reads as released. */
export function leaseState(lease: Pick<LeaseRecord, "expiresAt" | "releasedAt">, now: number): LeaseState {
  if (lease.releasedAt !== undefined) return "released";
  return lease.expiresAt <= now ? "expired" : "active";
}

export const isActive = (lease: Pick<LeaseRecord, "expiresAt" | "releasedAt">, now: number): boolean =>
  leaseState(lease, now) === "active";

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

/** Human-readable resource, for messages: `bucket/key` or `bucket/prefix*`. */
export function describeResource(lease: ResourceRef): string {
  return lease.key !== undefined ? `${lease.bucket}/${lease.key}` : `${lease.bucket}/${lease.prefix ?? ""}*`;
}
