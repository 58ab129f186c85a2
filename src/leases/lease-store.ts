/**
 * The contract every lease store (embedded, redis, redlock) fulfils.
 *
 * A lease covers either one key or every key under a prefix of one bucket. Leases on
 * overlapping resources are mutually exclusive. Every grant takes a new token from a
 * counter that strictly increases across the whole deployment and across restarts;
 * renewal keeps the token. Time comes from the injected clock.
 */

export type LeaseResource =
  | { bucket: string; key: string; prefix?: undefined }
  | { bucket: string; prefix: string; key?: undefined };

export type LeaseRecord = {
  leaseId: string;
  bucket: string;
  key?: string;
  prefix?: string;
  owner: string;
  token: number;
  ttlMs: number;
  acquiredAt: number; // ms since epoch
  expiresAt: number; // ms since epoch
  releasedAt?: number; // set once released by its holder
};

export type AcquireInput = {
  resource: LeaseResource;
  ttlMs: number;
  owner: string;
};

export type AcquireResult = { granted: true; lease: LeaseRecord } | { granted: false; heldBy: LeaseRecord };

/**
 * Called synchronously inside the store's atomic step for a lease event (grant, renewal,
 * release, expiry report), before it is made durable; throwing aborts the step. A store kept in
 * the embedded database calls it, so that the audit record commits with the event. Stores that
 * cannot run code atomically with their updates do not; the caller then records afterwards.
 */
export type LeaseEventHook = (lease: LeaseRecord) => void;

export interface LeaseStore {
  readonly kind: string;

  /** One attempt, no waiting: grants when no active overlapping lease exists. */
  tryAcquire(input: AcquireInput, inCommit?: LeaseEventHook): Promise<AcquireResult>;

  /** The lease, active or not, as long as the store still remembers it. */
  get(leaseId: string): Promise<LeaseRecord | null>;

  /** Extends an active lease. Throws DomainError LeaseNotFound, or LeaseLost when expired/released/superseded. */
  renew(leaseId: string, ttlMs: number, inCommit?: LeaseEventHook): Promise<LeaseRecord>;

  /** Ends a lease. Throws DomainError LeaseNotFound when unknown or already ended. */
  release(leaseId: string, inCommit?: LeaseEventHook): Promise<LeaseRecord>;

  /** Active leases in a bucket (all buckets when omitted) whose resource starts with `prefix`. */
  list(filter: { bucket?: string; prefix?: string }): Promise<LeaseRecord[]>;

  /** The active lease that covers this key, if any. */
  findActiveCovering(bucket: string, key: string): Promise<LeaseRecord | null>;

  /** A lease granted after `lease` (higher token) on an overlapping resource, if any. */
  findNewerOverlapping(lease: LeaseRecord): Promise<LeaseRecord | null>;

  /**
   * Leases that have expired without being released and were not reported before; each is
   * reported once (by one replica), so that a LeaseExpired event can be audited.
   */
  collectExpired(inCommit?: LeaseEventHook): Promise<LeaseRecord[]>;

  /** Throws when the store cannot be reached (health checks). */
  ping(): Promise<void>;

  close(): Promise<void>;
}
