import type { TxDomain } from "../core/tx.js";

/**
 * The port a storage backend implements so that the commit driver (commit-driver.ts) can run
 * every write against it. The backend keeps bytes and state; the driver owns the protocol: the
 * HCT rule, the write conditions, the lease check (in the step, or through a commit intent), the
 * compare-and-swap loop, what a lost or late answer means, and the cleanup of a refused write.
 *
 * Two kinds of backend:
 * - a **step** backend (the embedded fs backend) can run code inside one atomic step of its
 *   domain: the driver reads, decides and changes in that one step (StepPort);
 * - a **compare-and-swap** backend (S3, Azure) can only read an object's state and replace it
 *   conditionally: the driver reads, decides, and swaps only if the state is still the one read
 *   (CasPort). Every state it stores keeps the ids of the last WRITE_HISTORY writes that made
 *   it, so that a write whose answer was lost can be recognised later.
 *
 * Staging (the bytes of a new version, written where no reader sees them) is the backend's own
 * business before the driver runs; the driver hands the staged version back in the change, and
 * asks the backend to discard it when the write does not land.
 */

/** An object as the fencing rules see it: a key of a gateway bucket. */
export type ObjectRef = { bucket: string; key: string };

/** How many write ids a stored state keeps: its own and those of the states before it. */
export const WRITE_HISTORY = 32;

/** An object's fencing state, as one read of the store found it. */
export type FenceState = {
  /** The highest committed token (live or deleted); null when no fenced write reached it. */
  hct: number | null;
  /** The ETag S3 clients see for the live object; null when there is no live object. */
  etag: string | null;
  /** A tombstone is stored: the object is deleted and its HCT kept. */
  deleted: boolean;
  /** Something is stored for the key (a live object, a tombstone, an HCT, a foreign object). */
  stored: boolean;
  /**
   * The ids of the writes that made this state and the states before it, oldest first, at most
   * WRITE_HISTORY; empty for a state no fencegate write made (or one written before ids were kept).
   */
  writes: readonly string[];
  /**
   * The note of the last write that changed the object's bytes or deleted it (FencedCommit.note),
   * kept by HCT raises and touches: who wrote it, for the grant that fences the object.
   */
  note?: string;
};

/** A state read from a compare-and-swap backend, with what a conditional write must name. */
export type Observed = FenceState & {
  /**
   * The compare-and-swap token of this state: different after every write, never seen again
   * once replaced (a record's ETag with a fresh nonce, an Azure ETag); null when nothing is
   * stored at the key (the swap then creates it only if it is still absent).
   */
  version: string | null;
  /** The backend's own view of the state, for the swap that names it (opaque to the driver). */
  raw?: unknown;
  /**
   * The state as this process last saw it (read or written), not read from the store just now:
   * it may be stale. A swap that names it fails if it is (and the driver reads again), and the
   * driver never refuses a write on it: a refusal is decided again on a fresh read.
   */
  cached?: boolean;
  /**
   * A foreign (plain) object at the key was not looked up: `etag` and `stored` may leave it out.
   * Write conditions and deletes are never decided on such a state (the driver reads again).
   */
  etagUnknown?: boolean;
  /**
   * A write of a fenced transaction staged over this state (Percolator-style): it becomes the
   * live state only once the transaction's record says committed. Compare-and-swap backends only.
   */
  pending?: Pending<unknown>;
};

/**
 * A transaction's write staged in an object's state, beside the live bytes and HCT it leaves as
 * they are: the change it makes once its transaction commits (src/transactions/).
 */
export type Pending<S> = {
  /** The transaction's id (its record: TransactionLog). */
  tx: string;
  /** The transaction's lease token: the HCT the change sets once rolled forward. */
  token: number;
  change: { kind: "put"; version: S } | { kind: "delete" };
  /** The staging write's id; the transaction's record lists it with the key once the key joined. */
  writeId: string;
  /** The write's note (FencedCommit.note). */
  note?: string;
};

/** What a write makes of the object. `S` is the backend's staged version. */
export type Change<S> =
  /** A new live version (PutObject, CopyObject, CompleteMultipartUpload). */
  | { kind: "put"; version: S }
  /** A tombstone: the object is gone, the HCT stays. */
  | { kind: "delete" }
  /** Bytes and metadata as they are; only the HCT (a raise) or the write id (a touch) change. */
  | { kind: "keep" };

export type NextState<S> = Change<S> & {
  /** The HCT the new state carries. */
  hct: number | null;
  /** The id of this write, kept in the new state's history. */
  writeId: string;
  /** A put's or a delete's note (FencedCommit.note); a keep carries the state's own. */
  note?: string;
};

/**
 * What a conditional write makes of a compare-and-swap backend's object: a change as above (a
 * keep keeps a pending write; a put or a delete replaces an own transaction's... never another's:
 * the driver resolves that first), or a transaction's own changes.
 */
export type CasNext<S> =
  | NextState<S>
  | (TxChange<S> & { hct: number | null; writeId: string; note?: string });

export type TxChange<S> =
  /** Live bytes and HCT as they are; a transaction's write is staged over them (Observed.pending). */
  | { kind: "stage"; pending: Pending<S> }
  /**
   * The state's pending write resolved: `forward` (its transaction committed) makes it the live
   * state, HCT := max(HCT, its token); otherwise it is dropped.
   */
  | { kind: "settle"; forward: boolean };

/** How a conditional write ended. */
export type SwapAnswer =
  /** It landed. `lastModified`: the store's time of the new state, when it says. */
  | { outcome: "swapped"; lastModified?: Date }
  /** The store refused it: the state was no longer the one named. Nothing changed. */
  | { outcome: "lost" }
  /** It was sent and no answer came (lost, late, cut off, a 5xx): it may have landed. */
  | { outcome: "unknown"; error: unknown };

export type ReadOptions = {
  attempt: number;
  /**
   * Whether the live object's ETag (and whether anything is stored) must be known even where
   * that costs another request (a foreign object at a key without fencegate state): for write
   * conditions and deletes. Otherwise `etag` and `stored` may leave such an object out.
   */
  etag: boolean;
  /**
   * The backend may answer from the state this process last saw of the object (Observed.cached)
   * instead of reading it: only for a commit's first basis.
   */
  cached?: boolean;
  signal?: AbortSignal;
};

/**
 * A state read before the commit began (the fencing core's early look, before the body), which
 * the driver may take as its first compare-and-swap basis: one read fewer.
 */
export type EarlyState = { ref: ObjectRef; observed: Observed };

export type SwapOptions = { attempt: number; op: string };

/** A backend that can only read and conditionally replace an object's state (S3, Azure). */
export interface CasPort<S> {
  readonly kind: "cas";
  /** The object's state, whatever the bucket's state. NoSuchBucket when the store has no such bucket. */
  read(ref: ObjectRef, opts: ReadOptions): Promise<Observed>;
  /**
   * NoSuchBucket when the bucket is deleted, OperationAborted while it is being deleted. A write
   * calls it after each read of the object's state and before its conditional write: a bucket
   * deletion marks the bucket, then changes the state of every object with a commit in flight,
   * so a write that saw the bucket unmarked read its object before that change, and its swap
   * fails (src/fence/bucket-deletion.ts). It may answer from a read that found the bucket live,
   * sent less than BUCKET_STATE_TRUST_MS ago (a deletion waits longer than that after marking),
   * never from anything older, nor from a read that found it deleted or being deleted.
   */
  checkBucket(bucket: string, signal?: AbortSignal): Promise<void>;
  /**
   * Replaces the state `from` with `next`, only if the stored state is still `from` (its
   * version; absent when `from.version` is null). The new state keeps `next.writeId` after
   * `from.writes` (the last WRITE_HISTORY). Sent once: never retried inside, so that "lost" is
   * true of this very request. Throws a DomainError only when the store certainly did nothing.
   */
  swap(ref: ObjectRef, from: Observed, next: CasNext<S>, opts: SwapOptions): Promise<SwapAnswer>;
  /**
   * Throws (a DomainError) when a staged version can no longer be committed over `state`: its
   * bytes were discarded by a concurrent commit, or they are older than the garbage collector's
   * mark on the object. Called after the HCT rule and the conditions passed.
   */
  usable?(version: S, state: Observed): void | Promise<void>;
  /** Removes a staged version that will never be committed (best effort). */
  discard(ref: ObjectRef, version: S): Promise<void>;
  /** After `next` landed over `from`: frees what only `from` used (best effort). */
  replaced?(ref: ObjectRef, from: Observed, next: CasNext<S>): Promise<void>;
  /**
   * Where the records of the bucket's fenced transactions are (the commit point of each): how a
   * write that finds another transaction's pending write resolves it. Absent: no transactions.
   */
  transactions?(bucket: string): TransactionLog;
}

/** A fenced transaction's state in its record. committed and aborted are final. */
export type TxState = "open" | "committed" | "aborted";

/** A key of a transaction, as its record lists it: the staging write that put it there. */
export type TxEntry = { key: string; writeId: string } & ({ etag: string } | { deleted: true });

/**
 * A transaction's record: the single commit point of a transaction on a compare-and-swap
 * backend. Created once (absent → open); every later change replaces it conditionally on the
 * version read. Its `nonce` makes each version's compare-and-swap token unique.
 */
export type TxRecord = {
  v: 1;
  id: string;
  leaseId: string;
  token: number;
  /** The gateway bucket. */
  bucket: string;
  state: TxState;
  /** The keys staged (gateway keys), each with the write whose pending it names. */
  keys: TxEntry[];
  reason?: string;
  /** The id of the write that committed it: a commit whose answer was lost learns it here. */
  commitId?: string;
  /** The lease's expiry when the transaction was opened (ms since the epoch). */
  expiresAt: number;
  created: number;
  nonce: string;
};

export type TxRead = { record: TxRecord; version: string };

/** The records of one bucket's transactions, in the store (the backend's own system area). */
export interface TransactionLog {
  /** Creates the record (absent only); false when one exists. Throws when the outcome is unknown. */
  create(record: TxRecord): Promise<boolean>;
  read(id: string): Promise<TxRead | null>;
  /** Replaces `from` with `next` only if it is still `from` (sent once, like CasPort.swap). */
  swap(from: TxRead, next: TxRecord): Promise<SwapAnswer>;
  /**
   * Resolves the key's pending write as its transaction's record says (roll forward or drop);
   * an open transaction's stays. `key` is the record's (gateway) key.
   */
  settle(key: string): Promise<void>;
  /**
   * NoSuchBucket when the bucket is deleted, OperationAborted while it is being deleted: a commit
   * asks after its commit intents and before its commit point, as a write after its read
   * (CasPort.checkBucket). A deletion touches the keys of commits with intents, which aborts their
   * open transactions; a commit whose intents came later sees the deletion here.
   */
  checkBucket(): Promise<void>;
}

/** What a step backend's atomic step did. */
export type StepResult = {
  /** The state the step found. */
  state: FenceState;
  /** Whether it changed anything. */
  wrote: boolean;
  /** Frees what the replaced state used, after the step (best effort). */
  cleanup?: () => Promise<void>;
};

/** A backend that runs code inside one atomic step of its domain (embedded fs). */
export interface StepPort<S> {
  readonly kind: "step";
  readonly domain: TxDomain;
  /**
   * Synchronously, inside one step of `domain` (the driver calls it within domain.run): reads
   * the object's state (NoSuchBucket when the bucket is missing and `write` is true), lets
   * `decide` judge it (it throws refusals), and applies the change it returns (null: nothing).
   */
  step(ref: ObjectRef, write: boolean, decide: (state: FenceState) => NextState<S> | null): StepResult;
  /** Removes a staged version that will never be committed (best effort). */
  discard(ref: ObjectRef, version: S): Promise<void>;
}

export type CommitPort<S> = CasPort<S> | StepPort<S>;

/**
 * Bucket deletion on a compare-and-swap backend: a bucket's state is one conditionally replaced
 * marker, and writes read it after the object's state (CasPort.checkBucket).
 */
export interface BucketPort {
  /** The bucket's state and the version of its marker. NoSuchBucket when the store has no such bucket. */
  bucketState(bucket: string): Promise<BucketMarker>;
  /**
   * Replaces the marker `from` with a marker of `phase`, only if it is still `from`. Null when it
   * was not (another deletion, or a write that took an abandoned deletion back).
   */
  setBucketState(bucket: string, from: BucketMarker, phase: BucketPhase): Promise<BucketMarker | null>;
  /** The same state again under a new write id (a touch: see CommitSpec in commit-driver.ts). */
  touch(ref: ObjectRef): Promise<void>;
  /** Whether the bucket holds no live object (tombstones and fencegate's own objects aside). */
  isEmpty(bucket: string): Promise<boolean>;
  /** Removes the bucket's multipart uploads (once it is deleted). */
  removeUploads(bucket: string): Promise<void>;
}

/** live: a bucket; deleting: writes are refused while a deletion runs; deleted: gone. */
export type BucketPhase = "live" | "deleting" | "deleted";

export type BucketMarker = {
  phase: BucketPhase;
  /** When the phase was set (ms since the epoch, the writer's clock); 0 when unknown. */
  since: number;
  /** The marker's compare-and-swap token; null when there is no marker (a live bucket). */
  version: string | null;
};
