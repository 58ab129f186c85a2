import { type Clock, systemClock } from "../../core/clock.js";
import { DomainError } from "../../core/errors.js";
import { assertValidBucketName } from "../../core/key-rules.js";
import { MemoryDomain } from "../../core/tx.js";
import { runCommit } from "../../fence/commit-driver.js";
import { assertNonNegative } from "../backend-errors.js";
import { listSorted } from "../list-helper.js";
import { resolveRange } from "../range.js";
import type {
  BucketInfo,
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
import { closed } from "./errors.js";
import { bufferBody, snapshotStream } from "./memory-body.js";
import { MemoryMultipartStore } from "./memory-multipart.js";
import { type LiveObject, MemoryObjects, type MemoryVersion, type StoredMetadata } from "./memory-objects.js";
import { MemoryObjectPort } from "./object-port.js";

export type MemoryBackendOptions = {
  /**
   * The domain of the backend's atomic steps. Pass the one a memory lease store and audit log
   * use, so the fencing core runs their checks and records inside the backend's commit step.
   * Default: a domain of its own.
   */
  domain?: MemoryDomain;
  clock?: Clock;
  /** Multipart uploads initiated longer ago than this are aborted by sweepAbandoned(). Default 24 h. */
  multipartMaxAgeMs?: number;
};

const DAY_MS = 24 * 60 * 60 * 1000;

export function createMemoryBackend(options: MemoryBackendOptions = {}): MemoryBackend {
  return new MemoryBackend(options);
}

/**
 * A storage backend kept in one process's memory, for tests and single-process trials: nothing
 * survives the process. It follows the fs backend's rules exactly. A write first reads and
 * verifies its whole body, then runs `prepare`, then commits in one step of its MemoryDomain
 * that applies the HCT rule, the conditions and the commit's atomic part before the change.
 * Stored bytes are never modified, so a GET streams the version it found to its end.
 */
export class MemoryBackend implements StorageBackend {
  readonly kind = "memory";
  readonly domain: MemoryDomain;
  readonly multipart: MemoryMultipartStore;
  private readonly objects: MemoryObjects;
  /** The backend as the commit driver sees it (src/fence/commit-port.ts). */
  readonly port: MemoryObjectPort;
  private readonly clock: Clock;
  private closed = false;

  constructor(options: MemoryBackendOptions = {}) {
    this.domain = options.domain ?? new MemoryDomain();
    this.clock = options.clock ?? systemClock;
    this.objects = new MemoryObjects(this.domain);
    this.port = new MemoryObjectPort(this.domain, this.objects);
    this.multipart = new MemoryMultipartStore(this.objects, this.port, {
      clock: this.clock,
      domain: this.domain,
      maxAgeMs: options.multipartMaxAgeMs ?? DAY_MS,
      assertOpen: () => this.assertOpen(),
    });
  }

  async listBuckets(): Promise<BucketInfo[]> {
    this.assertOpen();
    return this.objects.buckets();
  }

  async createBucket(bucket: string, opts: CreateBucketOptions = {}): Promise<void> {
    this.assertOpen();
    assertValidBucketName(bucket);
    const now = this.clock();
    if (!(await this.domain.run(() => this.objects.createBucket(bucket, now, opts.location)))) {
      throw new DomainError("BucketAlreadyOwnedByYou", "you already own this bucket", { bucket });
    }
  }

  async bucketLocation(bucket: string): Promise<string> {
    this.assertOpen();
    return this.objects.bucketLocation(bucket);
  }

  async headBucket(bucket: string): Promise<BucketInfo> {
    this.assertOpen();
    return this.objects.requireBucket(bucket);
  }

  async deleteBucket(bucket: string): Promise<void> {
    this.assertOpen();
    await this.domain.run(() => this.objects.deleteBucket(bucket));
  }

  async writeState(bucket: string, key: string): Promise<WriteState> {
    this.assertOpen();
    return this.objects.writeState(bucket, key);
  }

  async putObject(input: PutObjectInput, commit: FencedCommit): Promise<PutObjectResult> {
    this.assertOpen();
    const { bucket, key, body } = input;
    // No await before this call: the body must be read (and its errors listened to) at once.
    const stored = await bufferBody(body.stream);
    const etag = `"${stored.md5Hex}"`;
    const lastModified = this.clock();
    const { checksums } = await body.digest;
    const metadata: StoredMetadata = {
      ...structuredClone(input.metadata),
      ...(Object.keys(checksums).length > 0 ? { checksums: { ...checksums } } : {}),
    };
    const version: MemoryVersion = { bytes: stored.bytes, size: stored.size, etag, lastModified, metadata };
    const done = await runCommit(this.port, { bucket, key }, { op: "put", version }, commit);
    return {
      etag,
      size: stored.size,
      lastModified: new Date(lastModified),
      highestToken: done.highestToken,
      checksums: { ...checksums },
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
    return toObjectInfo(key, this.objects.live(bucket, key));
  }

  async readStaged(
    _bucket: string,
    key: string,
    staged: unknown,
    range?: RangeRequest,
  ): Promise<GetObjectResult> {
    this.assertOpen();
    const version = staged as MemoryVersion;
    const served = resolveRange(range, version.size);
    const info = toObjectInfo(key, version);
    if (!served) return { info, body: snapshotStream(version.bytes) };
    return { info, body: snapshotStream(version.bytes, served.start, served.end), range: served };
  }

  async getObject(bucket: string, key: string, range?: RangeRequest): Promise<GetObjectResult> {
    this.assertOpen();
    const live = this.objects.live(bucket, key);
    const served = resolveRange(range, live.size);
    const info = toObjectInfo(key, live);
    if (!served) return { info, body: snapshotStream(live.bytes) };
    return { info, body: snapshotStream(live.bytes, served.start, served.end), range: served };
  }

  async listObjects(input: ListInput): Promise<ListResult> {
    this.assertOpen();
    assertNonNegative("maxKeys", input.maxKeys);
    this.objects.requireBucket(input.bucket);
    const page = listSorted(input, this.objects.seeker(input.bucket));
    return {
      ...page,
      objects: page.objects.map((row) => ({
        key: row.key,
        size: row.size,
        etag: row.etag,
        lastModified: new Date(row.lastModified),
      })),
    };
  }

  /** Also answers for a bucket that no longer exists: its HCTs outlive it. */
  async highestToken(bucket: string, key: string): Promise<number | null> {
    this.assertOpen();
    return this.objects.highestToken(bucket, key);
  }

  async close(): Promise<void> {
    this.closed = true;
  }

  assertOpen(): void {
    if (this.closed) throw closed();
  }
}

function toObjectInfo(key: string, live: LiveObject): ObjectInfo {
  const { headers, userMetadata, checksums } = structuredClone(live.metadata);
  return {
    key,
    size: live.size,
    etag: live.etag,
    lastModified: new Date(live.lastModified),
    headers: headers ?? {},
    userMetadata: userMetadata ?? {},
    ...(checksums ? { checksums } : {}),
  };
}
