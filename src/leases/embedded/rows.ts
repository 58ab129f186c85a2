import type { ResourceRef } from "../lease-rules.js";
import type { LeaseRecord } from "../lease-store.js";

/** A lease_leases row as better-sqlite3 returns it. */
export type LeaseRow = {
  lease_id: string;
  bucket: string;
  key: string | null;
  prefix: string | null;
  owner: string;
  token: number;
  ttl_ms: number;
  acquired_at: number;
  expires_at: number;
  released_at: number | null;
  broken_at: number | null;
  expiry_reported: number;
  ended_at: number | null;
  principal: string | null;
};

export const LEASE_COLUMNS =
  "lease_id, bucket, key, prefix, owner, token, ttl_ms, acquired_at, expires_at, released_at, broken_at, expiry_reported, ended_at, principal";

export function toLeaseRecord(row: LeaseRow): LeaseRecord {
  const lease: LeaseRecord = {
    leaseId: row.lease_id,
    bucket: row.bucket,
    owner: row.owner,
    token: row.token,
    ttlMs: row.ttl_ms,
    acquiredAt: row.acquired_at,
    expiresAt: row.expires_at,
  };
  if (row.key !== null) lease.key = row.key;
  else lease.prefix = row.prefix ?? "";
  if (row.released_at !== null) lease.releasedAt = row.released_at;
  if (row.broken_at !== null) lease.brokenAt = row.broken_at;
  if (row.ended_at !== null) lease.endedAt = row.ended_at;
  if (row.principal !== null) lease.principal = row.principal;
  return lease;
}

/**
 * Active = not released, not reported expired, and not past its expiry. The reported flag
 * matters only if the clock steps back: a lease whose expiry was audited stays ended.
 */
export const isActiveRow = (row: LeaseRow, now: number): boolean =>
  row.released_at === null && row.expiry_reported === 0 && row.expires_at > now;

/** SQL form of isActiveRow, for `WHERE`; binds `@now`. */
export const ACTIVE_SQL = "released_at IS NULL AND expiry_reported = 0 AND expires_at > @now";

/** Expired but not yet seen to end (neither released nor reported); binds `@now`. */
export const LAPSED_SQL = "released_at IS NULL AND expiry_reported = 0 AND expires_at <= @now";

export function rowResource(row: LeaseRow): ResourceRef {
  return row.key !== null
    ? { bucket: row.bucket, key: row.key }
    : { bucket: row.bucket, prefix: row.prefix ?? "" };
}
