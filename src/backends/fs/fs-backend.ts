import { join } from "node:path";
import type { Readable } from "node:stream";
import { type Clock, systemClock } from "../../core/clock.js";
import { DomainError } from "../../core/errors.js";
import { assertValidBucketName } from "../../core/key-rules.js";
import { memoryBody } from "../../core/memory-body.js";
import { runCommit } from "../../fence/commit-driver.js";
import { type EmbeddedDb, type EmbeddedDomain, embeddedDomain } from "../../sqlite/db.js";
import { assertNonNegative } from "../backend-errors.js";
import { listSorted } from "../list-helper.js";
import { resolveRange } from "../range.js";
import type {
  BucketInfo,
  ByteRange,
  CreateBucketOptions,
  DeleteObjectInput,
  DeleteObjectResult,
  FencedCommit,
  GetObjectResult,
  ListInput,
  ListResult,
  ObjectInfo,
  PutObjectInput,
  PutObjectResult,
  RangeRequest,
  StorageBackend,
  WriteState,
} from "../storage-backend.js";
import { BlobStore } from "./blob-store.js";
import { takeBody } from "./body-intake.js";
import { FsMetadataStore, type FsVersion, type LiveRow, type StoredMetadata } from "./metadata-store.js";
import { FsMultipartMetadata } from "./multipart-metadata.js";
import { FsMultipartStore } from "./multipart-store.js";
import { FsObjectPort } from "./object-port.js";

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
  /** Bodies up to this many bytes are kept in the database row (INLINE_MAX_BYTES by default). */
  inlineMaxBytes?: number;
};

/**
 * Bodies up to this size live in their object's database row: a write is then one durable step
 * (the transaction that also holds the HCT, the lease check and the audit record) instead of a
 * file fsync, a rename, a directory fsync and that transaction. Larger bodies are blob files,
 * whose bytes are written once instead of twice (WAL, then checkpoint). The 4 KiB and 1 MiB
 * rows of `npm run bench` (benchmarks/put-get.ts) measure both sides of it.
 */
export const INLINE_MAX_BYTES = 64 * 1024;

const DAY_MS = 24 * 60 * 60 * 1000;
const DEFAULT_MULTIPART_SWEEP_MS = 10 * 60 * 1000;

/**
 * Opens the filesystem backend: creates its tables and directories, then removes crash
 * leftovers (temp files, unreferenced blobs) before it serves anything.
 */
export async function createFsBackend(options: FsBackendOptions): Promise<FsBackend> {
  const metadata = new FsMetadataStore(options.db);
  const uploads = new FsMultipartMetadata(options.db);
  const blobs = await BlobStore.open(join(options.dataDir, "blobs"));
  // Part blobs of live uploads are referenced too: an upload survives restarts.
  await blobs.sweep((id) => metadata.isBlobReferenced(id) || uploads.isBlobReferenced(id));
  const clock = options.clock ?? systemClock;
  const domain = embeddedDomain(options.db);
  let backend: FsBackend | undefined;
  const port = new FsObjectPort(domain, metadata, blobs, clock);
  const multipart = new FsMultipartStore(uploads, metadata, blobs, port, {
    clock,
    domain,
    maxAgeMs: options.multipartMaxAgeMs ?? DAY_MS,
    assertOpen: () => backend!.assertOpen(),
  });
  backend = new FsBackend(
    metadata,
    blobs,
    clock,
    multipart,
    domain,
    port,
    options.inlineMaxBytes ?? INLINE_MAX_BYTES,
  );
  backend.startMultipartSweep(options.multipartSweepIntervalMs ?? DEFAULT_MULTIPART_SWEEP_MS);
  return backend;
}

// A GET retries when an overwrite unlinks the blob between reading the row and opening the
// file. Each retry needs a fresh overwrite to lose again; the bound only stops a live-lock.
const MAX_READ_ATTEMPTS = 100;

/**
 * The embedded default backend. Bytes: immutable blob files (BlobStore). Metadata and HCTs:
 * SQLite rows (FsMetadataStore). A write stores its blob first, then commits the row in one
 * step of the database's domain that applies the HCT rule, the conditions and the commit's
 * atomic part (the lease check and the audit record, when those share the database); the blob
 * it replaced is unlinked afterwards. A refused or failed write removes its own blob and
 * changes no row.
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
    readonly domain: EmbeddedDomain,
    /** The backend as the commit driver sees it (src/fence/commit-port.ts). */
    readonly port: FsObjectPort,
    private readonly inlineMaxBytes: number = INLINE_MAX_BYTES,
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

  async createBucket(bucket: string, opts: CreateBucketOptions = {}): Promise<void> {
    this.assertOpen();
    assertValidBucketName(bucket);
    if (!this.metadata.createBucket(bucket, this.clock(), opts.location)) {
      throw new DomainError("BucketAlreadyOwnedByYou", "you already own this bucket", { bucket });
    }
  }

  async bucketLocation(bucket: string): Promise<string> {
    this.assertOpen();
    return this.metadata.bucketLocation(bucket);
  }

  async headBucket(bucket: string): Promise<BucketInfo> {
    this.assertOpen();
    return this.metadata.requireBucket(bucket);
  }

  async deleteBucket(bucket: string): Promise<void> {
    this.assertOpen();
    await this.domain.run(() => this.metadata.deleteBucket(bucket));
  }

  async writeState(bucket: string, key: string): Promise<WriteState> {
    this.assertOpen();
    return this.metadata.writeState(bucket, key);
  }

  async putObject(input: PutObjectInput, commit: FencedCommit): Promise<PutObjectResult> {
    this.assertOpen();
    const { bucket, key, body } = input;
    // No await before this call: the body must be read (and its errors listened to) at once.
    // A write staged in a transaction holds a small body in memory until the transaction ends
    // only within the gateway's budget for all open transactions; beyond it, in a blob file.
    const inlineMax =
      !commit.transaction || commit.transaction.holdInMemory(this.inlineMaxBytes) ? this.inlineMaxBytes : 0;
    const taken = await takeBody(body.stream, inlineMax, this.blobs);
    const version: FsVersion = {
      body: taken.inline !== undefined ? { inline: taken.inline } : { blob: taken.blob },
      size: taken.size,
      etag: `"${taken.md5Hex}"`,
      lastModified: this.clock(),
      metadata: input.metadata,
    };
    try {
      const { checksums } = await body.digest;
      if (Object.keys(checksums).length > 0) version.metadata = { ...input.metadata, checksums };
    } catch (e) {
      await this.port.discard({ bucket, key }, version);
      throw e;
    }
    const done = await runCommit(this.port, { bucket, key }, { op: "put", version }, commit);
    return {
      etag: version.etag,
      size: taken.size,
      lastModified: new Date(version.lastModified),
      highestToken: done.highestToken,
      checksums: version.metadata.checksums ?? {},
    };
  }

  async deleteObject(input: DeleteObjectInput, commit: FencedCommit): Promise<DeleteObjectResult> {
    this.assertOpen();
    const done = await runCommit(this.port, input, { op: "delete" }, commit);
    return { existed: done.before.etag !== null, highestToken: done.highestToken };
  }

  async raiseHighestToken(bucket: string, key: string, token: number): Promise<number> {
    this.assertOpen();
    const done = await runCommit(this.port, { bucket, key }, { op: "raise", token });
    return done.highestToken ?? token;
  }

  async headObject(bucket: string, key: string): Promise<ObjectInfo> {
    this.assertOpen();
    return toObjectInfo(this.metadata.liveRow(bucket, key));
  }

  async readStaged(
    _bucket: string,
    key: string,
    staged: unknown,
    range?: RangeRequest,
  ): Promise<GetObjectResult> {
    this.assertOpen();
    const version = staged as FsVersion;
    const served = resolveRange(range, version.size);
    const info = infoOf(key, version.size, version.etag, version.lastModified, version.metadata);
    const inline = version.body.inline;
    const body =
      inline !== undefined ? inlineBody(inline, served) : await this.blobBody(version.body.blob, served);
    // Discarded meanwhile (the transaction ended): the read sees what a read outside it sees.
    if (!body) throw new DomainError("NoSuchKey", "The specified key does not exist.", { Key: key });
    return served ? { info, body, range: served } : { info, body };
  }

  /**
   * A blob's bytes (or the served range of them), null when the blob file is gone. The blob is
   * immutable and the open descriptor keeps it readable after an unlink.
   */
  private async blobBody(blob: string, served: ByteRange | undefined): Promise<Readable | null> {
    const handle = await this.blobs.openForRead(blob);
    return handle
      ? handle.createReadStream({
          highWaterMark: READ_CHUNK_BYTES,
          ...(served ? { start: served.start, end: served.end } : {}),
        })
      : null;
  }

  async getObject(bucket: string, key: string, range?: RangeRequest): Promise<GetObjectResult> {
    this.assertOpen();
    for (let attempt = 1; ; attempt++) {
      const row = this.metadata.readRow(bucket, key);
      const served = resolveRange(range, row.size);
      const info = toObjectInfo(row);
      // Inline: the bytes came with the row, in the same read. A blob: exactly the version
      // described by `row`, even if an overwrite unlinks it once opened.
      const body =
        row.blob === null
          ? inlineBody(row.inline_data ?? Buffer.alloc(0), served)
          : await this.blobBody(row.blob, served);
      if (body) return served ? { info, body, range: served } : { info, body };
      if (this.metadata.currentBlob(bucket, key) === row.blob || attempt >= MAX_READ_ATTEMPTS) {
        throw new Error(`blob ${row.blob} of ${bucket}/${key} is missing from the data directory`);
      }
    }
  }

  async listObjects(input: ListInput): Promise<ListResult> {
    this.assertOpen();
    assertNonNegative("maxKeys", input.maxKeys);
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

/**
 * Blob files are read 256 KiB at a time (the default is 64 KiB): a quarter of the reads and of
 * the socket writes for a large GET, for at most two such chunks held per download.
 */
const READ_CHUNK_BYTES = 256 * 1024;

function toObjectInfo(row: LiveRow): ObjectInfo {
  return infoOf(row.key, row.size, row.etag, row.last_modified, JSON.parse(row.metadata) as StoredMetadata);
}

function infoOf(
  key: string,
  size: number,
  etag: string,
  lastModified: number,
  metadata: StoredMetadata,
): ObjectInfo {
  return {
    key,
    size,
    etag,
    lastModified: new Date(lastModified),
    headers: metadata.headers ?? {},
    userMetadata: metadata.userMetadata ?? {},
    ...(metadata.checksums ? { checksums: metadata.checksums } : {}),
  };
}

const inlineBody = (data: Buffer, served: ByteRange | undefined): Readable =>
  memoryBody(served ? data.subarray(served.start, served.end + 1) : data);
