import type { AuditLog } from "../audit/audit-log.js";
import type { TxDomain } from "../core/tx.js";

/**
 * The contract every lease store (embedded, on a file or in memory; redis; redlock) fulfils.
 *
 * A lease covers either one key or every key under a prefix of one bucket. Leases on
 * overlapping resources are mutually exclusive. Every grant takes a new token from a counter
 * that strictly increases across the whole deployment and across restarts; renewal keeps the
 * token. Time comes from the injected clock.
 *
 * Two ways to make the write path's lease check atomic with a commit (src/fence/commit.ts):
 * - a store that shares a TxDomain with the backend exposes `inDomain`, synchronous reads that
 *   the fencing core runs inside the backend's atomic step;
 * - any store records commit intents: `beginCommit` checks the lease and records the intent in
 *   one atomic operation, and `tryAcquire` will not grant over an overlapping resource while an
 *   ended lease's intents are outstanding: it answers `fence` instead, and the caller raises the
 *   HCT of those objects in the backend, clears the intents and tries again.
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
  releasedAt?: number; // set once released by its holder (or broken by an administrator)
  /**
   * Set, with `releasedAt`, when an administrator broke the lease (LeaseStore.breakLease), so
   * that a refusal of its holder's later write or renewal says "broken by an administrator"
   * rather than "released". Absent on leases broken before it was kept.
   */
  brokenAt?: number;
  /**
   * Set once the store has seen the lease end (released, expiry reported, or superseded by a
   * grant after it expired). From then on the lease is ended whatever the clock says later: a
   * clock stepped back cannot make it active again.
   */
  endedAt?: number;
  /** The access key that acquired the lease (absent on leases granted before it was kept). */
  principal?: string;
};

export type AcquireInput = {
  resource: LeaseResource;
  ttlMs: number;
  owner: string;
  /** The access key asking; kept on the lease (who may see its token, renew and release it). */
  principal?: string;
};

/** An object a commit was about to change, recorded with the lease it committed under. */
export type CommitIntentRef = { intentId: string; bucket: string; key: string };

export type AcquireResult =
  | {
      granted: true;
      lease: LeaseRecord;
      /**
       * Overlapping leases that had expired unnoticed and that this grant saw end, in token order:
       * their LeaseExpired events come before the grant's own.
       */
      expired?: LeaseRecord[];
    }
  | { granted: false; heldBy: LeaseRecord }
  /**
   * No active lease is in the way, but commits of ended leases on the resource may still land:
   * raise each object's HCT to `token` (a fresh token, never granted to anyone), clear the
   * intents, then try again.
   */
  | { granted: false; fence: { token: number; intents: CommitIntentRef[] } };

/**
 * Who asked for a lease change (principal null: the gateway itself), recorded with the change's
 * accepted events. An expiry a change reports is nobody's doing and carries neither.
 */
export type LeaseEventContext = { principal: string | null; requestId: string | null };

/**
 * What records a store's accepted lease events (the audit log), given to the store when it is
 * built. The store records each event in its own atomic step when it can (the embedded store when
 * the log shares its domain: `appendInStep`; the Redis store, in its scripts, when the log is in
 * the same Redis: appendsInScript), otherwise with `append` right after the step. A record the
 * log cannot take in the step undoes the change; after the step, the call fails (503) with the
 * change made. Refused requests change nothing in the store and stay the caller's to record.
 */
export type LeaseEvents = Pick<AuditLog, "append" | "domain" | "appendInStep">;

/**
 * A delegate of a lease: a second access key (its id is `delegateId`) that may renew the lease
 * and write with its token, but neither release it nor delegate further. Its secret is never
 * stored: the gateway derives it from its token-signing key.
 */
export type DelegateRecord = {
  delegateId: string;
  leaseId: string;
  /** The access key that created it. */
  createdBy: string;
  createdAt: number; // ms since epoch
};

export type BreakResult = {
  lease: LeaseRecord;
  fence: { token: number; intents: CommitIntentRef[] };
};

/** What a commit is about to do, checked against the lease store. */
export type IntentInput =
  /** A fenced write: its lease must be current (not ended, not expired, not superseded). */
  | { kind: "fenced"; leaseId: string; token: number; bucket: string; key: string }
  /** An unfenced write (policy optional): no active lease may cover the key. */
  | { kind: "unfenced"; bucket: string; key: string };

export type CommitIntent = {
  intentId: string;
  /**
   * For an unfenced write: the last token taken from the counter (granted, or handed to a fence)
   * when the intent was recorded. Any lease granted later has a higher token, and fences the
   * object above it before it is granted; an object fenced earlier stays at or below it.
   */
  ceiling: number;
};

/** Synchronous reads for checks inside the store's domain (see the file comment). */
export type LeaseReads = {
  get(leaseId: string): LeaseRecord | null;
  findNewerOverlapping(lease: LeaseRecord): LeaseRecord | null;
  findActiveCovering(bucket: string, key: string): LeaseRecord | null;
};

export interface LeaseStore {
  readonly kind: string;
  /** The domain of the store's atomic steps, when co-located components can share it. */
  readonly domain?: TxDomain;
  /** Present exactly when `domain` is. */
  readonly inDomain?: LeaseReads;

  /**
   * One attempt, no waiting: grants when no active overlapping lease and no outstanding intent is
   * in the way. Overlapping leases that expired without being reported are reported in the same
   * step (marked ended, listed in `expired`, recorded before the grant), so that a clock stepped
   * back can never make them active beside the new lease, and their expiry is recorded first.
   * Every change method records its accepted events (LeaseEvents) with `by` as who asked.
   */
  tryAcquire(input: AcquireInput, by?: LeaseEventContext): Promise<AcquireResult>;

  /** The lease, active or not, as long as the store still remembers it. */
  get(leaseId: string): Promise<LeaseRecord | null>;

  /** Extends an active lease. Throws DomainError LeaseNotFound, or LeaseLost when expired/released/superseded. */
  renew(leaseId: string, ttlMs: number, by?: LeaseEventContext): Promise<LeaseRecord>;

  /**
   * Ends a lease. An active lease is released (`releasedAt` set, LeaseReleased recorded). An
   * expired lease whose expiry was not reported yet is not released: its expiry is reported
   * instead (`endedAt` set, `releasedAt` absent, LeaseExpired recorded). Throws DomainError
   * LeaseNotFound when unknown or already seen to end.
   */
  release(leaseId: string, by?: LeaseEventContext): Promise<LeaseRecord>;

  /**
   * Ends a lease on an administrator's word, whoever holds it, and hands back what the caller must
   * fence at once, in the same atomic step: a fresh token (never granted to anyone, above every
   * token the lease's holder could carry) and the commit intents recorded under the lease's
   * resource. An active lease is released; one that had expired unnoticed has its expiry reported
   * (LeaseExpired recorded before LeaseBroken). Throws LeaseNotFound when unknown or already seen
   * to end.
   */
  breakLease(leaseId: string, by?: LeaseEventContext): Promise<BreakResult>;

  /** Adds a delegate, kept while the lease is remembered; forgotten with it. */
  addDelegate(delegate: DelegateRecord): Promise<void>;
  /** The delegates of one lease, or of every lease still remembered; in creation order. */
  listDelegates(leaseId?: string): Promise<DelegateRecord[]>;
  /** Removes a delegate; false when the lease has no such delegate. */
  removeDelegate(leaseId: string, delegateId: string): Promise<boolean>;

  /** Active leases in a bucket (all buckets when omitted) whose resource starts with `prefix`. */
  list(filter: { bucket?: string; prefix?: string }): Promise<LeaseRecord[]>;

  /** The active lease that covers this key, if any. */
  findActiveCovering(bucket: string, key: string): Promise<LeaseRecord | null>;

  /** A lease granted after `lease` (higher token) on an overlapping resource, if any. */
  findNewerOverlapping(lease: LeaseRecord): Promise<LeaseRecord | null>;

  /**
   * Leases that have expired without being released and were not reported before; each is
   * reported once (by one replica), and its LeaseExpired event recorded.
   */
  collectExpired(): Promise<LeaseRecord[]>;

  /**
   * Checks the intent (a fenced write's lease is current and covers the object; no active lease
   * covers an unfenced write's key) and records it, in one atomic operation (judgeIntent in
   * lease-rules.ts). Throws DomainError LeaseExpired, StaleFencingToken, InvalidFencingToken,
   * FencingTokenScopeMismatch or FencingTokenRequired when the check fails; nothing is recorded then.
   */
  beginCommit(intent: IntentInput): Promise<CommitIntent>;

  /** Forgets an intent once its commit has landed or failed. Unknown ids are ignored. */
  endCommit(intentId: string): Promise<void>;

  /** Forgets intents whose objects were fenced (after an AcquireResult `fence`). */
  clearIntents(intentIds: readonly string[]): Promise<void>;

  /**
   * The commit intents on objects the resource covers: the commits in flight there (a bucket
   * deletion touches their objects, see src/fence/bucket-deletion.ts). Every intent recorded
   * before the call is listed, unless it has ended.
   */
  intentsUnder(resource: LeaseResource): Promise<CommitIntentRef[]>;

  /** Throws when the store cannot be reached (health checks). */
  ping(): Promise<void>;

  close(): Promise<void>;
}
