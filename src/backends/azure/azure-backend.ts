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
import { runCommit } from "../../fence/commit-driver.js";
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
import { azureCode, azureStatus } from "./azure-errors.js";
import { AzureMultipartStore } from "./azure-multipart.js";
import { type AzureBackendOptions, createClient, resolveOptions } from "./azure-options.js";
import { AzureStore, CONTAINER_DELETED, isAzureContainerName, noSuchBucket } from "./azure-store.js";
import { listObjectPage } from "./blob-listing.js";
import { type BlobView, viewOf } from "./blob-state.js";
import { stageBody } from "./body-stager.js";
import { type AzureCapabilityReport, verifyAzureConditionalWrites } from "./capability.js";
import { AzureObjectPort, type AzureVersion, observed } from "./object-port.js";
import { azureSystemRecords } from "./system-records.js";

export function createAzureBackend(options: AzureBackendOptions): AzureBackend {
  return new AzureBackend(options);
}

/** A signal for work no client waits on (HCT raises by the fencing core): only the deadline applies. */
const NEVER = new AbortController().signal;

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
    this.port = new AzureObjectPort(
      this.store,
      () => this.multipart,
      (bucket) => this.buckets.isEmpty(bucket),
    );
    if (resolved.multipartSweepIntervalMs > 0) {
      this.sweep = setInterval(() => {
        // A failed sweep leaves the uploads for the next one; nothing else depends on it.
        if (!this.closed) this.multipart.sweepAbandoned().catch(() => undefined);
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
    const view = await this.readObject(bucket, key);
    return { key, ...view.info! };
  }

  async getObject(
    bucket: string,
    key: string,
    range?: RangeRequest,
    signal?: AbortSignal,
  ): Promise<GetObjectResult> {
    this.assertOpen();
    if (range === undefined) {
      // One call: the body and the properties of the same version.
      const blob = await this.requireObjectBlob(bucket, key, signal);
      const bucketCheck = this.store.requireBucket(bucket, signal);
      bucketCheck.catch(() => undefined);
      const answer = await this.download(blob, bucket, key, signal, 0, undefined, undefined);
      const view = viewOf(answer, `${bucket}/${key}`);
      const body = answer.readableStreamBody!;
      try {
        await bucketCheck;
        if (!view.live) throw noSuchKey(bucket, key);
      } catch (e) {
        body.destroy();
        throw e;
      }
      return { info: { key, ...view.info! }, body: body as GetObjectResult["body"] };
    }
    // A range needs the size first; the download then asks for that very version (If-Match).
    for (let attempt = 1; ; attempt++) {
      const view = await this.readObject(bucket, key, signal);
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

  /** The live object's view; NoSuchBucket, NoSuchKey. */
  private async readObject(bucket: string, key: string, signal?: AbortSignal): Promise<BlobView> {
    if (this.isMetaKey(key)) {
      await this.store.requireBucket(bucket, signal);
      throw noSuchKey(bucket, key);
    }
    const view = await this.store.readView(bucket, key, signal, true);
    if (!view.live) throw noSuchKey(bucket, key);
    return view;
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

const noSuchKey = (bucket: string, key: string) =>
  new DomainError("NoSuchKey", "the specified key does not exist", { bucket, key });
