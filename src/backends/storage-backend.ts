import type { Readable } from "node:stream";
import type { MultipartStore } from "./multipart.js";

/**
 * The contract every storage backend (fs, s3, azure) fulfils. Bytes stream through;
 * no method reads a whole object body into memory.
 *
 * Fencing: a write carries `fence` (the token number) or null (an unfenced write under the
 * `optional` policy). The backend owns the atomic step: the object's highest committed
 * token (HCT) is compared with the write's token and updated in the same step that makes
 * the write visible (rule 3 of the contract). A refused write changes nothing (rule 5).
 * Errors are DomainErrors (src/core/errors.ts): StaleTokenError, NoSuchBucket, ...
 */

export type ObjectHeaders = {
  contentType?: string;
  contentEncoding?: string;
  contentDisposition?: string;
  contentLanguage?: string;
  cacheControl?: string;
  expires?: string;
};

/** Checksums keyed by S3 algorithm name (CRC32, CRC32C, SHA1, SHA256, CRC64NVME), base64. */
export type Checksums = Partial<Record<"CRC32" | "CRC32C" | "SHA1" | "SHA256" | "CRC64NVME", string>>;

export type ObjectMetadata = {
  headers: ObjectHeaders;
  /** User metadata without the `x-amz-meta-` prefix, names lower-cased. */
  userMetadata: Record<string, string>;
  checksums?: Checksums;
};

export type ObjectInfo = ObjectMetadata & {
  key: string;
  size: number;
  /** Quoted, as S3 returns it: `"<md5 hex>"` or `"<hex>-N"`. */
  etag: string;
  lastModified: Date;
};

export type ListEntry = { key: string; size: number; etag: string; lastModified: Date };

export type ListInput = {
  bucket: string;
  prefix?: string;
  delimiter?: string;
  /** Keys strictly after this one (S3 marker / start-after / continuation). */
  startAfter?: string;
  maxKeys: number;
};

export type ListResult = {
  objects: ListEntry[];
  commonPrefixes: string[];
  isTruncated: boolean;
  /** The last key or common prefix returned, to continue after when truncated. */
  nextStartAfter?: string;
};

export type BucketInfo = { name: string; creationDate: Date };

export type WriteFence = { token: number } | null;

export type WriteConditions = {
  /** Quoted or unquoted ETag the current object must have. */
  ifMatch?: string;
  /** `*`: the object must not exist. */
  ifNoneMatch?: string;
};

export type CommitHooks = {
  /**
   * Called after the body has been received in full and verified, immediately before the
   * atomic commit. Throws (a DomainError) to refuse the write; nothing is then changed.
   * The fencing core re-checks here that the lease is still current (contract rule 4).
   */
  beforeCommit?: () => Promise<void>;
  /**
   * Called synchronously inside the atomic commit step, after the change and before it is
   * made durable; throwing aborts the commit. A backend whose commit runs in a transaction of
   * the embedded database calls it, so that the audit record is committed with the write in
   * one step. Backends that cannot run code atomically with their commit do not call it; the
   * caller then records the decision after the commit returns.
   */
  inCommit?: (outcome: { highestToken: number | null }) => void;
};

export type PutObjectInput = {
  bucket: string;
  key: string;
  /** The decoded body. It errors if the body fails verification; the write is then abandoned. */
  body: Readable;
  metadata: ObjectMetadata;
  fence: WriteFence;
  conditions?: WriteConditions;
};

export type PutObjectResult = {
  etag: string;
  size: number;
  lastModified: Date;
  /** The object's HCT after the commit (null when no fenced write ever reached it). */
  highestToken: number | null;
};

export type DeleteObjectInput = {
  bucket: string;
  key: string;
  fence: WriteFence;
};

export type DeleteObjectResult = { existed: boolean; highestToken: number | null };

export type ByteRange = { start: number; end: number }; // inclusive, already resolved

export type GetObjectResult = {
  info: ObjectInfo;
  body: Readable;
  /** The range served, when a range was asked for. */
  range?: ByteRange;
};

export interface StorageBackend {
  readonly kind: string;
  /** Multipart uploads (src/backends/multipart.ts); absent when the backend has none. */
  readonly multipart?: MultipartStore;

  listBuckets(): Promise<BucketInfo[]>;
  createBucket(bucket: string): Promise<void>; // BucketAlreadyOwnedByYou when it exists
  headBucket(bucket: string): Promise<BucketInfo>; // NoSuchBucket
  deleteBucket(bucket: string): Promise<void>; // NoSuchBucket, BucketNotEmpty

  putObject(input: PutObjectInput, hooks?: CommitHooks): Promise<PutObjectResult>;
  deleteObject(input: DeleteObjectInput, hooks?: CommitHooks): Promise<DeleteObjectResult>;

  headObject(bucket: string, key: string): Promise<ObjectInfo>; // NoSuchBucket, NoSuchKey
  /** `range` is resolved against the size by the backend (InvalidRange when unsatisfiable). */
  getObject(
    bucket: string,
    key: string,
    range?: { start?: number; end?: number; suffix?: number },
  ): Promise<GetObjectResult>;
  listObjects(input: ListInput): Promise<ListResult>;

  /** The HCT of an object, live or deleted; null when no fenced write ever reached it. */
  highestToken(bucket: string, key: string): Promise<number | null>;

  close(): Promise<void>;
}
