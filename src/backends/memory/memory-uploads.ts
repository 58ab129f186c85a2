import type { MemoryDomain } from "../../core/tx.js";
import { compareKeys, type SeekFn, type SeekFrom } from "../list-helper.js";
import type { CreateUploadInput, MultipartUpload, UploadRef } from "../storage-backend.js";
import { noSuchUpload, partReplaced } from "./errors.js";
import type { CommitResult, MemoryObjects, StepCommit } from "./memory-objects.js";
import { seekSorted } from "./sorted-seek.js";
import { change } from "./undoable.js";

/** A recorded part. Never modified: uploading the same number again records a new one. */
export type PartRecord = {
  partNumber: number;
  bytes: Buffer;
  size: number;
  md5Hex: string;
  lastModified: number;
};

export type UploadRecord = Omit<MultipartUpload, "initiated"> & {
  initiated: number;
  parts: Map<number, PartRecord>;
};

export type NewUpload = CreateUploadInput & { uploadId: string; initiated: number };

export type CompleteCommit = {
  ref: UploadRef;
  /** The parts the object was assembled from; none may have been replaced since. */
  used: readonly PartRecord[];
  bytes: Buffer;
  etag: string;
  lastModified: number;
  commit: StepCommit;
};

/**
 * Multipart uploads of the memory backend and their parts: the counterpart of the fs backend's
 * FsMultipartMetadata. Methods that change state run inside a step of the backend's MemoryDomain
 * and register an undo for every change: a completion's HCT check, its object and the removal of
 * its upload commit together or not at all.
 */
export class MemoryUploads {
  private readonly uploads = new Map<string, UploadRecord>();

  constructor(
    private readonly domain: MemoryDomain,
    private readonly objects: MemoryObjects,
  ) {}

  /**
   * In a step: records a new upload. Creating an upload changes nothing visible, so the HCT rule
   * is checked but the HCT not raised. Returns the object's HCT. NoSuchBucket, StaleFencingToken.
   */
  insertUpload(upload: NewUpload, commit: StepCommit): number | null {
    const { highestToken } = this.objects.checkCommit(upload.bucket, upload.key, commit, { raises: false });
    change(this.domain, this.uploads, upload.uploadId, {
      uploadId: upload.uploadId,
      bucket: upload.bucket,
      key: upload.key,
      metadata: structuredClone(upload.metadata),
      token: upload.token,
      leaseId: upload.leaseId,
      initiator: upload.initiator,
      initiated: upload.initiated,
      parts: new Map(),
    });
    return highestToken;
  }

  /** NoSuchUpload when the upload is unknown, or addressed with another bucket or key. */
  requireUpload(ref: UploadRef): UploadRecord {
    const upload = this.uploads.get(ref.uploadId);
    if (!upload || upload.bucket !== ref.bucket || upload.key !== ref.key) throw noSuchUpload(ref.uploadId);
    return upload;
  }

  /**
   * In a step: records a part, replacing one with the same number (the upload must still exist;
   * the HCT rule is checked, the HCT not raised). Returns the object's HCT.
   */
  recordPart(ref: UploadRef, part: PartRecord, commit: StepCommit): number | null {
    const upload = this.requireUpload(ref);
    const { highestToken } = this.objects.checkCommit(upload.bucket, upload.key, commit, { raises: false });
    change(this.domain, upload.parts, part.partNumber, part);
    return highestToken;
  }

  /** The upload's parts in part number order. */
  parts(upload: UploadRecord): PartRecord[] {
    return [...upload.parts.values()].sort((a, b) => a.partNumber - b.partNumber);
  }

  /**
   * In a step, the atomic end of a completion: the upload is still there with the same parts,
   * the object's HCT and conditions allow the write, the object is the assembled one, and the
   * upload is gone.
   */
  commitComplete(input: CompleteCommit): CommitResult {
    const upload = this.requireUpload(input.ref);
    for (const used of input.used) {
      if (upload.parts.get(used.partNumber) !== used) throw partReplaced(used.partNumber);
    }
    const committed = this.objects.commitPut({
      bucket: upload.bucket,
      key: upload.key,
      bytes: input.bytes,
      size: input.bytes.length,
      etag: input.etag,
      lastModified: input.lastModified,
      metadata: structuredClone(upload.metadata),
      commit: input.commit,
    });
    change(this.domain, this.uploads, upload.uploadId, undefined);
    return committed;
  }

  /** In a step: removes an upload and its parts. NoSuchUpload. */
  remove(ref: UploadRef): void {
    change(this.domain, this.uploads, this.requireUpload(ref).uploadId, undefined);
  }

  /** In a step: removes every upload initiated before `time`; returns how many. */
  removeInitiatedBefore(time: number): number {
    let removed = 0;
    for (const upload of [...this.uploads.values()]) {
      if (upload.initiated < time) {
        change(this.domain, this.uploads, upload.uploadId, undefined);
        removed++;
      }
    }
    return removed;
  }

  /** How many parts all live uploads hold together. */
  storedParts(): number {
    let count = 0;
    for (const upload of this.uploads.values()) count += upload.parts.size;
    return count;
  }

  /**
   * A seek over a bucket's uploads by key, then by upload id (= by initiation), from one
   * snapshot. Seeking just after the key marker with an upload id marker continues within that
   * key, after that upload, even when that upload is gone by now.
   */
  seeker(bucket: string, marker?: { key: string; uploadId: string }): SeekFn<UploadRecord> {
    const sorted = [...this.uploads.values()]
      .filter((upload) => upload.bucket === bucket)
      .sort((a, b) => compareKeys(a.key, b.key) || compareIds(a.uploadId, b.uploadId));
    return (from: SeekFrom) =>
      seekSorted(sorted, (upload) => {
        const order = compareKeys(upload.key, from.key);
        if (from.inclusive) return order >= 0;
        if (marker && marker.key === from.key && order === 0) {
          return compareIds(upload.uploadId, marker.uploadId) > 0;
        }
        return order > 0;
      });
  }
}

export function toUpload(record: UploadRecord): MultipartUpload {
  return {
    uploadId: record.uploadId,
    bucket: record.bucket,
    key: record.key,
    metadata: structuredClone(record.metadata),
    token: record.token,
    leaseId: record.leaseId,
    initiator: record.initiator,
    initiated: new Date(record.initiated),
  };
}

// Upload ids are lower-case hex, so code unit order is byte order.
const compareIds = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
