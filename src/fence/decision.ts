import { DomainError } from "../core/errors.js";
import { covers, leaseState } from "../leases/lease-rules.js";
import type { LeaseRecord, LeaseStore } from "../leases/lease-store.js";
import { type Keyring, type TokenClaims, verifyFencingToken } from "./tokens.js";

/**
 * The write decision, before the backend's atomic commit: signature, then scope, then
 * "is the lease still current". The final HCT comparison happens inside the backend's
 * commit (it must be atomic with the write), not here.
 */

export type FencingPolicy = "required" | "optional";

export type WriteTarget = { bucket: string; key: string };

export type FenceLookups = Pick<LeaseStore, "get" | "findNewerOverlapping" | "findActiveCovering">;

export type AuthorizedWrite =
  | { fenced: true; claims: TokenClaims; lease: LeaseRecord }
  | { fenced: false; coveringLease: null };

/**
 * The lease a multipart upload was bound to at CreateMultipartUpload. Its parts and its
 * completion may omit the token (tools that can only set metadata send it on Create alone);
 * they are then fenced with the bound lease, checked like a presented token.
 */
export type BoundLease = { leaseId: string; token: number };

export type AuthorizeInput = {
  target: WriteTarget;
  tokenString: string | null;
  bound?: BoundLease | null;
  policy: FencingPolicy;
  keyring: Keyring;
  leases: FenceLookups;
  now: number;
};

export async function authorizeWrite(input: AuthorizeInput): Promise<AuthorizedWrite> {
  const { target, tokenString, policy, keyring, leases, now } = input;

  if (tokenString === null && input.bound) return authorizeBound(input.bound, target, leases, now);

  if (tokenString === null) {
    if (policy === "required") {
      throw new DomainError("FencingTokenRequired", "this bucket requires a fencing token on every write");
    }
    const covering = await leases.findActiveCovering(target.bucket, target.key);
    if (covering) {
      throw new DomainError(
        "FencingTokenRequired",
        "an active lease covers this key; writes to it must carry that lease's fencing token",
        { leaseId: covering.leaseId },
      );
    }
    return { fenced: false, coveringLease: null };
  }

  const verified = verifyFencingToken(tokenString, keyring);
  if (!verified.ok) throw new DomainError("InvalidFencingToken", `invalid fencing token: ${verified.reason}`);
  const { claims } = verified;

  if (!claimsCover(claims, target)) {
    throw new DomainError(
      "FencingTokenScopeMismatch",
      `the fencing token's lease covers ${describeScope(claims)}, not ${target.bucket}/${target.key}`,
      { token: claims.token, leaseId: claims.leaseId },
    );
  }

  const lease = await leases.get(claims.leaseId);
  await assertLeaseCurrent({ claims, lease, leases, now });
  return { fenced: true, claims, lease: lease! };
}

async function authorizeBound(
  bound: BoundLease,
  target: WriteTarget,
  leases: FenceLookups,
  now: number,
): Promise<AuthorizedWrite> {
  const lease = await leases.get(bound.leaseId);
  const claims: TokenClaims = {
    leaseId: bound.leaseId,
    token: bound.token,
    bucket: lease?.bucket ?? target.bucket,
    ...(lease?.prefix !== undefined ? { prefix: lease.prefix } : { key: lease?.key ?? target.key }),
  };
  if (lease && !claimsCover(claims, target)) {
    throw new DomainError("FencingTokenScopeMismatch", "the upload's lease does not cover this key", {
      token: bound.token,
      leaseId: bound.leaseId,
    });
  }
  await assertLeaseCurrent({ claims, lease, leases, now });
  return { fenced: true, claims, lease: lease! };
}

/**
 * Refuses the write unless the token's lease is active at `now`. Called once before the
 * body is read and again just before the commit (contract rule 4).
 */
export async function assertLeaseCurrent(input: {
  claims: TokenClaims;
  lease: LeaseRecord | null;
  leases: Pick<LeaseStore, "findNewerOverlapping">;
  now: number;
}): Promise<void> {
  const { claims, lease, leases, now } = input;
  const details = { token: claims.token, leaseId: claims.leaseId };
  if (!lease) {
    throw new DomainError(
      "LeaseExpired",
      "the fencing token's lease has ended and is no longer known",
      details,
    );
  }
  if (lease.token !== claims.token || lease.bucket !== claims.bucket) {
    // A validly signed token that disagrees with its lease: a key was reused or the store was replaced.
    throw new DomainError("InvalidFencingToken", "the fencing token does not match its lease", details);
  }
  const state = leaseState(lease, now);
  if (state === "active") return;
  const newer = await leases.findNewerOverlapping(lease);
  if (newer) {
    throw new DomainError(
      "StaleFencingToken",
      `the lease was superseded by a newer lease (token ${newer.token})`,
      details,
    );
  }
  throw new DomainError(
    "LeaseExpired",
    state === "released" ? "the lease was released" : "the lease expired (not renewed in time)",
    details,
  );
}

export function claimsCover(claims: TokenClaims, target: WriteTarget): boolean {
  const asLease = { bucket: claims.bucket, key: claims.key, prefix: claims.prefix } as LeaseRecord;
  return covers(asLease, target.bucket, target.key);
}

function describeScope(claims: TokenClaims): string {
  return claims.key !== undefined
    ? `${claims.bucket}/${claims.key}`
    : `every key under ${claims.bucket}/${claims.prefix}`;
}
