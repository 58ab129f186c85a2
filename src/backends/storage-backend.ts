import type { Readable } from "node:stream";
import type { TxDomain } from "../core/tx.js";
import type { InFlightWrites } from "../fence/bucket-deletion.js";
import type { FencedCommit, WriteConditions } from "../fence/commit.js";
import type { EarlyState, TransactionLog } from "../fence/commit-port.js";

/**
 * The contract every storage backend (fs, s3, azure) fulfils, and every type backends
 * share. Bytes stream through; no method reads a whole object body into memory.
 *
 * Writes commit through a FencedCommit (src/fence/commit.ts): the backend applies the commit's
 * HCT rule and write conditions in one atomic step with the change, and a refused or failed
 * write changes nothing. Errors are DomainErrors (src/core/errors.ts): NoSuchBucket, NoSuchKey,
 * StaleFencingToken, PreconditionFailed, ... Keys reach a backend already validated
 * (src/core/key-rules.ts); backends check them again only where a key becomes a path.
 */

export type { FencedCommit, InFlightWrites, WriteConditions };

export type ObjectHeaders = {
  contentType?: string;
  contentEncoding?: string;
  contentDisposition?: string;
  contentLanguage?: string;
  cacheControl?: string;
  expires?: string;
};

export const CHECKSUM_NAMES = ["CRC32", "CRC32C", "SHA1", "SHA256", "CRC64NVME"] as const;

/** Checksums keyed by S3 algorithm name (CRC32, CRC32C, SHA1, SHA256, CRC64NVME), base64. */
export type Checksums = Partial<Record<(typeof CHECKSUM_NAMES)[number], string>>;

/** What a writer sets about an object besides its bytes. */
export type ObjectMetadata = {
  headers: ObjectHeaders;
  /** User metadata without the `x-amz-meta-` prefix, names lower-cased. */
  userMetadata: Record<string, string>;
};

export type ObjectInfo = ObjectMetadata & {
  key: string;
  size: number;
  /** Quoted, as S3 returns it: `"<md5 hex>"` or `"<hex>-N"`. */
  etag: string;
  lastModified: Date;
  /** The checksums the writer sent or asked for, verified when the body was received. */
  checksums?: Checksums;
};

/** What the body's verification established. */
export type BodyDigest = {
  /** Decoded byte count. */
  size: number;
  /** Checksums to store with the object (the writer's, verified). */
  checksums: Checksums;
};

/**
 * An object body as the S3 layer hands it to a backend: the decoded bytes, and the promise of
 * their verification (payload hash, chunk signatures, trailing checksum, Content-MD5). The stream
 * errors, and `digest` rejects, when verification fails. A backend commits only after `digest`
 * resolves, and stores `digest.checksums` with the object.
 */
export type VerifiedBody = {
  stream: Readable;
  digest: Promise<BodyDigest>;
};

export type ListEntry = { key: string; size: number; etag: string; lastModified: Date };

export type ListInput = {
  bucket: string;
  prefix?: string;
  delimiter?: string;
  /** Keys strictly after this one (S3 marker / start-after / continuation). */
  startAfter?: string;
  maxKeys: number;
  /** Keys starting with this are left out, as if absent: the meta prefix, for S3 requests. */
  hidden?: string;
};

export type ListResult = {
  objects: ListEntry[];
  commonPrefixes: string[];
  isTruncated: boolean;
  /** The last key or common prefix returned, to continue after when truncated. */
  nextStartAfter?: string;
};

export type BucketInfo = { name: string; creationDate: Date };

export type CreateBucketOptions = {
  /**
   * The LocationConstraint the bucket is created with, kept for GetBucketLocation; "" or absent
   * for none (us-east-1). A bucket created again after its deletion takes the new one.
   */
  location?: string;
};

/** What a write's early refusal needs to know about the object, before its body is read. */
export type WriteState = {
  /** The object's HCT, live or deleted; null when no fenced write ever reached it. */
  highestToken: number | null;
  /** The live object's ETag, or null when there is none. */
  etag: string | null;
  /** What a compare-and-swap backend read, to be handed back with the commit (FencedCommit.early). */
  early?: EarlyState;
};

export type PutObjectInput = {
  bucket: string;
  key: string;
  body: VerifiedBody;
  metadata: ObjectMetadata;
};

export type PutObjectResult = {
  etag: string;
  size: number;
  lastModified: Date;
  /** The object's HCT after the commit (null when no fenced write ever reached it). */
  highestToken: number | null;
  checksums: Checksums;
};

export type DeleteObjectInput = { bucket: string; key: string };

export type DeleteObjectResult = { existed: boolean; highestToken: number | null };

export type ByteRange = { start: number; end: number }; // inclusive, already resolved

/** A range as requested: `start`-`end` (either may be open) or the last `suffix` bytes. */
export type RangeRequest = { start?: number; end?: number; suffix?: number };

export type GetObjectResult = {
  info: ObjectInfo;
  body: Readable;
  /** The range served, when a range was asked for. */
  range?: ByteRange;
};

// ---- multipart uploads (S3 CreateMultipartUpload ... Complete/Abort) ----

/** S3's bounds: part numbers 1..10000, every part but the last at least 5 MiB. */
export const MIN_PART_NUMBER = 1;
export const MAX_PART_NUMBER = 10_000;
export const MIN_PART_SIZE = 5 * 1024 * 1024;

/** The lease an upload was created under; its parts and completion are fenced with it. */
export type UploadBinding = {
  /** The token the upload is bound to; null when it was created without one. */
  token: number | null;
  leaseId: string | null;
  /**
   * The fenced transaction the upload was created in (x-fence-transaction on Create): its parts
   * and completion join it, so its completion is staged, not made visible; null or absent: none.
   */
  transactionId?: string | null;
};

export type MultipartUpload = UploadBinding & {
  uploadId: string;
  bucket: string;
  key: string;
  /** Applied to the object when the upload completes. */
  metadata: ObjectMetadata;
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

export type CreateUploadInput = UploadBinding & {
  bucket: string;
  key: string;
  metadata: ObjectMetadata;
  initiator: string | null;
};

export type CreateUploadResult = {
  uploadId: string;
  /** The object's HCT, unchanged by the creation. */
  highestToken: number | null;
};

export type UploadPartInput = UploadRef & {
  partNumber: number;
  /** The part's bytes; the part is recorded only once `digest` resolves. */
  body: VerifiedBody;
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

export type CompleteUploadInput = UploadRef & { parts: CompletedPart[] };

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

/**
 * Multipart uploads. An upload records the lease it was created under (UploadBinding); the
 * fencing core checks every part and the completion against that binding before it commits.
 * Creating an upload and uploading a part change nothing visible: their commits check the HCT
 * rule (refusing a token already below the object's HCT) but never raise the HCT. Completion is
 * a write like PutObject: the HCT rule and the object commit are one atomic step, and a refused
 * completion changes nothing (the upload stays, to be completed again or aborted).
 *
 * Errors are DomainErrors: NoSuchUpload, InvalidPart, InvalidPartOrder, EntityTooSmall,
 * InvalidArgument, MalformedXML, StaleFencingToken, NoSuchBucket, PreconditionFailed.
 */
export interface MultipartStore {
  createUpload(input: CreateUploadInput, commit: FencedCommit): Promise<CreateUploadResult>;
  /** NoSuchUpload when unknown, completed or aborted. */
  getUpload(ref: UploadRef): Promise<MultipartUpload>;
  /** Stores the part durably, then records it (replacing a part with the same number). */
  uploadPart(input: UploadPartInput, commit: FencedCommit): Promise<UploadPartResult>;
  /** Assembles the object from the listed parts and commits it like a PutObject. */
  completeUpload(input: CompleteUploadInput, commit: FencedCommit): Promise<PutObjectResult>;
  /** Removes the upload and its parts. NoSuchUpload. */
  abortUpload(ref: UploadRef): Promise<void>;
  /**
   * The ETag of the live object when completing this upload made it (a completion retried after
   * its answer was lost, the upload gone since): null otherwise. NoSuchBucket.
   */
  completedBy(ref: UploadRef): Promise<string | null>;
  listParts(input: ListPartsInput): Promise<ListPartsResult>;
  listUploads(input: ListUploadsInput): Promise<ListUploadsResult>;
}

/** What a backend can do; the fencing core adapts to it. */
type BackendCapabilities = {
  /**
   * The domain of the backend's atomic step when it can run code inside it (FencedCommit.atomic):
   * the embedded database. Absent for remote stores.
   */
  domain?: TxDomain;
};

/**
 * fencegate's own small records (token epochs, src/epochs/) in a system bucket of a remote store,
 * under the backend's meta prefix. The gateway reserves the bucket's name, so no S3 request
 * reaches them. A record is only ever created, never replaced or removed.
 */
export interface SystemRecords {
  /** The bucket and the store, for messages. */
  readonly where: string;
  /** Creates the bucket when missing; throws when it cannot be created or read (AccessDenied). */
  open(): Promise<void>;
  /**
   * Creates the record unless one of that name exists (If-None-Match: *): true once it is
   * durable, false when it exists. A create whose answer never came throws (it may have landed).
   */
  create(name: string, body: Buffer): Promise<boolean>;
  /** The names of every record under `prefix`, whatever their content. */
  list(prefix: string): Promise<string[]>;
  /** Keys under `prefix` of gateway objects older versions kept in this bucket, deleted ones too. */
  legacyKeys(prefix: string): Promise<string[]>;
}

export interface StorageBackend extends BackendCapabilities {
  readonly kind: string;
  readonly multipart: MultipartStore;
  /** Object keys starting with this are fencegate's own in every bucket: no request may use them. */
  readonly reservedKeyPrefix?: string;
  /** Remote stores: the records of a system bucket (see SystemRecords). */
  systemRecords?(bucket: string): SystemRecords;

  listBuckets(): Promise<BucketInfo[]>;
  /** BucketAlreadyOwnedByYou when it exists; InvalidBucketName. */
  createBucket(bucket: string, opts?: CreateBucketOptions): Promise<void>;
  /** The LocationConstraint the bucket was created with, "" for none. NoSuchBucket. */
  bucketLocation(bucket: string): Promise<string>;
  /** NoSuchBucket. */
  headBucket(bucket: string): Promise<BucketInfo>;
  /**
   * NoSuchBucket, BucketNotEmpty, OperationAborted. Atomic with respect to every commit: a write
   * racing it is refused or keeps its bucket. `inFlight` names the objects with a commit in flight
   * (the lease store's commit intents); a backend without atomic steps touches them (see
   * src/fence/bucket-deletion.ts). Without it, none are known: for tests and single-process tools.
   */
  deleteBucket(bucket: string, inFlight?: InFlightWrites): Promise<void>;

  /** The object's HCT and ETag, for refusing a doomed write before its body is read. NoSuchBucket. */
  writeState(bucket: string, key: string): Promise<WriteState>;
  putObject(input: PutObjectInput, commit: FencedCommit): Promise<PutObjectResult>;
  deleteObject(input: DeleteObjectInput, commit: FencedCommit): Promise<DeleteObjectResult>;
  /**
   * Raises the object's HCT to at least `token` without changing its bytes or metadata (a live
   * object stays live, a missing one gets a tombstone): how the fencing core fences a commit
   * intent left by an ended lease, and how a broken lease's objects are fenced. Atomic with
   * respect to commits; returns the HCT after it. Works whether or not the bucket exists.
   */
  raiseHighestToken(bucket: string, key: string, token: number): Promise<number>;

  /** NoSuchBucket, NoSuchKey. */
  headObject(bucket: string, key: string): Promise<ObjectInfo>;
  /** `range` is resolved against the size by the backend (InvalidRange when unsatisfiable). */
  getObject(
    bucket: string,
    key: string,
    range?: RangeRequest,
    signal?: AbortSignal,
  ): Promise<GetObjectResult>;
  listObjects(input: ListInput): Promise<ListResult>;
  /**
   * Step backends: the bytes and description of a version staged by a write of a fenced
   * transaction (StagedWrite.change.version), for a read inside that transaction.
   */
  readStaged?(bucket: string, key: string, version: unknown, range?: RangeRequest): Promise<GetObjectResult>;
  /**
   * Compare-and-swap backends: the records of the bucket's fenced transactions, kept in the
   * store (src/fence/commit-port.ts TransactionLog), so that any gateway can commit them.
   */
  transactionLog?(bucket: string): TransactionLog | undefined;

  /** The HCT of an object, live or deleted; null when no fenced write ever reached it. */
  highestToken(bucket: string, key: string): Promise<number | null>;
  /**
   * Compare-and-swap backends: the note (FencedCommit.note) of the last write that put or deleted
   * the object, kept with its state; null when there is none. Backends whose commits record their
   * audit decision in the same step (a domain) have no notes.
   */
  writeNote?(bucket: string, key: string): Promise<string | null>;

  close(): Promise<void>;
}
