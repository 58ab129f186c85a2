import { DomainError } from "../core/errors.js";
import type { BucketMarker, BucketPort, ObjectRef } from "./commit-port.js";

/** The objects of a bucket that have a commit in flight (the lease store's commit intents). */
export type InFlightWrites = (bucket: string) => Promise<ObjectRef[]>;

/** No commit in flight anywhere: for tests and single-process tools without a lease store. */
export const noWritesInFlight: InFlightWrites = async () => [];

/**
 * How long a gateway may trust a read of a bucket's state that found it live, from when that read
 * was sent, instead of reading it again before each write (CasPort.checkBucket): a deletion waits
 * longer than this after marking the bucket (step 1 below) before it looks for commits in flight,
 * so every write that still trusted an older read recorded its commit intent before that look.
 * This assumes the gateways' clocks run at about the same rate (not that they agree), as leases do.
 */
const BUCKET_STATE_TRUST_MS = 1_000;
/**
 * The buckets this process found live, each trusted as such for BUCKET_STATE_TRUST_MS from when
 * the read that found it was sent (performance.now()); one per backend.
 */
export class BucketTrust {
  private readonly liveUntil = new Map<string, number>();

  /** A read sent at `sent` found the bucket live. */
  trust(bucket: string, sent: number): void {
    this.liveUntil.set(bucket, sent + BUCKET_STATE_TRUST_MS);
  }

  /** Whether a read sent less than BUCKET_STATE_TRUST_MS ago found the bucket live. */
  trusted(bucket: string): boolean {
    const until = this.liveUntil.get(bucket);
    if (until === undefined) return false;
    if (performance.now() < until) return true;
    this.liveUntil.delete(bucket);
    return false;
  }

  /** Forgets that the bucket was found live (a read found it otherwise, or this process changed it). */
  distrust(bucket: string): void {
    this.liveUntil.delete(bucket);
  }
}

/** What a deletion waits after marking its bucket: the trust above, and a margin for clock rates. */
const BUCKET_MARK_WAIT_MS = Math.ceil(BUCKET_STATE_TRUST_MS * 1.5) + 50;

/** A deletion not finished after this long was abandoned (its gateway died): it may be taken back. */
export const ABANDONED_DELETION_MS = 30_000;

/**
 * DeleteBucket on a compare-and-swap backend, atomic with respect to every commit: a write racing
 * it is either refused or keeps its bucket (the deletion then answers BucketNotEmpty), and
 * nothing is ever deleted from the store: the bucket is marked, so that its HCTs outlive it.
 *
 * 1. The marker goes from live to deleting (compare-and-swap). From then on a write that reads
 *    the marker is refused (OperationAborted); reads go on.
 * 2. After BUCKET_MARK_WAIT_MS, every object with a commit in flight is touched (the same state
 *    under a new write id). A write that saw the marker still live (or trusted a read that did,
 *    sent less than BUCKET_STATE_TRUST_MS before) got its object's state before step 1 or before
 *    the wait ended (CasPort.checkBucket), hence before the touch, so its conditional write
 *    fails, and when it reads again it sees the marker (the trust is over by then). Commits in flight are exactly those with a commit intent in the lease store: every
 *    write to such a backend records one before its first read.
 * 3. Empty now (no live object): the marker goes from deleting to deleted, and the deletion is
 *    done. Not empty (a write landed before step 2): the marker goes back to live, BucketNotEmpty.
 * A deletion whose gateway dies between the steps leaves "deleting"; after ABANDONED_DELETION_MS a
 * write or another deletion takes it back, and if the first deletion was only paused, its last
 * compare-and-swap fails and it answers OperationAborted, having changed nothing.
 */
export async function deleteBucketSafely(
  port: BucketPort,
  bucket: string,
  inFlight: InFlightWrites,
  now: () => number = Date.now,
): Promise<void> {
  let marker = await port.bucketState(bucket);
  if (marker.phase === "deleted") throw noSuchBucket(bucket);
  if (marker.phase === "deleting" && now() - marker.since < ABANDONED_DELETION_MS) throw inProgress(bucket);
  // The common refusal, before anything is marked.
  if (!(await port.isEmpty(bucket))) throw notEmpty(bucket);
  const deleting = await port.setBucketState(bucket, marker, "deleting");
  if (!deleting) throw inProgress(bucket);
  marker = deleting;
  try {
    await new Promise((resolve) => setTimeout(resolve, BUCKET_MARK_WAIT_MS));
    const refs = new Map((await inFlight(bucket)).map((r) => [r.key, r]));
    for (const ref of refs.values()) await port.touch(ref);
    if (!(await port.isEmpty(bucket))) throw notEmpty(bucket);
  } catch (e) {
    await takeBack(port, bucket, marker);
    throw e;
  }
  if (!(await port.setBucketState(bucket, marker, "deleted"))) {
    throw new DomainError(
      "OperationAborted",
      "the bucket deletion was taken back by another request while it ran; nothing was deleted, please retry",
      { bucket },
    );
  }
  await port.removeUploads(bucket).catch(() => undefined);
}

async function takeBack(port: BucketPort, bucket: string, marker: BucketMarker): Promise<void> {
  // Best effort: a marker left in "deleting" is taken back by the next write after a while.
  await port.setBucketState(bucket, marker, "live").catch(() => undefined);
}

const noSuchBucket = (bucket: string) =>
  new DomainError("NoSuchBucket", "the specified bucket does not exist", { bucket });

const notEmpty = (bucket: string) =>
  new DomainError("BucketNotEmpty", "the bucket you tried to delete is not empty", { bucket });

export const inProgress = (bucket: string) =>
  new DomainError(
    "OperationAborted",
    "A conflicting conditional operation is currently in progress against this resource: the bucket is being deleted. Please try again.",
    { bucket },
  );
