/**
 * The Azure Blob Storage backend (and ADLS Gen2 through its Blob endpoint).
 *
 * DESIGN
 *
 * Layout. A gateway bucket is the container of the same name. The object `<key>` is the block
 * blob `<key>`: its bytes are the object's bytes, and its metadata holds fencegate's state
 * (blob-state.ts): `fencegate` = base64url JSON {HCT, S3 ETag, headers, user metadata,
 * checksums, write id}, plus `fencegate_hct` and `fencegate_tombstone` for people and tools
 * reading the container directly. The blob's Content-Type, -Encoding, -Disposition, -Language,
 * Cache-Control and Content-MD5 are set too, for direct readers. A deleted object is a tombstone:
 * a zero-length blob at the same name whose state says deleted and keeps the HCT. fencegate's own
 * blobs (multipart uploads) live under the meta prefix (default `.fencegate/`), which object keys
 * may not use. A deleted bucket's container stays, marked with the container metadata
 * `fencegate_deleted`, because its tombstones hold HCTs that must outlive the bucket.
 *
 * Commits. Azure changes a blob's ETag on every write, metadata included, so a conditional call
 * is a true compare-and-swap. Every write (PutObject, CompleteMultipartUpload, DeleteObject,
 * raiseHighestToken) reads the blob's properties, applies the HCT rule and the write conditions
 * to the state it read, and commits with ONE conditional call: Put Blob (a body that fits in one
 * block, kept in memory), Put Block List (a longer body, staged beforehand as blocks with unique
 * ids on the same blob), or Set Blob Metadata (an HCT raise), with `If-Match: <ETag read>` or
 * `If-None-Match: *` when there was no blob. A concurrent commit in between changes the ETag, the
 * call fails (412 / 409), nothing changes, and the loop reads again (bounded, jittered). So the
 * HCT check and the commit are one atomic step on the store (rule 3), a refused write changes
 * nothing (rule 5), and the HCT never decreases (rule 2): every state written carries
 * max(HCT read, token) and only lands over the state it was computed from.
 *
 * Staged blocks. Put Block has no conditions; staged blocks are invisible and change nothing.
 * But a successful commit of a blob (Put Blob or Put Block List) discards every uncommitted block
 * of that blob, so a large write whose blocks a concurrent commit to the same key discarded gets
 * InvalidBlockList: it is refused with SlowDown (retryable), or StaleFencingToken when the
 * concurrent commit raised the HCT above its token. It never changes anything. Blocks of a write
 * that never commits stay until the blob's next commit, or 7 days (Azure's garbage collection).
 *
 * Deletes leave a tombstone whenever the object has an HCT, so a stale writer's create
 * (`If-None-Match: *`) finds a blob and its HCT; an unfenced delete of an object without HCT
 * removes the blob (Delete Blob, If-Match), and of a missing key writes nothing.
 *
 * Adoption. A blob written without fencegate (no `fencegate` metadata) is a live object: its
 * ETag is its Content-MD5 when Azure has one, else Azure's ETag (`"0x8D…"`, changing on every
 * write); its Azure metadata is its user metadata, its blob properties its headers. Its first
 * fenced write (or HCT raise) makes it fenced. A blob whose `fencegate` metadata cannot be read
 * is refused with InternalError, never read as unfenced (that would drop its HCT).
 *
 * Listings read List Blobs pages (with metadata) and hide tombstones, directory markers and the
 * meta prefix; S3 order and pagination: blob-cursor.ts, list-sorted-async.ts.
 *
 * Buckets: containers. A container's name must follow Azure's rules (no dots, no "--"), which are
 * stricter than S3's. deleteBucket refuses while a live object exists, aborts the uploads, and
 * marks the container deleted; createBucket on a marked container clears the mark, so the HCTs
 * of its tombstones still hold. Every operation on a bucket checks the mark (one Get Container
 * Properties, in parallel with the object read). Containers are never deleted by fencegate: a
 * paused write can land in a container after its bucket was deleted, and would then be lost with
 * its HCT; with the container kept, it stays, invisible until the bucket is created again.
 *
 * ADLS Gen2 (hierarchical namespace) through the Blob endpoint. fencegate writes only with Put
 * Blob, Put Block (List) and Set Blob Metadata, and its compare-and-swap works the same there.
 * A file created through the DFS endpoint cannot be written with Put Block / Put Block List
 * (Azure answers 409 BlobOperationNotSupported, mapped to InvalidRequest with an explanation);
 * Put Blob works, so such a file can be overwritten with a body up to blockSizeBytes, deleted
 * (a tombstone is a Put Blob) and its HCT raised. With a hierarchical namespace `/` makes real
 * directories: keys with a trailing `/` or an empty segment (`a//b`) are refused, a key cannot
 * be both a file and a directory of other keys (`a` and `a/b`; Azure's 409 becomes
 * InvalidRequest), and a tombstone is a file, so a deleted `a` still blocks `a/b`. Directory
 * blobs (`hdi_isfolder`) are not objects. Atomic rename exists only on the DFS endpoint and is
 * not used.
 *
 * Azure blob leases are not used: see the note in index.ts.
 */
import { DomainError } from "../../core/errors.js";
import { deleteBucketSafely, noWritesInFlight } from "../../fence/bucket-deletion.js";
import { runCommit, transactionOutcome } from "../../fence/commit-driver.js";
import type { TransactionLog } from "../../fence/commit-port.js";
import { noSuchBucket, noSuchKey } from "../backend-errors.js";
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
import { AzureBuckets } from "./azure-buckets.js";
import { azureCode, azureStatus, isBlobNotFound } from "./azure-errors.js";
import { AzureMultipartStore } from "./azure-multipart.js";
import { type AzureBackendOptions, createClient, resolveOptions } from "./azure-options.js";
import { AzureStore, CONTAINER_DELETED, isAzureContainerName } from "./azure-store.js";
import { listObjectPage } from "./blob-listing.js";
import { type BlobView, blobHeadersOf, type StoredPending, viewOf } from "./blob-state.js";
import { stageBody } from "./body-stager.js";
import { type AzureCapabilityReport, verifyAzureConditionalWrites } from "./capability.js";
import { AzureObjectPort, type AzureVersion, observed, pendingOf } from "./object-port.js";
import { collectStaging, STAGED_KEY, stagingName } from "./staging.js";
import { azureSystemRecords } from "./system-records.js";

export function createAzureBackend(options: AzureBackendOptions): AzureBackend {
  return new AzureBackend(options);
}

/** A signal for work no client waits on (HCT raises by the fencing core): only the deadline applies. */
const NEVER = new AbortController().signal;

/** Staging blobs younger than this are left alone by the sweep's collection (a write may still name them). */
const STAGING_GRACE_MS = 60 * 60 * 1000;

/** What a read sees of a key: the view, and where its bytes are when a committed pending write is served. */
type Visible = { view: BlobView; staging?: string };

export class AzureBackend implements StorageBackend {
  readonly kind = "azure";
  readonly multipart: AzureMultipartStore;
  private readonly store: AzureStore;
  private readonly buckets: AzureBuckets;
  /** The backend as the commit driver sees it (src/fence/commit-port.ts). */
  readonly port: AzureObjectPort;
  private closed = false;
  private sweep: NodeJS.Timeout | undefined;
  private readonly clientReady: Promise<unknown>;
  /** Keys whose committed pending write a reader asked to roll forward, by bucket and key. */
  private readonly settling = new Set<string>();

  constructor(options: AzureBackendOptions) {
    const resolved = resolveOptions(options);
    const client = createClient(options);
    // Surfaced by ready() and by the first call; never an unhandled rejection.
    this.clientReady = client.catch(() => undefined);
    this.store = new AzureStore(client, resolved);
    this.multipart = new AzureMultipartStore(
      this.store,
      () => this.assertOpen(),
      () => this.port,
    );
    this.buckets = new AzureBuckets(this.store);
    // Listings see a pending transaction write as its transaction's record says.
    this.store.visible = (bucket, key, view) => this.visible(bucket, key, view).then((v) => v.view);
    this.port = new AzureObjectPort(
      this.store,
      () => this.multipart,
      (bucket) => this.buckets.isEmpty(bucket),
    );
    if (resolved.multipartSweepIntervalMs > 0) {
      this.sweep = setInterval(() => {
        // A failed sweep leaves the uploads for the next one; nothing else depends on it.
        if (!this.closed) {
          this.multipart.sweepAbandoned().catch(() => undefined);
          this.collectStaging({ graceMs: STAGING_GRACE_MS }).catch(() => undefined);
        }
      }, resolved.multipartSweepIntervalMs);
      this.sweep.unref();
    }
  }

  /** Resolves once the client is built (fails when credentials cannot be loaded); for startup checks. */
  async ready(): Promise<void> {
    await this.clientReady;
    await this.store.azureClient();
  }

  /** Probes whether the account honours the conditional writes every commit relies on, in `bucket`. */
  async verifyConditionalWrites(bucket: string): Promise<AzureCapabilityReport> {
    this.assertOpen();
    await this.clientReady;
    return verifyAzureConditionalWrites(this.store, bucket);
  }

  get reservedKeyPrefix(): string {
    return this.store.opts.metaPrefix;
  }

  systemRecords(bucket: string): SystemRecords {
    return azureSystemRecords(this.store, bucket);
  }

  async listBuckets(): Promise<BucketInfo[]> {
    this.assertOpen();
    return this.buckets.listBuckets();
  }

  async createBucket(bucket: string, opts: CreateBucketOptions = {}): Promise<void> {
    this.assertOpen();
    const location = opts.location ?? "";
    try {
      await this.buckets.createBucket(bucket, location);
    } catch (e) {
      // Deleted by a deletion that stopped between its marker and the container's mark.
      if (!(e instanceof DomainError && e.code === "BucketAlreadyOwnedByYou")) throw e;
      const marker = await this.port.bucketState(bucket);
      if (marker.phase !== "deleted") throw e;
      await this.buckets.setLocation(bucket, location);
      if (!(await this.port.setBucketState(bucket, marker, "live"))) throw e;
      return;
    }
    // A container restored from deletion: its marker says live again (writes read it).
    const marker = await this.port.bucketState(bucket);
    if (marker.phase !== "live") await this.port.setBucketState(bucket, marker, "live");
  }

  async headBucket(bucket: string): Promise<BucketInfo> {
    this.assertOpen();
    return this.buckets.headBucket(bucket);
  }

  async bucketLocation(bucket: string): Promise<string> {
    this.assertOpen();
    return this.buckets.location(bucket);
  }

  async deleteBucket(bucket: string, inFlight: InFlightWrites = noWritesInFlight): Promise<void> {
    this.assertOpen();
    await deleteBucketSafely(this.port, bucket, inFlight);
  }

  async writeState(bucket: string, key: string): Promise<WriteState> {
    this.assertOpen();
    // The state this process last saw may start the commit (its conditional write names it: a
    // stale one costs a 412 and a fresh read), in a bucket found live moments ago.
    // Its check of the bucket (container and deletion marker) is the one the commit makes later,
    // trusted for a second (BUCKET_STATE_TRUST_MS); it throws NoSuchBucket before the body.
    const latest = this.store.latest(bucket, key);
    const [view] = await Promise.all([
      latest ?? this.store.readView(bucket, key),
      this.store.trustedLive(bucket) ? undefined : this.port.checkBucket(bucket),
    ]);
    return {
      highestToken: view.hct,
      etag: view.live ? view.s3Etag : null,
      early: {
        ref: { bucket, key },
        observed: latest ? { ...observed(view), cached: true } : observed(view),
      },
    };
  }

  async putObject(input: PutObjectInput, commit: FencedCommit): Promise<PutObjectResult> {
    this.assertOpen();
    const { bucket, key, body } = input;
    this.store.assertKeySync(key);
    if (!isAzureContainerName(bucket)) throw noSuchBucket(bucket);
    if (commit.transaction) return this.putStaged(input, commit);
    // No await before this call: the body must be read (and its errors listened to) at once.
    const staged = await stageBody(body.stream, {
      blob: this.store.blob(bucket, key),
      blockSize: this.store.opts.blockSizeBytes,
      calls: this.store.calls,
      signal: commit.signal,
      what: `${bucket}/${key}`,
    });
    await this.store.assertKey(key);
    await this.store.hook("body-staged", { op: "put", bucket, key });
    const { checksums } = await body.digest;
    const version: AzureVersion = {
      staged,
      contentMd5: staged.md5,
      etag: `"${staged.md5.toString("hex")}"`,
      headers: input.metadata.headers,
      userMetadata: input.metadata.userMetadata,
      checksums,
    };
    const done = await runCommit(this.port, { bucket, key }, { op: "put", version }, commit);
    return {
      etag: version.etag,
      size: staged.size,
      lastModified: done.lastModified ?? new Date(),
      highestToken: done.highestToken,
      checksums,
    };
  }

  /**
   * A PutObject of a fenced transaction: the body goes to a staging blob of its own (streamed,
   * blocks beyond one), whose name the object's state then keeps as a pending write.
   */
  private async putStaged(input: PutObjectInput, commit: FencedCommit): Promise<PutObjectResult> {
    const { bucket, key, body } = input;
    const name = stagingName(this.store.opts.metaPrefix, commit.transaction!.transactionId);
    const blob = this.store.blob(bucket, name);
    // No await before this call: the body must be read (and its errors listened to) at once.
    const staged = await stageBody(body.stream, {
      blob,
      blockSize: this.store.opts.blockSizeBytes,
      calls: this.store.calls,
      signal: commit.signal,
      what: `${bucket}/${key}`,
    });
    const version: AzureVersion = {
      staged: { kind: "blob", name, size: staged.size },
      contentMd5: staged.md5,
      etag: `"${staged.md5.toString("hex")}"`,
      headers: input.metadata.headers,
      userMetadata: input.metadata.userMetadata,
    };
    let checksums: PutObjectResult["checksums"];
    try {
      await this.store.assertKey(key);
      await this.writeStaging(bucket, name, key, staged, version, commit.signal);
      await this.store.hook("body-staged", { op: "put", bucket, key });
      ({ checksums } = await body.digest);
    } catch (e) {
      await this.port.discard({ bucket, key }, version);
      throw e;
    }
    if (checksums) version.checksums = checksums;
    const done = await runCommit(this.port, { bucket, key }, { op: "put", version }, commit);
    return {
      etag: version.etag,
      size: staged.size,
      lastModified: done.lastModified ?? new Date(),
      highestToken: done.highestToken,
      checksums,
    };
  }

  /** Commits a staging blob's bytes (staged in memory or as its blocks), with the object's headers. */
  async writeStaging(
    bucket: string,
    name: string,
    key: string,
    staged: { kind: "buffer"; data: Buffer; size: number } | { kind: "blocks"; blockIds: string[] },
    version: AzureVersion,
    signal: AbortSignal,
  ): Promise<void> {
    const blob = await this.store.blob(bucket, name);
    const blobHTTPHeaders = blobHeadersOf(version.headers, version.contentMd5);
    const metadata = { [STAGED_KEY]: Buffer.from(key).toString("base64url") };
    await this.store.calls.run(`stage ${bucket}/${key} in a transaction`, signal, (abortSignal) =>
      staged.kind === "buffer"
        ? blob.upload(staged.data, staged.size, { blobHTTPHeaders, metadata, abortSignal })
        : blob.commitBlockList(staged.blockIds, { blobHTTPHeaders, metadata, abortSignal }),
    );
  }

  /**
   * What a reader sees of a blob whose state holds a pending transaction write: the pending
   * version once its transaction's record says committed and lists it (served from its staging
   * blob, and rolled forward in the store in the background), else the state without it.
   */
  private async visible(bucket: string, key: string, view: BlobView): Promise<Visible> {
    const p = view.state?.p;
    if (!p) return { view };
    const outcome = await transactionOutcome(this.port.transactions(bucket), pendingOf(p));
    if (outcome !== "committed") return { view };
    this.settleLater(bucket, key);
    if (p.kind === "delete") return { view: { ...view, live: false, s3Etag: null, info: null } };
    return { view: pendingView(view, p), staging: p.b! };
  }

  /** Rolls a committed pending write forward, off the reader's path (best effort). */
  private settleLater(bucket: string, key: string): void {
    const id = `${bucket}\n${key}`;
    if (this.settling.has(id) || this.closed) return;
    this.settling.add(id);
    void runCommit(this.port, { bucket, key }, { op: "settle" })
      .catch((err: unknown) =>
        this.store.opts.log?.debug?.({ err, bucket, key }, "azure: pending write not settled"),
      )
      .finally(() => this.settling.delete(id));
  }

  /** A staging blob's bytes (a range of them); null when the blob is gone (rolled forward meanwhile). */
  private async readStaging(
    bucket: string,
    name: string,
    info: ObjectInfo,
    range: RangeRequest | undefined,
    signal: AbortSignal | undefined,
  ): Promise<GetObjectResult | null> {
    const served = resolveRange(range, info.size);
    const blob = await this.store.blob(bucket, name);
    try {
      const answer = await this.store.calls.runStream(
        `get ${bucket}/${name}`,
        signal,
        (abortSignal, onProgress) =>
          blob.download(served?.start ?? 0, served ? served.end - served.start + 1 : undefined, {
            abortSignal,
            onProgress,
            maxRetryRequests: 3,
          }),
        (a) => a.readableStreamBody as GetObjectResult["body"] | undefined,
        isBlobNotFound,
      );
      const body = answer.readableStreamBody! as GetObjectResult["body"];
      return served ? { info, body, range: served } : { info, body };
    } catch (e) {
      if (isBlobNotFound(e)) return null;
      throw e;
    }
  }

  /**
   * What a read inside fenced transaction `version.transaction` sees: the write it staged at the
   * key (a put's bytes; NoSuchKey for a delete), else what any read sees.
   */
  async readStaged(
    bucket: string,
    key: string,
    version: unknown,
    range?: RangeRequest,
  ): Promise<GetObjectResult> {
    this.assertOpen();
    const id = (version as { transaction?: unknown } | null)?.transaction;
    if (typeof id !== "string") throw new Error("an Azure backend's staged read names its transaction");
    const view = await this.store.readView(bucket, key, undefined, true);
    const p = view.state?.p;
    if (!p || p.tx !== id) return this.getObject(bucket, key, range);
    if (p.kind === "delete") throw noSuchKey(bucket, key);
    const got = await this.readStaging(
      bucket,
      p.b!,
      { key, ...pendingView(view, p).info! },
      range,
      undefined,
    );
    // Gone: the pending write was rolled forward or dropped meanwhile; the read sees what others see.
    return got ?? this.getObject(bucket, key, range);
  }

  /** The records of the bucket's fenced transactions (their commit points). */
  transactionLog(bucket: string): TransactionLog {
    this.assertOpen();
    return this.port.transactions(bucket);
  }

  /**
   * Removes staging blobs of fenced transactions that can no longer become visible (staging.ts),
   * older than `graceMs`, in `buckets` (default: every container).
   */
  async collectStaging(opts: { graceMs: number; buckets?: readonly string[] }): Promise<{ removed: number }> {
    this.assertOpen();
    const buckets = opts.buckets ?? (await this.store.containerNames());
    return collectStaging(this.store, this.port, buckets, opts.graceMs);
  }

  async deleteObject(input: DeleteObjectInput, commit: FencedCommit): Promise<DeleteObjectResult> {
    this.assertOpen();
    const { bucket, key } = input;
    this.store.assertKeySync(key);
    const done = await runCommit(this.port, { bucket, key }, { op: "delete" }, commit);
    return { existed: done.before.etag !== null, highestToken: done.highestToken };
  }

  async raiseHighestToken(bucket: string, key: string, token: number): Promise<number> {
    this.assertOpen();
    if (!(Number.isSafeInteger(token) && token >= 0)) {
      throw new DomainError("InvalidArgument", "a fencing token must be a non-negative integer");
    }
    try {
      return await this.raise(bucket, key, token);
    } catch (e) {
      if (!(e instanceof DomainError && e.code === "NoSuchBucket") || !isAzureContainerName(bucket)) throw e;
    }
    // The HCT must outlive a bucket that does not exist (yet): keep it in a container marked
    // deleted, which createBucket turns into the bucket, tombstone and all.
    const container = await this.store.container(bucket);
    await this.store.calls
      .run(
        `create container ${bucket} for an HCT`,
        NEVER,
        (abortSignal) =>
          container.create({
            metadata: { [CONTAINER_DELETED]: new Date(this.store.opts.clock()).toISOString() },
            abortSignal,
          }),
        (e) => azureStatus(e) === 409,
      )
      .catch((e: unknown) => {
        if (azureStatus(e) !== 409) throw e;
      });
    return this.raise(bucket, key, token);
  }

  private async raise(bucket: string, key: string, token: number): Promise<number> {
    const done = await runCommit(this.port, { bucket, key }, { op: "raise", token });
    return done.highestToken ?? token;
  }

  /** The same state again under a new write id: a commit in flight over the old one cannot land. */
  async touch(bucket: string, key: string): Promise<void> {
    this.assertOpen();
    await this.port.touch({ bucket, key });
  }

  async headObject(bucket: string, key: string): Promise<ObjectInfo> {
    this.assertOpen();
    const { view } = await this.readObject(bucket, key);
    return { key, ...view.info! };
  }

  async getObject(
    bucket: string,
    key: string,
    range?: RangeRequest,
    signal?: AbortSignal,
  ): Promise<GetObjectResult> {
    this.assertOpen();
    for (let read = 1; range === undefined; read++) {
      // One call: the body and the properties of the same version.
      const blob = await this.requireObjectBlob(bucket, key, signal);
      const bucketCheck = this.store.requireBucket(bucket, signal);
      bucketCheck.catch(() => undefined);
      const answer = await this.download(blob, bucket, key, signal, 0, undefined, undefined);
      let view = viewOf(answer, `${bucket}/${key}`);
      const body = answer.readableStreamBody!;
      let staging: string | undefined;
      try {
        await bucketCheck;
        if (view.state?.p) ({ view, staging } = await this.visible(bucket, key, view));
        if (!view.live) throw noSuchKey(bucket, key);
      } catch (e) {
        body.destroy();
        throw e;
      }
      if (staging === undefined)
        return { info: { key, ...view.info! }, body: body as GetObjectResult["body"] };
      // A committed pending write: its bytes are still in its staging blob.
      body.destroy();
      const got = await this.readStaging(bucket, staging, { key, ...view.info! }, undefined, signal);
      if (got) return got;
      // Rolled forward (and its staging blob removed) meanwhile: read again.
      if (read >= 10) throw busy(bucket, key);
    }
    // A range needs the size first; the download then asks for that very version (If-Match).
    for (let attempt = 1; ; attempt++) {
      const { view, staging } = await this.readObject(bucket, key, signal);
      if (staging !== undefined) {
        const got = await this.readStaging(bucket, staging, { key, ...view.info! }, range, signal);
        if (got) return got;
        if (attempt >= 10) throw busy(bucket, key);
        continue;
      }
      const served = resolveRange(range, view.info!.size);
      const blob = await this.store.blob(bucket, key);
      let answer: Awaited<ReturnType<AzureBackend["download"]>>;
      try {
        answer = await this.download(
          blob,
          bucket,
          key,
          signal,
          served?.start ?? 0,
          served ? served.end - served.start + 1 : undefined,
          view.azureEtag!,
        );
      } catch (e) {
        // Overwritten or deleted between the two calls: look again.
        if ((azureStatus(e) === 412 || azureStatus(e) === 404) && attempt < 10) continue;
        throw e;
      }
      const body = answer.readableStreamBody! as GetObjectResult["body"];
      const info = { key, ...view.info! };
      return served ? { info, body, range: served } : { info, body };
    }
  }

  private async download(
    blob: Awaited<ReturnType<AzureStore["blob"]>>,
    bucket: string,
    key: string,
    signal: AbortSignal | undefined,
    offset: number,
    count: number | undefined,
    ifMatch: string | undefined,
  ) {
    try {
      return await this.store.calls.runStream(
        `get ${bucket}/${key}`,
        signal,
        (abortSignal, onProgress) =>
          blob.download(offset, count, {
            abortSignal,
            onProgress,
            maxRetryRequests: 3,
            ...(ifMatch ? { conditions: { ifMatch } } : {}),
          }),
        (answer) => answer.readableStreamBody as GetObjectResult["body"] | undefined,
        (e) => azureStatus(e) === 404 || (ifMatch !== undefined && azureStatus(e) === 412),
      );
    } catch (e) {
      if (ifMatch !== undefined) throw e;
      if (azureStatus(e) === 404) {
        if (azureCode(e) === "ContainerNotFound") throw noSuchBucket(bucket);
        await this.store.requireBucket(bucket, signal);
        throw noSuchKey(bucket, key);
      }
      throw e;
    }
  }

  async listObjects(input: ListInput): Promise<ListResult> {
    this.assertOpen();
    if (!Number.isSafeInteger(input.maxKeys) || input.maxKeys < 0) {
      throw new DomainError("InvalidArgument", "maxKeys must be a non-negative integer");
    }
    await this.store.requireBucket(input.bucket);
    return listObjectPage(this.store, await this.store.container(input.bucket), input);
  }

  /** Also answers for a bucket that was deleted: its tombstones keep their HCTs. */
  async highestToken(bucket: string, key: string): Promise<number | null> {
    return (await this.viewOf(bucket, key))?.hct ?? null;
  }

  async writeNote(bucket: string, key: string): Promise<string | null> {
    return (await this.viewOf(bucket, key))?.state?.a ?? null;
  }

  /** What the gateway sees at the object's name; null when there is no bucket. */
  private async viewOf(bucket: string, key: string) {
    this.assertOpen();
    try {
      return await this.store.readView(bucket, key);
    } catch (e) {
      if (e instanceof DomainError && e.code === "NoSuchBucket") return null;
      throw e;
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.sweep);
  }

  assertOpen(): void {
    if (this.closed) throw new DomainError("ServiceUnavailable", "the azure backend is closed");
  }

  /** The live object's view (a committed pending write's, with its staging blob); NoSuchBucket, NoSuchKey. */
  private async readObject(bucket: string, key: string, signal?: AbortSignal): Promise<Visible> {
    if (this.isMetaKey(key)) {
      await this.store.requireBucket(bucket, signal);
      throw noSuchKey(bucket, key);
    }
    const visible = await this.visible(bucket, key, await this.store.readView(bucket, key, signal, true));
    if (!visible.view.live) throw noSuchKey(bucket, key);
    return visible;
  }

  private async requireObjectBlob(bucket: string, key: string, signal?: AbortSignal) {
    if (!isAzureContainerName(bucket)) throw noSuchBucket(bucket);
    if (this.isMetaKey(key)) {
      await this.store.requireBucket(bucket, signal);
      throw noSuchKey(bucket, key);
    }
    return this.store.blob(bucket, key);
  }

  private isMetaKey(key: string): boolean {
    const meta = this.store.opts.metaPrefix;
    return key.startsWith(meta) || key === meta.slice(0, -1);
  }
}

const busy = (bucket: string, key: string) =>
  new DomainError("SlowDown", `${bucket}/${key} changes too often to be read; please retry`, {
    retryAfterSeconds: 1,
  });

/** The view of a committed pending put, as readers see it before it is rolled forward. */
function pendingView(view: BlobView, p: StoredPending): BlobView {
  return {
    ...view,
    live: true,
    s3Etag: p.etag!,
    info: {
      size: p.size ?? 0,
      etag: p.etag!,
      lastModified: new Date(p.t ?? 0),
      headers: p.headers ?? {},
      userMetadata: p.meta ?? {},
      ...(p.checksums && Object.keys(p.checksums).length > 0 ? { checksums: p.checksums } : {}),
    },
  };
}
