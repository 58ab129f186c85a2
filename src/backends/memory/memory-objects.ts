import { DomainError } from "../../core/errors.js";
import type { MemoryDomain } from "../../core/tx.js";
import type { FenceState, NextState } from "../../fence/commit-port.js";
import { noSuchBucket, noSuchKey } from "../backend-errors.js";
import { compareKeys, type SeekFn, seekSorted } from "../list-helper.js";
import type { BucketInfo, Checksums, ObjectMetadata, WriteState } from "../storage-backend.js";
import { change } from "./undoable.js";

/**
 * An object's metadata as stored: the writer's, the checksums its body was verified with, and the
 * multipart upload whose completion made it.
 */
export type StoredMetadata = ObjectMetadata & { checksums?: Checksums; upload?: string };

/** One version of an object. Never modified: an overwrite stores a new one. */
export type LiveObject = {
  bytes: Buffer;
  size: number;
  etag: string;
  lastModified: number;
  metadata: StoredMetadata;
};

/** An object's HCT and its live version; a record without one is a tombstone. Replaced, never modified. */
type ObjectRecord = { hct: number | null; live: LiveObject | null };

export type ListRow = { key: string; size: number; etag: string; lastModified: number };

/** A version staged for a commit; `inStep`: the backend's own checks and changes in its step. */
export type MemoryVersion = LiveObject & { inStep?: () => void };

/**
 * Buckets, objects and HCTs of the memory backend: the counterpart of the fs backend's
 * FsMetadataStore. Every method is synchronous; the ones that change state run inside a step of
 * the backend's MemoryDomain and register an undo for each change, so the HCT rule, the write
 * conditions, FencedCommit.atomic and the change are one step that happens entirely or not at all.
 *
 * Objects are kept by bucket name apart from the buckets themselves, so an HCT outlives its
 * object (a tombstone) and its bucket's deletion and re-creation (contract rule 2).
 */
export class MemoryObjects {
  private readonly bucketTimes = new Map<string, number>();
  /** The LocationConstraint of the buckets created with one. */
  private readonly bucketLocations = new Map<string, string>();
  private readonly objects = new Map<string, Map<string, ObjectRecord>>();

  constructor(private readonly domain: MemoryDomain) {}

  bucket(name: string): BucketInfo | null {
    const created = this.bucketTimes.get(name);
    return created === undefined ? null : { name, creationDate: new Date(created) };
  }

  requireBucket(name: string): BucketInfo {
    const bucket = this.bucket(name);
    if (!bucket) throw noSuchBucket(name);
    return bucket;
  }

  buckets(): BucketInfo[] {
    return [...this.bucketTimes.keys()].sort(compareKeys).map((name) => this.requireBucket(name));
  }

  /** In a step. False when the bucket already exists. */
  createBucket(name: string, now: number, location = ""): boolean {
    if (this.bucketTimes.has(name)) return false;
    change(this.domain, this.bucketTimes, name, now);
    change(this.domain, this.bucketLocations, name, location === "" ? undefined : location);
    return true;
  }

  /** The bucket's LocationConstraint, "" for none; NoSuchBucket. */
  bucketLocation(name: string): string {
    this.requireBucket(name);
    return this.bucketLocations.get(name) ?? "";
  }

  /** In a step: NoSuchBucket, BucketNotEmpty (tombstones do not count). */
  deleteBucket(name: string): void {
    this.requireBucket(name);
    for (const record of this.objects.get(name)?.values() ?? []) {
      if (record.live) {
        throw new DomainError("BucketNotEmpty", "the bucket you tried to delete is not empty", {
          bucket: name,
        });
      }
    }
    change(this.domain, this.bucketTimes, name, undefined);
  }

  /** The live version of an object; NoSuchBucket / NoSuchKey otherwise. */
  live(bucket: string, key: string): LiveObject {
    const live = this.current(bucket, key)?.live;
    if (!live) throw noSuchKey(bucket, key);
    return live;
  }

  /** The live version of an object, or null (whatever the bucket). */
  liveOrNull(bucket: string, key: string): LiveObject | null {
    return this.objects.get(bucket)?.get(key)?.live ?? null;
  }

  /** Also answers for a bucket that no longer exists. */
  highestToken(bucket: string, key: string): number | null {
    return this.objects.get(bucket)?.get(key)?.hct ?? null;
  }

  /** NoSuchBucket. */
  writeState(bucket: string, key: string): WriteState {
    const record = this.current(bucket, key);
    return { highestToken: record?.hct ?? null, etag: record?.live?.etag ?? null };
  }

  /**
   * In a step: the object's record and its fencing state. With `write`, NoSuchBucket when the
   * bucket is gone, so that a bucket deleted since the write began is never written into.
   */
  stateOf(
    bucket: string,
    key: string,
    write: boolean,
  ): { record: ObjectRecord | undefined; state: FenceState } {
    const record = write ? this.current(bucket, key) : this.objects.get(bucket)?.get(key);
    return {
      record,
      state: {
        hct: record?.hct ?? null,
        etag: record?.live?.etag ?? null,
        deleted: record !== undefined && record.live === null,
        stored: record !== undefined,
        writes: [],
      },
    };
  }

  /** In a step: makes the object what `next` says, over `record` (as stateOf read it). */
  apply(bucket: string, key: string, record: ObjectRecord | undefined, next: NextState<MemoryVersion>): void {
    if (next.kind === "put") {
      const { inStep: _inStep, ...live } = next.version;
      this.setRecord(bucket, key, { hct: next.hct, live });
    } else if (next.kind === "keep") {
      this.setRecord(bucket, key, { hct: next.hct, live: record?.live ?? null });
    } else {
      // The HCT outlives the object: a tombstone, even when there was nothing to delete.
      this.setRecord(bucket, key, next.hct === null ? undefined : { hct: next.hct, live: null });
    }
  }

  /**
   * A seek over a bucket's live objects in key order (UTF-8 byte order), taken from one
   * snapshot: the listing built on it is consistent however many commits land meanwhile.
   */
  seeker(bucket: string): SeekFn<ListRow> {
    const rows: ListRow[] = [];
    for (const [key, record] of this.objects.get(bucket) ?? []) {
      if (record.live) {
        const { size, etag, lastModified } = record.live;
        rows.push({ key, size, etag, lastModified });
      }
    }
    rows.sort((a, b) => compareKeys(a.key, b.key));
    return (from) =>
      seekSorted(rows, (row) => {
        const order = compareKeys(row.key, from.key);
        return from.inclusive ? order >= 0 : order > 0;
      });
  }

  /** The object's record (undefined when there is none), after checking its bucket exists. */
  private current(bucket: string, key: string): ObjectRecord | undefined {
    this.requireBucket(bucket);
    return this.objects.get(bucket)?.get(key);
  }

  private setRecord(bucket: string, key: string, record: ObjectRecord | undefined): void {
    let keys = this.objects.get(bucket);
    if (!keys) {
      if (!record) return;
      keys = new Map();
      change(this.domain, this.objects, bucket, keys);
    }
    change(this.domain, keys, key, record);
  }
}
