import { join } from "node:path";
import { type Clock, systemClock } from "../../core/clock.js";
import { DomainError } from "../../core/errors.js";
import type { EmbeddedDb } from "../../embedded/db.js";
import { assertValidBucketName, assertValidObjectKey } from "../key-rules.js";
import { listSorted } from "../list-helper.js";
import type {
  BucketInfo,
  CommitHooks,
  DeleteObjectInput,
  DeleteObjectResult,
  GetObjectResult,
  ListInput,
  ListResult,
  ObjectInfo,
  ObjectMetadata,
  PutObjectInput,
  PutObjectResult,
  StorageBackend,
  WriteFence,
} from "../storage-backend.js";
import { BlobStore } from "./blob-store.js";
import { FsMetadataStore, type LiveRow } from "./metadata-store.js";
import { FsMultipartMetadata } from "./multipart-metadata.js";
import { FsMultipartStore } from "./multipart-store.js";
import { type RangeRequest, resolveRange } from "./range.js";

export type FsBackendOptions = {
  /** Blobs live in `<dataDir>/blobs`. */
  dataDir: string;
  /** The shared embedded database (owned by the caller; close() leaves it open). */
  db: EmbeddedDb;
  clock?: Clock;
  /** Multipart uploads initiated longer ago than this are aborted by a periodic sweep. Default 24 h. */
  multipartMaxAgeMs?: number;
  /** How often that sweep runs. Default 10 minutes; 0 runs none (sweepAbandoned() still works). */
  multipartSweepIntervalMs?: number;
};

const DAY_MS = 24 * 60 * 60 * 1000;
const DEFAULT_MULTIPART_SWEEP_MS = 10 * 60 * 1000;

/**
 * Opens the filesystem backend: creates its tables and directories, then removes crash
 * leftovers (temp files, unreferenced blobs) before it serves anything.
 */
export async function createFsBackend(options: FsBackendOptions): Promise<FsBackend> {
  const metadata = new FsMetadataStore(options.db);
  const uploads = new FsMultipartMetadata(options.db, metadata);
  const blobs = await BlobStore.open(join(options.dataDir, "blobs"));
  // Part blobs of live uploads are referenced too: an upload survives restarts.
  await blobs.sweep((id) => metadata.isBlobReferenced(id) || uploads.isBlobReferenced(id));
  const clock = options.clock ?? systemClock;
  let backend: FsBackend | undefined;
  const multipart = new FsMultipartStore(uploads, metadata, blobs, {
    clock,
    maxAgeMs: options.multipartMaxAgeMs ?? DAY_MS,
    assertOpen: () => backend!.assertOpen(),
  });
  backend = new FsBackend(metadata, blobs, clock, multipart);
  backend.startMultipartSweep(options.multipartSweepIntervalMs ?? DEFAULT_MULTIPART_SWEEP_MS);
  return backend;
}

// A GET retries when an overwrite unlinks the blob between reading the row and opening the
// file. Each retry needs a fresh overwrite to lose again; the bound only stops a live-lock.
const MAX_READ_ATTEMPTS = 100;

/**
 * The embedded default backend. Bytes: immutable blob files (BlobStore). Metadata and HCTs:
 * SQLite rows (FsMetadataStore). A write stores its blob first, then commits the row in one
 * synchronous transaction that checks the token and the conditions; the blob it replaced is
 * unlinked afterwards. A refused or failed write removes its own blob and changes no row.
 */
export class FsBackend implements StorageBackend {
  readonly kind = "fs";
  private closed = false;
  private multipartSweep: NodeJS.Timeout | undefined;

  constructor(
    private readonly metadata: FsMetadataStore,
    private readonly blobs: BlobStore,
    private readonly clock: Clock,
    readonly multipart: FsMultipartStore,
  ) {}

  /** Aborts abandoned multipart uploads every `intervalMs` (0: never). */
  startMultipartSweep(intervalMs: number): void {
    if (intervalMs <= 0 || this.multipartSweep) return;
    this.multipartSweep = setInterval(() => {
      // A failed sweep leaves the uploads for the next one; nothing else depends on it.
      if (!this.closed) this.multipart.sweepAbandoned().catch(() => undefined);
    }, intervalMs);
    this.multipartSweep.unref();
  }

  async listBuckets(): Promise<BucketInfo[]> {
    this.assertOpen();
    return this.metadata.buckets();
  }

  async createBucket(bucket: string): Promise<void> {
    this.assertOpen();
    assertValidBucketName(bucket);
    if (!this.metadata.createBucket(bucket, this.clock())) {
      throw new DomainError("BucketAlreadyOwnedByYou", "you already own this bucket", { bucket });
    }
  }

  async headBucket(bucket: string): Promise<BucketInfo> {
    this.assertOpen();
    return this.metadata.requireBucket(bucket);
  }

  async deleteBucket(bucket: string): Promise<void> {
    this.assertOpen();
    this.metadata.deleteBucket(bucket);
  }

  async putObject(input: PutObjectInput, hooks?: CommitHooks): Promise<PutObjectResult> {
    this.assertOpen();
    const { bucket, key, fence, conditions } = input;
    assertValidObjectKey(key);
    assertValidFence(fence);
    // Refuse before receiving the body what the commit would refuse anyway. The body is then
    // left unread; the caller disposes of it. The commit checks again: this is no substitute.
    this.metadata.checkWrite(bucket, key, fence, conditions);

    // No await before this call: the body must be piped (and its errors listened to) at once.
    const blob = await this.blobs.write(input.body);
    const etag = `"${blob.md5Hex}"`;
    const lastModified = this.clock();
    let committed: ReturnType<FsMetadataStore["commitPut"]>;
    try {
      await hooks?.beforeCommit?.();
      // No await between the token check and the row update: both run inside one
      // synchronous SQLite transaction.
      committed = this.metadata.commitPut({
        bucket,
        key,
        blob: blob.id,
        size: blob.size,
        etag,
        lastModified,
        metadata: input.metadata,
        fence,
        conditions,
        inCommit: hooks?.inCommit,
      });
    } catch (e) {
      await this.blobs.remove(blob.id);
      throw e;
    }
    if (committed.replacedBlob) await this.blobs.remove(committed.replacedBlob);
    return {
      etag,
      size: blob.size,
      lastModified: new Date(lastModified),
      highestToken: committed.highestToken,
    };
  }

  async deleteObject(input: DeleteObjectInput, hooks?: CommitHooks): Promise<DeleteObjectResult> {
    this.assertOpen();
    const { bucket, key, fence } = input;
    assertValidObjectKey(key);
    assertValidFence(fence);
    this.metadata.checkWrite(bucket, key, fence);
    await hooks?.beforeCommit?.();
    const committed = this.metadata.commitDelete(bucket, key, fence, this.clock(), hooks?.inCommit);
    if (committed.replacedBlob) await this.blobs.remove(committed.replacedBlob);
    return { existed: committed.existed, highestToken: committed.highestToken };
  }

  async headObject(bucket: string, key: string): Promise<ObjectInfo> {
    this.assertOpen();
    assertValidObjectKey(key);
    return toObjectInfo(this.metadata.liveRow(bucket, key));
  }

  async getObject(bucket: string, key: string, range?: RangeRequest): Promise<GetObjectResult> {
    this.assertOpen();
    assertValidObjectKey(key);
    for (let attempt = 1; ; attempt++) {
      const row = this.metadata.liveRow(bucket, key);
      const served = resolveRange(range, row.size);
      const handle = await this.blobs.openForRead(row.blob);
      if (handle) {
        // The blob is immutable and the open descriptor keeps it readable after an unlink,
        // so the body is exactly the version described by `row`.
        const body = handle.createReadStream(served ? { start: served.start, end: served.end } : {});
        return served ? { info: toObjectInfo(row), body, range: served } : { info: toObjectInfo(row), body };
      }
      if (this.metadata.currentBlob(bucket, key) === row.blob || attempt >= MAX_READ_ATTEMPTS) {
        throw new Error(`blob ${row.blob} of ${bucket}/${key} is missing from the data directory`);
      }
    }
  }

  async listObjects(input: ListInput): Promise<ListResult> {
    this.assertOpen();
    if (!Number.isSafeInteger(input.maxKeys) || input.maxKeys < 0) {
      throw new DomainError("InvalidArgument", "maxKeys must be a non-negative integer");
    }
    this.metadata.requireBucket(input.bucket);
    // Synchronous from the first seek to the last row: the page is a consistent snapshot.
    const page = listSorted(input, (from) => this.metadata.seek(input.bucket, from));
    return {
      ...page,
      objects: page.objects.map((row) => ({
        key: row.key,
        size: row.size,
        etag: row.etag,
        lastModified: new Date(row.last_modified),
      })),
    };
  }

  /** Also answers for a bucket that no longer exists: its HCTs outlive it. */
  async highestToken(bucket: string, key: string): Promise<number | null> {
    this.assertOpen();
    return this.metadata.highestToken(bucket, key);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.multipartSweep);
  }

  assertOpen(): void {
    if (this.closed) throw new DomainError("ServiceUnavailable", "the fs backend is closed");
  }
}

function assertValidFence(fence: WriteFence): void {
  if (fence && !(Number.isSafeInteger(fence.token) && fence.token >= 0)) {
    throw new DomainError("InvalidArgument", "a fencing token must be a non-negative integer");
  }
}

function toObjectInfo(row: LiveRow): ObjectInfo {
  const metadata = JSON.parse(row.metadata) as ObjectMetadata;
  return {
    key: row.key,
    size: row.size,
    etag: row.etag,
    lastModified: new Date(row.last_modified),
    headers: metadata.headers ?? {},
    userMetadata: metadata.userMetadata ?? {},
    ...(metadata.checksums ? { checksums: metadata.checksums } : {}),
  };
}
