import type { z } from "zod";
import { type Keyring, signFencingToken } from "../fence/tokens.js";
import type { LeaseInfo } from "../leases/lease-service.js";
import type * as wire from "./schemas.js";

/** A lease as the lease API sends it (and the client SDK and CLI receive it): its schema's type. */
type Lease = z.output<typeof wire.Lease>;

/**
 * The lease as the API shows it; with its fencing token (the signed string a write carries) only
 * when `showToken`: for the access key that acquired it, its delegates and administrators.
 */
export function leaseView(lease: LeaseInfo, keyring: Keyring, showToken = true): Lease {
  const { leaseId, bucket, key, prefix, token } = lease;
  return {
    leaseId,
    bucket,
    ...(key !== undefined ? { key } : { prefix: prefix ?? "" }),
    owner: lease.owner,
    token,
    ...(showToken
      ? { fencingToken: signFencingToken({ leaseId, token, bucket, key, prefix }, keyring.active) }
      : {}),
    ttlMs: lease.ttlMs,
    acquiredAt: new Date(lease.acquiredAt).toISOString(),
    expiresAt: new Date(lease.expiresAt).toISOString(),
    state: lease.state,
    ...(lease.waiters !== undefined ? { waiters: lease.waiters } : {}),
  };
}
