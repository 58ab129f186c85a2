import type { Clock } from "../../core/clock.js";
import { DomainError } from "../../core/errors.js";
import type { Logger } from "../../core/log.js";
import { parseMarker } from "./bucket-marker.js";
import type { CapabilityGate } from "./capability.js";
import type { Layout } from "./layout.js";
import type { S3CommitHooks } from "./options.js";
import type { RecordStore } from "./record-store.js";
import { newNonce, type ObjectRecord, type ReadRecord } from "./records.js";
import type { Store, StoredObject } from "./store.js";
import { noSuchBucket } from "./store-errors.js";

/** What a commit found: the record, and the plain object at the key when it was looked up. */
export type Current = {
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

  constructor(
    readonly store: Store,
    readonly layout: Layout,
    readonly records: RecordStore,
    readonly gate: CapabilityGate,
    readonly clock: Clock,
    readonly hooks: S3CommitHooks | undefined,
    readonly log: Logger | undefined,
  ) {}

  assertOpen(): void {
    if (this.closed) throw new DomainError("ServiceUnavailable", "the s3 backend is closed");
  }

  /**
   * Whether the bucket is deleted for fencegate but kept for its HCTs (a bucket being deleted is
   * not yet: it is read as usual). NoSuchBucket when the store has no such bucket.
   */
  async softDeleted(bucket: string, signal?: AbortSignal): Promise<boolean> {
    const marker = await this.store.getText(bucket, this.layout.deletedMarker, signal);
    return marker !== null && parseMarker(marker.text).phase === "deleted";
  }

  /** NoSuchBucket unless the bucket exists and is not deleted for fencegate. */
  async requireBucket(bucket: string, signal?: AbortSignal): Promise<void> {
    if (await this.softDeleted(bucket, signal)) throw noSuchBucket(bucket);
  }

  /** The key's record and, when asked and needed, its plain object. */
  async current(
    bucket: string,
    key: string,
    opts: { plain: boolean; checkBucket: boolean; signal?: AbortSignal },
  ): Promise<Current> {
    const [read, deleted] = await Promise.all([
      this.records.read(bucket, key, opts.signal),
      opts.checkBucket ? this.softDeleted(bucket, opts.signal) : false,
    ]);
    if (deleted) throw noSuchBucket(bucket);
    const record = read?.record ?? null;
    const lookPlain = opts.plain && (record === null || record.state === "plain");
    const plain = lookPlain ? await this.store.head(bucket, key, opts.signal) : null;
    const liveEtag = record?.state === "live" && record.live ? record.live.etag : (plain?.etag ?? null);
    return { read, record, plain, liveEtag };
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

  /** Best effort: a blob left behind is garbage that collectGarbage removes. */
  async removeBlob(bucket: string, blob: string): Promise<void> {
    try {
      await this.store.delete(bucket, this.layout.blobName(blob));
    } catch (err) {
      this.log?.warn({ err, bucket, blob }, "s3 backend: removing a blob failed; the collector will");
    }
  }
}
