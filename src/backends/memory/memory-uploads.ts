import type { MemoryDomain } from "../../core/tx.js";
import { noSuchUpload, partReplaced } from "../backend-errors.js";
import type { SeekFn, SeekFrom } from "../list-helper.js";
import { compareUploads, seekUploads, uploadOf } from "../multipart.js";
import type { CreateUploadInput, MultipartUpload, UploadRef } from "../storage-backend.js";
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

/**
 * Multipart uploads of the memory backend and their parts: the counterpart of the fs backend's
 * FsMultipartMetadata. Methods that change state run inside a step of the backend's MemoryDomain
 * and register an undo for every change: a completion's HCT check, its object and the removal of
 * its upload commit together or not at all.
 */
export class MemoryUploads {
  private readonly uploads = new Map<string, UploadRecord>();

  constructor(private readonly domain: MemoryDomain) {}

  /** In a step (with the commit's HCT check, see memory-multipart.ts): records a new upload. */
  insertUpload(upload: NewUpload): void {
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
  }

  /** NoSuchUpload when the upload is unknown, or addressed with another bucket or key. */
  requireUpload(ref: UploadRef): UploadRecord {
    const upload = this.uploads.get(ref.uploadId);
    if (!upload || upload.bucket !== ref.bucket || upload.key !== ref.key) throw noSuchUpload(ref.uploadId);
    return upload;
  }

  /** In a step (with the commit's HCT check): records a part, replacing one with the same number. */
  recordPart(ref: UploadRef, part: PartRecord): void {
    change(this.domain, this.requireUpload(ref).parts, part.partNumber, part);
  }

  /** The upload's parts in part number order. */
  parts(upload: UploadRecord): PartRecord[] {
    return [...upload.parts.values()].sort((a, b) => a.partNumber - b.partNumber);
  }

  /**
   * In the completion's commit step, before the object changes: the upload is still there with
   * the parts assembled (none replaced since), and goes.
   */
  completeInStep(ref: UploadRef, used: readonly PartRecord[]): void {
    const upload = this.requireUpload(ref);
    for (const part of used) {
      if (upload.parts.get(part.partNumber)?.bytes !== part.bytes) throw partReplaced(part.partNumber);
    }
    change(this.domain, this.uploads, upload.uploadId, undefined);
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
      .sort(compareUploads);
    return (from: SeekFrom) => seekUploads(sorted, from, marker);
  }
}

export const toUpload = (record: UploadRecord): MultipartUpload =>
  uploadOf(record.bucket, record.uploadId, { ...record, metadata: structuredClone(record.metadata) });
