import { DomainError } from "../core/errors.js";
import { covers, judgeLease, judgeUnfenced, type LeaseClaims, leaseState } from "../leases/lease-rules.js";
import type { LeaseRecord, LeaseStore } from "../leases/lease-store.js";
import { type Keyring, type TokenClaims, verifyFencingToken } from "./tokens.js";

/**
 * The write decision before the body is read: signature, then scope, then "is the lease still
 * current". The lease is checked again atomically with the commit (src/fence/commit.ts), and
 * the HCT comparison happens inside the backend's atomic step.
 */

export type FencingPolicy = "required" | "optional";

type WriteTarget = { bucket: string; key: string };

export type FenceLookups = Pick<LeaseStore, "get" | "findNewerOverlapping" | "findActiveCovering">;

export type AuthorizedWrite = { fenced: true; claims: LeaseClaims; lease: LeaseRecord } | { fenced: false };

/**
 * The lease a multipart upload was bound to at CreateMultipartUpload. Its parts and its
 * completion may omit the token (tools that can only set metadata send it on Create alone);
 * they are then fenced with the bound lease, checked like a presented token.
 */
type BoundLease = { leaseId: string; token: number };

type AuthorizeInput = {
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
    judgeUnfenced(await leases.findActiveCovering(target.bucket, target.key));
    return { fenced: false };
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
  const claims: LeaseClaims = {
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

/** Refuses the write unless the claimed lease is current at `now` (contract rule 4; see judgeLease). */
export async function assertLeaseCurrent(input: {
  claims: LeaseClaims;
  lease: LeaseRecord | null;
  leases: Pick<LeaseStore, "findNewerOverlapping">;
  now: number;
}): Promise<void> {
  const { claims, lease, leases, now } = input;
  const newer =
    lease && leaseState(lease, now) !== "active" ? await leases.findNewerOverlapping(lease) : null;
  judgeLease(claims, lease, now, () => newer);
}

export function claimsCover(claims: TokenClaims | LeaseClaims, target: WriteTarget): boolean {
  return covers(claims, target.bucket, target.key);
}

function describeScope(claims: TokenClaims): string {
  return claims.key !== undefined
    ? `${claims.bucket}/${claims.key}`
    : `every key under ${claims.bucket}/${claims.prefix}`;
}
