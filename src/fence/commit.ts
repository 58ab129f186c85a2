import { DomainError, StaleTokenError } from "../core/errors.js";
import { etagListMatches } from "../core/etag.js";
import type { EarlyState, ObjectRef, StepPort } from "./commit-port.js";

/**
 * The commit contract: what the fencing core hands a storage backend for every write that
 * changes state (PutObject, CopyObject, DeleteObject, CompleteMultipartUpload, and the two
 * multipart steps that change nothing visible: CreateMultipartUpload, UploadPart). The backend
 * stages the write's bytes and runs the commit through the one commit driver (commit-driver.ts)
 * over its port (commit-port.ts), which applies `fence` to the object's highest committed token
 * (HCT) with `applyFence`, checks `conditions` against the current object, calls `atomic` inside
 * a step backend's step, and only then makes the change. A refused commit changes nothing
 * (contract rule 5); a commit whose answer was lost is unknown, never refused.
 *
 *   body staged and verified → prepare() → [ one step, or one conditional write: HCT rule,
 *                                            conditions, atomic(), the change ]
 *
 * Rule 4 (the lease is still current) is checked atomically with the commit in one of two ways,
 * decided by the fencing core from the components' domains:
 * - same domain (the embedded default): `atomic` re-reads the lease inside the backend's step,
 *   so no grant or expiry can land between the check and the commit;
 * - different places (S3 or Azure next to any lease store): `prepare` registers a commit intent
 *   in the lease store in the same atomic operation that checks the lease. A grant on an
 *   overlapping resource first raises the HCT of every object with an intent of an ended lease
 *   (StorageBackend.raiseHighestToken), so a commit that paused after `prepare` finds the HCT
 *   above its token in its conditional step and is refused. An intent stays until its commit's
 *   outcome is known (fence/outcomes.ts).
 */

/**
 * A write's rule for the object's HCT.
 * - `{ token }`: a fenced write; it commits only if token >= HCT, and then HCT := token.
 * - `{ ceiling }`: an unfenced write (policy `optional`) committing through a commit intent; it
 *   commits only if HCT <= ceiling (the last token granted when its intent was registered), so a
 *   lease granted since, which raised the HCT, refuses it. The HCT stays as it is.
 * - null: an unfenced write with no HCT condition (its lease check, if any, runs in `atomic`).
 */
export type Fence = { token: number; ceiling?: undefined } | { ceiling: number; token?: undefined } | null;

/** Conditions a write puts on the current object (S3's If-Match / If-None-Match on writes). */
export type WriteConditions = {
  /** ETags (quoted or not, comma-separated, or `*`) one of which the current object must have. */
  ifMatch?: string;
  /** `*`: the object must not exist. */
  ifNoneMatch?: string;
};

/** What the atomic step found and will leave behind. */
export type CommitOutcome = {
  /** The object's HCT after the commit (null when no fenced write ever reached it). */
  highestToken: number | null;
};

export type FencedCommit = {
  fence: Fence;
  conditions: WriteConditions;
  /**
   * The last checks before the atomic step, called once the body is stored and verified and
   * before anything visible changes. May do I/O (the lease re-check and commit intent through a
   * lease store outside the backend's domain). Throws a DomainError to refuse.
   */
  prepare(): Promise<void>;
  /**
   * Called synchronously inside the backend's atomic step, after the HCT rule and the conditions
   * passed and before the change is made, by backends that have a domain (others never call it).
   * It re-checks the lease when the lease store shares the domain and appends the audit record
   * when the audit log does. Throws to refuse; the step then changes nothing.
   */
  atomic(outcome: CommitOutcome): void;
  /** Aborted when the client went away or the request timed out: stop, change nothing. */
  signal: AbortSignal;
  /**
   * The object's state as the fencing core read it before the body (the backend's writeState),
   * which a compare-and-swap backend may take as its first basis instead of reading again.
   */
  early?: EarlyState;
  /**
   * What a compare-and-swap backend keeps with the state this write makes (writeNote): enough for
   * a grant that fences the object later to record the write's outcome, once, in its place.
   */
  note?: string;
  /**
   * Called by a compare-and-swap backend before it sends a put, a delete or a transaction's
   * staging over a state whose
   * note (another write's) says who wrote it last: that write landed, and is recorded now if
   * nobody has yet, so that its record comes before this write's whatever became of its own
   * gateway. Throws to refuse (nothing was sent).
   */
  predecessor?(note: string): Promise<void>;
  /**
   * The write belongs to a fenced transaction (src/transactions/): the driver checks it like any
   * write (the HCT rule, the conditions, the lease, its audit record) in one step and hands the
   * staged change to the transaction instead of making it visible; the transaction's commit makes
   * all its changes visible in one step (runTransactionStep in commit-driver.ts).
   */
  transaction?: TransactionSink;
};

/** A write staged in a transaction: what its commit will apply, through which port. */
export type StagedWrite = {
  ref: ObjectRef;
  port: StepPort<unknown>;
  change: { op: "put"; version: unknown } | { op: "delete" };
  /** The write's own fencing: its token's HCT rule, its conditions and its note, checked again at commit. */
  commit: FencedCommit;
};

/** Where a transaction's writes go instead of being committed one by one. */
export interface TransactionSink {
  readonly transactionId: string;
  /**
   * Inside the staging write's step, after its checks: keeps the write for the commit (in place of
   * an earlier write of the same key), or throws (and the step changes nothing) when the
   * transaction can no longer take it. `kept()` once the step is durable (the replaced write's
   * bytes are removed); `undo()` when it is not (the transaction is as it was before).
   */
  stage(write: StagedWrite): { kept(): Promise<void>; undo(): void };
  /**
   * Whether a staged body of up to `bytes` may be held in memory until the transaction ends
   * (counted against the gateway's budget for all open transactions); false: the backend keeps
   * it in a file.
   */
  holdInMemory(bytes: number): boolean;
  /**
   * On a compare-and-swap backend, where the transaction lives in its record in the store (any
   * gateway may stage, commit or abort it): the staged write is kept in the object's own state
   * (Observed.pending) and the key joins the record.
   */
  cas?: CasTransactionSink;
}

export interface CasTransactionSink {
  /** Before staging: the record says open, and the write's lease is the transaction's (throws). */
  open(): Promise<void>;
  /**
   * After the write was staged in the object's state: the key joins the record with that write
   * (a conditional write of the record). Throws when the transaction is no longer open.
   */
  join(entry: { writeId: string } & ({ etag: string } | { deleted: true })): Promise<void>;
}

/**
 * The HCT rule of every backend, applied inside its atomic step to the object's current HCT
 * (live or deleted). Returns the HCT the commit leaves, or throws the refusal.
 */
export function applyFence(fence: Fence, current: number | null): number | null {
  if (fence === null) return current;
  if (fence.token !== undefined) {
    if (!(Number.isSafeInteger(fence.token) && fence.token >= 0)) {
      throw new DomainError("InvalidArgument", "a fencing token must be a non-negative integer");
    }
    if (current !== null && fence.token < current) throw new StaleTokenError(fence.token, current);
    return current === null ? fence.token : Math.max(current, fence.token);
  }
  if (current !== null && current > fence.ceiling) {
    throw new DomainError(
      "FencingTokenRequired",
      "a lease was granted on this key while the write was in flight; writes to it must carry that lease's fencing token",
      { highestToken: current },
    );
  }
  return current;
}

/** A commit with no fencing at all: for backend tests and for tools that bypass the gateway. */
export function unfencedCommit(overrides: Partial<FencedCommit> = {}): FencedCommit {
  return {
    fence: null,
    conditions: {},
    prepare: async () => {},
    atomic: () => {},
    signal: new AbortController().signal,
    ...overrides,
  };
}

/** A commit fenced with `token` and nothing else to check: for backend tests. */
export function fencedCommit(token: number | null, overrides: Partial<FencedCommit> = {}): FencedCommit {
  return unfencedCommit({ fence: token === null ? null : { token }, ...overrides });
}

/**
 * S3's write conditions against the current object's ETag (null: no live object). The backend
 * applies this inside its atomic step; the fencing core applies it early to refuse a doomed
 * write before its body is read.
 */
export function checkWriteConditions(conditions: WriteConditions, etag: string | null): void {
  if (conditions.ifMatch !== undefined && etag === null) {
    // S3 answers a write conditioned on an object that does not exist with 404, not 412.
    throw new DomainError("NoSuchKey", "The specified key does not exist.", { Condition: "If-Match" });
  }
  if (conditions.ifMatch !== undefined && !etagListMatches(conditions.ifMatch, etag)) {
    throw preconditionFailed("If-Match");
  }
  if (conditions.ifNoneMatch !== undefined && etagListMatches(conditions.ifNoneMatch, etag)) {
    throw preconditionFailed("If-None-Match");
  }
}

function preconditionFailed(condition: string): DomainError {
  return new DomainError(
    "PreconditionFailed",
    "At least one of the pre-conditions you specified did not hold",
    {
      Condition: condition,
    },
  );
}
