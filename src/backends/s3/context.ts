import type { Clock } from "../../core/clock.js";
import { DomainError } from "../../core/errors.js";
import type { Logger } from "../../core/log.js";
import { BucketTrust } from "../../fence/bucket-deletion.js";
import { transactionOutcome } from "../../fence/commit-driver.js";
import type { TransactionLog } from "../../fence/commit-port.js";
import { noSuchBucket } from "../backend-errors.js";
import { parseMarker } from "./bucket-marker.js";
import type { CapabilityGate } from "./capability.js";
import type { Layout } from "./layout.js";
import type { S3CommitHooks } from "./options.js";
import type { RecordStore } from "./record-store.js";
import { newNonce, type ObjectRecord, type ReadRecord, rolledForward, withoutPending } from "./records.js";
import type { Store, StoredObject } from "./store.js";
import { S3TransactionRecords } from "./transaction-log.js";

/**
 * How long replaced blobs wait to be removed together (a bucket written to all the time costs
 * one DeleteObjects a second), and at most how many go in one request.
 */
const RETIRE_DELAY_MS = 1_000;
const RETIRE_BATCH = 1000;

/** What a commit found: the record, and the plain object at the key when it was looked up. */
type Current = {
  read: ReadRecord | null;
  record: ObjectRecord | null;
  /** Looked up only when the record is absent or "plain", and the commit asked for it. */
  plain: StoredObject | null;
  /** The live object's ETag: the record's version, else the plain object's (when looked up). */
  liveEtag: string | null;
};

/** Everything the backend and its multipart store share. */
export class S3Context {
  closed = false;
  /** Buckets a marker read found live, until when (performance.now()) that may be trusted. */
  private readonly liveBuckets = new BucketTrust();
  /** Replaced blobs waiting to be removed, by bucket (removeReplaced). */
  private retired = new Map<string, Set<string>>();
  private retireTimer: NodeJS.Timeout | undefined;
  /** The removal of replaced blobs under way (a timer's, a full batch's, or a caller's). */
  private flushing: Promise<void> = Promise.resolve();
  /** The records of fenced transactions (`<m>t/<id>`). */
  readonly txRecords: S3TransactionRecords;
  /**
   * Resolves a key's pending write in the store (the port's settle): a reader that found one
   * committed asks for it, off its own path (best effort).
   */
  settleLater: ((bucket: string, key: string) => void) | undefined;

  constructor(
    readonly store: Store,
    readonly layout: Layout,
    readonly records: RecordStore,
    readonly gate: CapabilityGate,
    readonly clock: Clock,
    readonly hooks: S3CommitHooks | undefined,
    readonly log: Logger | undefined,
  ) {
    this.txRecords = new S3TransactionRecords(store, layout);
  }

  /** The transaction log of a store bucket; `settle` resolves a key's pending write. */
  transactionLog(
    bucket: string,
    settle: (key: string) => Promise<void>,
    checkBucket: () => Promise<void>,
  ): TransactionLog {
    return this.txRecords.log(bucket, settle, checkBucket);
  }

  /**
   * The record as a reader sees it: a pending transaction write is the live state once its
   * transaction's record says committed (and lists it), and invisible otherwise. A committed one
   * is rolled forward in the store in the background.
   */
  async visible(bucket: string, record: ObjectRecord | null): Promise<ObjectRecord | null> {
    const p = record?.p;
    if (!record || !p) return record;
    const log = this.txRecords.log(
      bucket,
      async () => undefined,
      async () => undefined,
    );
    const state = await transactionOutcome(log, {
      tx: p.tx,
      token: p.token,
      change: { kind: "delete" },
      writeId: p.w,
    });
    if (state !== "committed") return withoutPending(record);
    this.settleLater?.(bucket, record.key);
    return rolledForward(record);
  }

  assertOpen(): void {
    if (this.closed) throw new DomainError("ServiceUnavailable", "the s3 backend is closed");
  }

  /**
   * Whether the bucket is deleted for fencegate but kept for its HCTs (a bucket being deleted is
   * not yet: it is read as usual). NoSuchBucket when the store has no such bucket.
   */
  async softDeleted(bucket: string, signal?: AbortSignal): Promise<boolean> {
    if (this.trustedLive(bucket)) return false;
    const marker = await this.readMarker(bucket, signal);
    return marker !== null && parseMarker(marker.text).phase === "deleted";
  }

  /**
   * The bucket's marker, read from the store; a bucket found live (no marker, or a live one) is
   * trusted as such for BUCKET_STATE_TRUST_MS from when the read was sent (bucket-deletion.ts).
   */
  async readMarker(bucket: string, signal?: AbortSignal): Promise<{ text: string; etag: string } | null> {
    const sent = performance.now();
    const got = await this.store.getText(bucket, this.layout.deletedMarker, signal);
    if (got === null || parseMarker(got.text).phase === "live") {
      this.liveBuckets.trust(bucket, sent);
    } else {
      this.liveBuckets.distrust(bucket);
    }
    return got;
  }

  /** Whether a read sent less than BUCKET_STATE_TRUST_MS ago found the bucket live. */
  trustedLive(bucket: string): boolean {
    return this.liveBuckets.trusted(bucket);
  }

  /** Forgets that the bucket was found live (this process changed its marker). */
  distrust(bucket: string): void {
    this.liveBuckets.distrust(bucket);
  }

  /** NoSuchBucket unless the bucket exists and is not deleted for fencegate. */
  async requireBucket(bucket: string, signal?: AbortSignal): Promise<void> {
    if (await this.softDeleted(bucket, signal)) throw noSuchBucket(bucket);
  }

  /** The key's record and, when asked and needed, its plain object. */
  async current(
    bucket: string,
    key: string,
    opts: { plain: boolean; checkBucket: boolean; latest?: boolean; signal?: AbortSignal; visible?: boolean },
  ): Promise<Current & { cached: boolean }> {
    // A write's early look may start from the record this process last saw: its commit names
    // that record's ETag, so a stale one only costs a refused conditional write and a fresh read.
    const latest = opts.latest ? this.records.latest(bucket, key) : undefined;
    const [read, deleted] = await Promise.all([
      latest ?? this.records.read(bucket, key, opts.signal),
      opts.checkBucket ? this.softDeleted(bucket, opts.signal) : false,
    ]);
    if (deleted) throw noSuchBucket(bucket);
    // A reader sees a pending transaction write as its transaction's record says.
    const record = opts.visible ? await this.visible(bucket, read?.record ?? null) : (read?.record ?? null);
    const lookPlain = opts.plain && (record === null || record.state === "plain");
    const plain = lookPlain ? await this.store.head(bucket, key, opts.signal) : null;
    const liveEtag = record?.state === "live" && record.live ? record.live.etag : (plain?.etag ?? null);
    return { read, record, plain, liveEtag, cached: latest !== undefined };
  }

  /** A new record for `key`; `nonce` makes its ETag unique. */
  newRecord(key: string, fields: Pick<ObjectRecord, "hct" | "state" | "live">): ObjectRecord {
    const record: ObjectRecord = {
      v: 1,
      key,
      hct: fields.hct,
      nonce: newNonce(),
      state: fields.state,
      written: this.clock(),
    };
    if (fields.live) record.live = fields.live;
    return record;
  }

  /**
   * A blob that a commit replaced (no record names it any more): removed a little later, with
   * the others replaced meanwhile, in one DeleteObjects per bucket, off the commit's path. Best
   * effort like removeBlob: what is left (a crash, a failure) is garbage that collectGarbage
   * removes. A reader that still follows the replaced record finds the blob gone and reads the
   * record again (getObject), as it would after an immediate removal.
   */
  removeReplaced(bucket: string, blob: string): void {
    let names = this.retired.get(bucket);
    if (!names) {
      names = new Set();
      this.retired.set(bucket, names);
    }
    names.add(this.layout.blobName(blob));
    if (names.size >= RETIRE_BATCH) {
      void this.flushReplaced();
      return;
    }
    if (this.retireTimer === undefined) {
      this.retireTimer = setTimeout(() => void this.flushReplaced(), RETIRE_DELAY_MS);
      this.retireTimer.unref?.();
    }
  }

  /**
   * Removes the replaced blobs waiting now (close and the collector call it too). Resolves once
   * every blob replaced before the call has been removed (or its removal failed), including those
   * a removal already under way had taken.
   */
  flushReplaced(): Promise<void> {
    clearTimeout(this.retireTimer);
    this.retireTimer = undefined;
    const batches = this.retired;
    this.retired = new Map();
    const before = this.flushing;
    const mine = this.removeBatches(batches);
    this.flushing = Promise.all([before, mine]).then(() => undefined);
    return this.flushing;
  }

  private async removeBatches(batches: Map<string, Set<string>>): Promise<void> {
    await Promise.all(
      [...batches].map(async ([bucket, names]) => {
        const all = [...names];
        for (let i = 0; i < all.length; i += RETIRE_BATCH) {
          const batch = all.slice(i, i + RETIRE_BATCH);
          try {
            await this.store.deleteMany(bucket, batch);
          } catch (err) {
            this.log?.warn(
              { err, bucket, blobs: batch.length },
              "s3 backend: removing replaced blobs failed; the collector will",
            );
          }
        }
      }),
    );
  }

  /** Best effort: a blob left behind is garbage that collectGarbage removes. */
  async removeBlob(bucket: string, blob: string): Promise<void> {
    try {
      await this.store.delete(bucket, this.layout.blobName(blob));
    } catch (err) {
      this.log?.warn({ err, bucket, blob }, "s3 backend: removing a blob failed; the collector will");
    }
  }
}
