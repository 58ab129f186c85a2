import { DomainError } from "../../core/errors.js";
import { assertValidBucketName } from "../../core/key-rules.js";
import { noWritesInFlight } from "../../fence/bucket-deletion.js";
import { runCommit } from "../../fence/commit-driver.js";
import type { TransactionLog } from "../../fence/commit-port.js";
import { noSuchKey } from "../backend-errors.js";
import { resolveRange } from "../range.js";
import type {
  BucketInfo,
  CreateBucketOptions,
  DeleteObjectInput,
  DeleteObjectResult,
  FencedCommit,
  GetObjectResult,
  InFlightWrites,
  ListInput,
  ListResult,
  ObjectInfo,
  PutObjectInput,
  PutObjectResult,
  RangeRequest,
  StorageBackend,
  SystemRecords,
  WriteState,
} from "../storage-backend.js";
import { writeBlob } from "./blob-writer.js";
import { BucketOps } from "./buckets.js";
import { type CapabilityReport, verifyConditionalWrites } from "./capability.js";
import type { S3Context } from "./context.js";
import { collectGarbage, type GarbageReport } from "./garbage.js";
import { BLOB_META, encodeKey } from "./layout.js";
import type { ObjectListing } from "./object-listing.js";
import { observedOf, type S3ObjectPort } from "./object-port.js";
import type { ResolvedOptions } from "./options.js";
import { type LiveVersion, liveOf } from "./records.js";
import type { S3MultipartStore } from "./s3-multipart.js";
import { s3SystemRecords } from "./system-records.js";
import type { UploadStore } from "./upload-store.js";

/**
 * The S3 backend: fencegate on Amazon S3 or any S3-compatible store that honours conditional
 * writes (If-None-Match: * and If-Match on PutObject and CompleteMultipartUpload).
 *
 * Why not condition on the data object: S3's ETag is the MD5 of the bytes. Metadata does not
 * change it and equal bytes give equal ETags, so If-Match on a user's object is not a
 * compare-and-swap: a write that read ETag E, paused while two newer writes landed (the last
 * one with the same bytes), would find E again and overwrite the newest commit (ABA).
 *
 * The layout (layout.ts), inside every store bucket, under the meta prefix `<m>` (`.fencegate/`):
 * - `<m>r/<key>`: the key's RECORD, small JSON: {v, key, hct, nonce, state, live?, written, w,
 *   h, gc?}. The record is the commit point. Every write of it carries a fresh random nonce, so
 *   its store ETag is unique per write: creating it with If-None-Match: * and replacing it with
 *   If-Match on the ETag read is a true CAS. `w` is the id of the write that made it and `h` the
 *   ids of the writes before it (the last WRITE_HISTORY): how a write whose answer was lost is
 *   recognised. Records list in key order. Keys too long for `<m>r/` (more than 1024 bytes with
 *   it) have theirs at `<m>l/<sha256>`, merged into listings in memory.
 * - `<m>d/<blob id>`: immutable DATA blobs, written before the commit, never overwritten, with
 *   the object key (base64url) in their user metadata so the collector can find the record, and
 *   their staging time in their id. A record's `live` names its blob, size, the ETag fencegate
 *   reports (MD5 hex, or `md5-N` for a multipart completion), lastModified, headers, user
 *   metadata and checksums.
 * - `<m>u/...`: multipart uploads (s3-multipart.ts); `<m>p/...`: capability probes;
 *   `<m>deleted`: the bucket's deletion marker (bucket-marker.ts, buckets.ts).
 * Record states: "live" (bytes in a blob), "deleted" (a tombstone: the HCT stays, and a plain
 * object at the key is hidden, not deleted), "plain" (an HCT only: the bytes are the plain
 * object, when there is one).
 *
 * Objects written before fencegate (no record; a plain object at `<key>` itself) are readable,
 * listable and conditionally writable through fencegate with the store's ETag, and fenced from
 * their first fenced write, which creates a record. fencegate never deletes bytes it did not
 * write, nor a store bucket.
 *
 * A write: stream the body to a new blob with bounded memory (blob-writer.ts), await the body's
 * verification, then the commit driver (src/fence/commit-driver.ts) over this backend's port
 * (object-port.ts): prepare (the lease check through a commit intent: this backend has no
 * domain), the record read, the bucket's marker, the HCT rule and the conditions, one
 * conditional record PUT; a lost race reads again; a lost answer is learnt from the record's
 * write history, or thrown as an unknown outcome that the fencing core settles later. After the
 * commit the replaced blob is deleted (best effort); a refused write deletes its new blob. What a
 * crash, a lost answer or a failed delete leaves (unreferenced blobs, abandoned uploads) is
 * removed by collectGarbage (garbage.ts) after a grace period, through a mark on the record that
 * no later commit can pass (so a slow commit never points at a collected blob).
 *
 * Reads resolve through the record: live → the blob (if a newer commit replaced and deleted it
 * meanwhile, read the record again); deleted → NoSuchKey; plain or no record → the plain object.
 *
 * Fenced transactions (src/transactions/cas-transactions.ts): a write of a transaction stages
 * its blob as any put does, then sets the record's `p` (pending: the transaction, its token, the
 * change) beside the live state, which stays; the transaction's record `<m>t/<id>` is its commit
 * point. A reader that finds `p` asks that record: committed (and listing this write) → the
 * pending change is what it serves (and rolls it forward in the store, in the background);
 * otherwise the live state. A writer resolves `p` first (commit-driver.ts resolvePending).
 * Listings merge records and plain objects in key order (object-listing.ts), records winning,
 * with parsed records cached by their ETag.
 *
 * Before the first write the backend checks that the store honours conditional writes
 * (capability.ts); a store that does not gets every write refused with ServiceUnavailable and
 * a one-line reason, never a silent downgrade. Store failures are S3 errors (store-errors.ts):
 * throttling is SlowDown with `retryAfterSeconds`, an unreachable or timed-out store is
 * ServiceUnavailable, a missing bucket NoSuchBucket; every request has a time limit.
 */
export class S3Backend implements StorageBackend {
  readonly kind = "s3";
  private readonly buckets: BucketOps;
  private gcTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly ctx: S3Context,
    readonly multipart: S3MultipartStore,
    private readonly uploads: UploadStore,
    private readonly listing: ObjectListing,
    /** The backend as the commit driver sees it (src/fence/commit-port.ts). */
    readonly port: S3ObjectPort,
    private readonly opts: ResolvedOptions,
  ) {
    this.buckets = new BucketOps(ctx, port);
  }

  get reservedKeyPrefix(): string {
    return this.ctx.layout.meta;
  }

  systemRecords(bucket: string): SystemRecords {
    return s3SystemRecords(this.ctx, bucket);
  }

  /** Runs collectGarbage every `intervalMs` (0: never). */
  startGarbageCollection(intervalMs: number): void {
    if (intervalMs <= 0 || this.gcTimer) return;
    this.gcTimer = setInterval(() => {
      // A failed pass leaves its garbage for the next one; nothing depends on it.
      if (!this.ctx.closed) this.collectGarbage().catch(() => undefined);
    }, intervalMs);
    this.gcTimer.unref();
  }

  // ---- buckets ----

  async listBuckets(): Promise<BucketInfo[]> {
    this.ctx.assertOpen();
    return this.buckets.list();
  }

  async createBucket(bucket: string, opts: CreateBucketOptions = {}): Promise<void> {
    this.ctx.assertOpen();
    assertValidBucketName(bucket);
    await this.buckets.create(bucket, opts.location);
  }

  async bucketLocation(bucket: string): Promise<string> {
    this.ctx.assertOpen();
    return this.buckets.location(bucket);
  }

  async headBucket(bucket: string): Promise<BucketInfo> {
    this.ctx.assertOpen();
    return this.buckets.head(bucket);
  }

  async deleteBucket(bucket: string, inFlight: InFlightWrites = noWritesInFlight): Promise<void> {
    this.ctx.assertOpen();
    await this.buckets.delete(bucket, inFlight);
  }

  // ---- objects ----

  async writeState(bucket: string, key: string): Promise<WriteState> {
    this.ctx.assertOpen();
    // No look for a plain object at the key (a HEAD): only write conditions and deletes need its
    // ETag, and the commit looks then (Observed.etagUnknown).
    const current = await this.ctx.current(bucket, key, { plain: false, checkBucket: true, latest: true });
    const plainUnseen = current.record === null || current.record.state === "plain";
    const observed = {
      ...observedOf(current.read, null, false),
      ...(current.cached ? { cached: true } : {}),
      ...(plainUnseen ? { etagUnknown: true } : {}),
    };
    return {
      highestToken: current.record?.hct ?? null,
      etag: current.liveEtag,
      early: { ref: { bucket, key }, observed },
    };
  }

  async putObject(input: PutObjectInput, commit: FencedCommit): Promise<PutObjectResult> {
    this.ctx.assertOpen();
    const { bucket, key, body } = input;
    const blob = this.ctx.layout.newBlobId();
    // No await before this call: the body must be read (and its errors listened to) at once.
    const stored = await writeBlob(this.ctx.store, bucket, this.ctx.layout.blobName(blob), body.stream, {
      partSize: this.opts.partSizeBytes,
      metadata: { [BLOB_META.key]: encodeKey(key), [BLOB_META.kind]: "object" },
      signal: commit.signal,
    });
    let version: LiveVersion;
    try {
      const { checksums } = await body.digest;
      version = {
        blob,
        size: stored.size,
        etag: `"${stored.md5Hex}"`,
        lastModified: this.ctx.clock(),
        metadata: {
          headers: { ...input.metadata.headers },
          userMetadata: { ...input.metadata.userMetadata },
        },
        ...(Object.keys(checksums).length > 0 ? { checksums: { ...checksums } } : {}),
      };
      await this.ctx.hooks?.("blob-stored", { op: "put", bucket, key, attempt: 0 });
      await this.ctx.gate.require(bucket);
    } catch (e) {
      await this.ctx.removeBlob(bucket, blob);
      throw e;
    }
    const done = await runCommit(this.port, { bucket, key }, { op: "put", version }, commit);
    return {
      etag: version.etag,
      size: version.size,
      lastModified: new Date(version.lastModified),
      highestToken: done.highestToken,
      checksums: { ...(version.checksums ?? {}) },
    };
  }

  async deleteObject(input: DeleteObjectInput, commit: FencedCommit): Promise<DeleteObjectResult> {
    this.ctx.assertOpen();
    const { bucket, key } = input;
    await this.ctx.gate.require(bucket);
    const done = await runCommit(this.port, { bucket, key }, { op: "delete" }, commit);
    return { existed: done.before.etag !== null, highestToken: done.highestToken };
  }

  async raiseHighestToken(bucket: string, key: string, token: number): Promise<number> {
    this.ctx.assertOpen();
    if (!(Number.isSafeInteger(token) && token >= 0)) {
      throw new DomainError("InvalidArgument", "a fencing token must be a non-negative integer");
    }
    try {
      return await this.raise(bucket, key, token);
    } catch (e) {
      if (!(e instanceof DomainError && e.code === "NoSuchBucket")) throw e;
    }
    // The HCT must outlive a bucket that is gone from the store (or not created yet): a commit
    // paused before the bucket went would otherwise land in a bucket created again. Keep it in a
    // store bucket deleted for fencegate, which createBucket turns into the bucket, HCTs and all.
    await this.buckets.keepForHcts(bucket);
    return this.raise(bucket, key, token);
  }

  private async raise(bucket: string, key: string, token: number): Promise<number> {
    await this.ctx.gate.require(bucket);
    // A bucket deleted for fencegate keeps its records: its HCTs are raised all the same.
    const done = await runCommit(this.port, { bucket, key }, { op: "raise", token });
    return done.highestToken ?? token;
  }

  /**
   * The same state again under a new write id: a commit in flight over the state before can no
   * longer land (bucket deletion, the settlement of an unknown outcome).
   */
  async touch(bucket: string, key: string): Promise<void> {
    this.ctx.assertOpen();
    await runCommit(this.port, { bucket, key }, { op: "touch" });
  }

  async headObject(bucket: string, key: string): Promise<ObjectInfo> {
    this.ctx.assertOpen();
    const current = await this.ctx.current(bucket, key, { plain: true, checkBucket: true, visible: true });
    const live = liveOf(current.record);
    if (live) return infoOf(key, live);
    if (current.record?.state === "deleted" || !current.plain) throw noSuchKey(bucket, key);
    return { key, ...plainInfo(current.plain) };
  }

  async getObject(
    bucket: string,
    key: string,
    range?: RangeRequest,
    signal?: AbortSignal,
  ): Promise<GetObjectResult> {
    this.ctx.assertOpen();
    // A retry needs a fresh overwrite to lose again; the bound only stops a live-lock.
    for (let attempt = 1; attempt <= 100; attempt++) {
      const current = await this.ctx.current(bucket, key, {
        plain: false,
        checkBucket: true,
        signal,
        visible: true,
      });
      const { record } = current;
      if (record?.state === "deleted") throw noSuchKey(bucket, key);
      const live = liveOf(record);
      if (live) {
        const served = resolveRange(range, live.size);
        const got = await this.ctx.store.getStream(bucket, this.ctx.layout.blobName(live.blob), {
          ...(served ? { range: served } : {}),
          ...(signal ? { signal } : {}),
        });
        if (got) return { info: infoOf(key, live), body: got.body, ...(served ? { range: served } : {}) };
        // The blob is gone: a newer commit replaced it and deleted it. Read the record again.
        const now = await this.ctx.records.read(bucket, key, signal);
        if (now?.etag === current.read?.etag) {
          throw new Error(`blob ${live.blob} of ${bucket}/${key} is missing from the store`);
        }
        continue;
      }
      const got = await this.getPlain(bucket, key, range, signal);
      if (got === "changed") continue;
      return got;
    }
    throw new DomainError("SlowDown", `${bucket}/${key} changes too often to be read; please retry`, {
      retryAfterSeconds: 1,
    });
  }

  /**
   * What a read inside fenced transaction `version.transaction` sees: the write it staged at the
   * key (a put's version; NoSuchKey for a delete), else what any read sees.
   */
  async readStaged(
    bucket: string,
    key: string,
    version: unknown,
    range?: RangeRequest,
  ): Promise<GetObjectResult> {
    this.ctx.assertOpen();
    const id = (version as { transaction?: unknown } | null)?.transaction;
    if (typeof id !== "string") throw new Error("an S3 backend's staged read names its transaction");
    const p = (await this.ctx.records.read(bucket, key))?.record.p;
    if (!p || p.tx !== id) return this.getObject(bucket, key, range);
    if (p.kind === "delete" || !p.live) throw noSuchKey(bucket, key);
    const served = resolveRange(range, p.live.size);
    const got = await this.ctx.store.getStream(bucket, this.ctx.layout.blobName(p.live.blob), {
      ...(served ? { range: served } : {}),
    });
    // Gone: the pending write was dropped or replaced meanwhile; the read sees what others see.
    if (!got) return this.getObject(bucket, key, range);
    return { info: infoOf(key, p.live), body: got.body, ...(served ? { range: served } : {}) };
  }

  /** The records of the bucket's fenced transactions (their commit points). */
  transactionLog(bucket: string): TransactionLog {
    this.ctx.assertOpen();
    return this.port.transactions(bucket);
  }

  /** The plain object at the key (no record, or a "plain" one). "changed" when it changed mid-read. */
  private async getPlain(
    bucket: string,
    key: string,
    range: RangeRequest | undefined,
    signal: AbortSignal | undefined,
  ): Promise<GetObjectResult | "changed"> {
    if (!range) {
      const got = await this.ctx.store.getStream(bucket, key, signal ? { signal } : {});
      if (!got) throw noSuchKey(bucket, key);
      return { info: { key, ...plainInfo(got) }, body: got.body };
    }
    // A range is resolved against the size, as S3 would: read the size first, then that version.
    const head = await this.ctx.store.head(bucket, key, signal);
    if (!head) throw noSuchKey(bucket, key);
    const served = resolveRange(range, head.size);
    const got = await this.ctx.store.getStream(bucket, key, {
      ...(served ? { range: served } : {}),
      ifMatch: head.etag,
      ...(signal ? { signal } : {}),
    });
    if (!got) return "changed";
    return { info: { key, ...plainInfo(got) }, body: got.body, ...(served ? { range: served } : {}) };
  }

  async listObjects(input: ListInput): Promise<ListResult> {
    this.ctx.assertOpen();
    if (!Number.isSafeInteger(input.maxKeys) || input.maxKeys < 0) {
      throw new DomainError("InvalidArgument", "maxKeys must be a non-negative integer");
    }
    await this.ctx.requireBucket(input.bucket);
    return this.listing.list(input);
  }

  /** Also answers for a bucket that no longer exists: null, as nothing fenced is left there. */
  async highestToken(bucket: string, key: string): Promise<number | null> {
    // A committed transaction's write not yet rolled forward has set the HCT already.
    const record = await this.recordOf(bucket, key);
    return (record?.p ? await this.ctx.visible(bucket, record) : record)?.hct ?? null;
  }

  async writeNote(bucket: string, key: string): Promise<string | null> {
    return (await this.recordOf(bucket, key))?.a ?? null;
  }

  /** The object's record; null when there is none, or no bucket. */
  private async recordOf(bucket: string, key: string) {
    this.ctx.assertOpen();
    try {
      return (await this.ctx.records.read(bucket, key))?.record ?? null;
    } catch (e) {
      if (e instanceof DomainError && e.code === "NoSuchBucket") return null;
      throw e;
    }
  }

  // ---- maintenance ----

  /**
   * Probes whether the store honours conditional writes, in `bucket` (default: the verify bucket,
   * a scratch bucket created when missing). NoSuchBucket for another bucket that is missing.
   */
  async verifyConditionalWrites(bucket?: string): Promise<CapabilityReport> {
    const target = bucket ?? this.opts.verifyBucket;
    if (target === undefined)
      throw new Error("verifyConditionalWrites needs a bucket (or the verifyBucket option)");
    if (target === this.opts.verifyBucket && (await this.ctx.store.bucketState(target)) === "missing") {
      await this.ctx.store.createBucket(target);
    }
    return verifyConditionalWrites(this.ctx.store, this.ctx.layout, target);
  }

  /**
   * Removes blobs older than the grace period (default: the gcGraceMs option) that no record and
   * no part manifest references, orphaned part manifests, and uploads older than
   * multipartMaxAgeMs. Every store bucket, or the ones given.
   */
  async collectGarbage(options: { graceMs?: number; buckets?: string[] } = {}): Promise<GarbageReport> {
    this.ctx.assertOpen();
    await this.ctx.flushReplaced();
    const buckets = options.buckets ?? (await this.ctx.store.listBuckets()).map((b) => b.name);
    const report = await collectGarbage(
      this.ctx,
      this.port,
      this.uploads,
      buckets,
      options.graceMs ?? this.opts.gcGraceMs,
    );
    report.uploads = (await this.multipart.sweepAbandoned({ buckets })).removed;
    return report;
  }

  /** Removes now the replaced blobs that wait to be removed together (S3Context.removeReplaced). */
  async flushReplaced(): Promise<void> {
    if (!this.ctx.closed) await this.ctx.flushReplaced();
  }

  async close(): Promise<void> {
    if (this.ctx.closed) return;
    this.ctx.closed = true;
    clearInterval(this.gcTimer);
    // Replaced blobs still waiting: removed now, for a moment at most (a store that does not
    // answer must not hold the shutdown; what stays is the collector's).
    let bound: NodeJS.Timeout | undefined;
    await Promise.race([
      this.ctx.flushReplaced(),
      new Promise<void>((resolve) => {
        bound = setTimeout(resolve, CLOSE_FLUSH_MS);
      }),
    ]);
    clearTimeout(bound);
    this.ctx.store.destroy();
  }
}

/** How long close() waits for the removal of replaced blobs. */
const CLOSE_FLUSH_MS = 1_000;

function infoOf(key: string, live: LiveVersion): ObjectInfo {
  return {
    key,
    size: live.size,
    etag: live.etag,
    lastModified: new Date(live.lastModified),
    headers: { ...live.metadata.headers },
    userMetadata: { ...live.metadata.userMetadata },
    ...(live.checksums ? { checksums: { ...live.checksums } } : {}),
  };
}

function plainInfo(o: {
  etag: string;
  size: number;
  lastModified: Date;
  metadata: Record<string, string>;
  headers: ObjectInfo["headers"];
}): Omit<ObjectInfo, "key"> {
  return {
    size: o.size,
    etag: o.etag,
    lastModified: o.lastModified,
    headers: o.headers,
    userMetadata: o.metadata,
  };
}
