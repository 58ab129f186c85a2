import { createHash } from "node:crypto";
import type { Readable } from "node:stream";
import { DomainError } from "../core/errors.js";
import type {
  CommitHooks,
  ObjectMetadata,
  PutObjectResult,
  WriteConditions,
  WriteFence,
} from "./storage-backend.js";

/**
 * The multipart part of the storage contract (S3 CreateMultipartUpload ... Complete/Abort).
 *
 * Fencing: an upload is bound to the fence it was created with (a token number, or null for
 * an unfenced upload under the `optional` policy). Every part and the completion must carry
 * that same fence, checked by the backend atomically with recording the part or committing
 * the object; any other fence is refused with FencingTokenScopeMismatch (another lease,
 * even a newer one on the same key, does not cover the upload) or FencingTokenRequired (no
 * token on a fenced upload). Creating an upload and uploading parts change nothing visible:
 * they check the object's HCT but never raise it. Completion is a write like PutObject: its
 * HCT check and the object commit are one atomic step, and a refused completion changes
 * nothing (the upload stays, so it can be completed again or aborted).
 *
 * Errors are DomainErrors: NoSuchUpload, InvalidPart, InvalidPartOrder, EntityTooSmall,
 * InvalidArgument, StaleFencingToken (StaleTokenError), NoSuchBucket, PreconditionFailed.
 */

/** S3's bounds: part numbers 1..10000, every part but the last at least 5 MiB. */
export const MIN_PART_NUMBER = 1;
export const MAX_PART_NUMBER = 10_000;
export const MIN_PART_SIZE = 5 * 1024 * 1024;

export type MultipartUpload = {
  uploadId: string;
  bucket: string;
  key: string;
  /** Applied to the object when the upload completes. */
  metadata: ObjectMetadata;
  /** The token the upload is bound to; null when it was created without one. */
  token: number | null;
  leaseId: string | null;
  /** Access key id of the principal that created the upload. */
  initiator: string | null;
  initiated: Date;
};

export type PartInfo = {
  partNumber: number;
  size: number;
  /** Quoted md5 hex, as S3 returns it. */
  etag: string;
  lastModified: Date;
};

/** Which upload a request addresses: S3 names it by bucket, key and upload id together. */
export type UploadRef = { bucket: string; key: string; uploadId: string };

export type CreateUploadInput = {
  bucket: string;
  key: string;
  metadata: ObjectMetadata;
  fence: WriteFence;
  /** The lease behind `fence` (null when unfenced); kept for listings and the audit trail. */
  leaseId: string | null;
  initiator: string | null;
};

export type CreateUploadResult = {
  uploadId: string;
  /** The object's HCT, unchanged by the creation. */
  highestToken: number | null;
};

export type UploadPartInput = UploadRef & {
  partNumber: number;
  /** The decoded part bytes; an error on the stream abandons the part. */
  body: Readable;
  fence: WriteFence;
};

export type UploadPartResult = {
  etag: string;
  size: number;
  lastModified: Date;
  /** The object's HCT, unchanged by the part. */
  highestToken: number | null;
};

export type CompletedPart = {
  partNumber: number;
  /** As the client sent it: quoted or not. */
  etag: string;
};

export type CompleteUploadInput = UploadRef & {
  parts: CompletedPart[];
  fence: WriteFence;
  conditions?: WriteConditions;
};

export type ListPartsInput = UploadRef & {
  maxParts: number;
  /** Parts with numbers strictly above this one. */
  partNumberMarker?: number;
};

export type ListPartsResult = {
  upload: MultipartUpload;
  parts: PartInfo[];
  isTruncated: boolean;
  nextPartNumberMarker?: number;
};

export type ListUploadsInput = {
  bucket: string;
  prefix?: string;
  delimiter?: string;
  /** Uploads of keys strictly after this one, or, with uploadIdMarker, from within this key. */
  keyMarker?: string;
  /** With keyMarker: uploads of that key that come after this upload. */
  uploadIdMarker?: string;
  maxUploads: number;
};

export type ListUploadsResult = {
  /** In key order, then in order of initiation. */
  uploads: MultipartUpload[];
  commonPrefixes: string[];
  isTruncated: boolean;
  nextKeyMarker?: string;
  nextUploadIdMarker?: string;
};

export interface MultipartStore {
  /** The commit creates the upload record (HCT checked, not raised). NoSuchBucket. */
  createUpload(input: CreateUploadInput, hooks?: CommitHooks): Promise<CreateUploadResult>;
  /** NoSuchUpload when unknown, completed or aborted. */
  getUpload(ref: UploadRef): Promise<MultipartUpload>;
  /** Stores the part durably, then records it (replacing a part with the same number). */
  uploadPart(input: UploadPartInput, hooks?: CommitHooks): Promise<UploadPartResult>;
  /** Assembles the object from the listed parts and commits it like a PutObject. */
  completeUpload(input: CompleteUploadInput, hooks?: CommitHooks): Promise<PutObjectResult>;
  /** Removes the upload and its parts. NoSuchUpload. */
  abortUpload(ref: UploadRef): Promise<void>;
  listParts(input: ListPartsInput): Promise<ListPartsResult>;
  listUploads(input: ListUploadsInput): Promise<ListUploadsResult>;
}

/**
 * The fencing rule for parts and completion: the request's fence must be the one the upload
 * was created with. A lower token never gets here (its lease was superseded by the upload's,
 * so the lease check refuses it first); a higher or different token belongs to another lease,
 * which does not cover this upload, and retrying with it can never succeed: start a new upload.
 */
export function assertUploadFence(
  upload: Pick<MultipartUpload, "token" | "uploadId">,
  fence: WriteFence,
): void {
  if (upload.token === null && fence === null) return;
  if (fence === null) {
    throw new DomainError(
      "FencingTokenRequired",
      "this multipart upload was created under a lease; its parts and its completion must carry that lease's fencing token",
      { uploadId: upload.uploadId },
    );
  }
  if (fence.token !== upload.token) {
    throw new DomainError(
      "FencingTokenScopeMismatch",
      upload.token === null
        ? "this multipart upload was created without a fencing token; a lease's token does not cover it"
        : `this multipart upload is bound to fencing token ${upload.token}, not ${fence.token}`,
      { uploadId: upload.uploadId, token: fence.token },
    );
  }
}

export function assertPartNumber(partNumber: number): void {
  if (!Number.isSafeInteger(partNumber) || partNumber < MIN_PART_NUMBER || partNumber > MAX_PART_NUMBER) {
    throw new DomainError(
      "InvalidArgument",
      `Part number must be an integer between ${MIN_PART_NUMBER} and ${MAX_PART_NUMBER}, inclusive`,
      { partNumber },
    );
  }
}

/** The part list of a completion must name each part once, in ascending order. */
export function assertPartOrder(parts: readonly CompletedPart[]): void {
  if (parts.length === 0) {
    throw new DomainError("InvalidRequest", "You must specify at least one part", { s3Code: "MalformedXML" });
  }
  let previous = 0;
  for (const part of parts) {
    if (
      !Number.isSafeInteger(part.partNumber) ||
      part.partNumber < MIN_PART_NUMBER ||
      part.partNumber > MAX_PART_NUMBER
    ) {
      throw new DomainError("InvalidPart", `part number ${part.partNumber} is not a valid part number`, {
        partNumber: part.partNumber,
      });
    }
    if (part.partNumber <= previous) {
      throw new DomainError(
        "InvalidPartOrder",
        "The list of parts was not in ascending order. Parts must be ordered by part number.",
        { partNumber: part.partNumber },
      );
    }
    previous = part.partNumber;
  }
}

/** `"<md5 of the concatenated binary part md5s>-N"`, as S3 computes a multipart ETag. */
export function multipartEtag(partMd5Hexes: readonly string[]): string {
  const md5 = createHash("md5");
  for (const hex of partMd5Hexes) md5.update(Buffer.from(hex, "hex"));
  return `"${md5.digest("hex")}-${partMd5Hexes.length}"`;
}

/** An ETag as a client may send it (quoted or not, weak or not) reduced to its bare value. */
export { normalizeEtag as bareEtag } from "./etag.js";
