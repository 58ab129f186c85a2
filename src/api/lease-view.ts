import { type Keyring, signFencingToken } from "../fence/tokens.js";
import type { LeaseInfo } from "../leases/lease-service.js";

/** A lease as the lease API sends it (and the client SDK and CLI receive it). */
export type Lease = {
  leaseId: string;
  bucket: string;
  key?: string;
  prefix?: string;
  owner: string;
  token: number;
  /** The signed string a write carries; opaque to clients. */
  fencingToken: string;
  ttlMs: number;
  acquiredAt: string;
  expiresAt: string;
  state: "active" | "expired" | "released";
  /** In listings: how many acquire requests are queued for this lease's resource. */
  waiters?: number;
};

/**
 * A lease as another access key sees it: without its fencing token, which only the access key
 * that acquired the lease (its delegates, and administrators) are shown.
 */
export type LeaseWithoutToken = Omit<Lease, "fencingToken">;

export function leaseView(lease: LeaseInfo, keyring: Keyring): Lease;
export function leaseView(lease: LeaseInfo, keyring: Keyring, showToken: boolean): Lease | LeaseWithoutToken;
export function leaseView(lease: LeaseInfo, keyring: Keyring, showToken = true): Lease | LeaseWithoutToken {
  const view: Lease = {
    leaseId: lease.leaseId,
    bucket: lease.bucket,
    ...(lease.key !== undefined ? { key: lease.key } : { prefix: lease.prefix ?? "" }),
    owner: lease.owner,
    token: lease.token,
    fencingToken: signFencingToken(
      {
        leaseId: lease.leaseId,
        token: lease.token,
        bucket: lease.bucket,
        key: lease.key,
        prefix: lease.prefix,
      },
      keyring.active,
    ),
    ttlMs: lease.ttlMs,
    acquiredAt: new Date(lease.acquiredAt).toISOString(),
    expiresAt: new Date(lease.expiresAt).toISOString(),
    state: lease.state,
    ...(lease.waiters !== undefined ? { waiters: lease.waiters } : {}),
  };
  if (showToken) return view;
  const { fencingToken: _hidden, ...withoutToken } = view;
  return withoutToken;
}
