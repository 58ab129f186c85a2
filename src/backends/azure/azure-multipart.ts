import type { BlobItem, BlockBlobClient, ContainerClient } from "@azure/storage-blob";
import { DomainError } from "../../core/errors.js";
import { applyFence, checkWriteConditions } from "../../fence/commit.js";
import { runCommit } from "../../fence/commit-driver.js";
import { assertNonNegative, noSuchBucket, noSuchUpload, partReplaced } from "../backend-errors.js";
import {
  assertPartNumber,
  assertPartOrder,
  compareUploads,
  listUploadsPage,
  multipartEtag,
  newUploadId,
  partNumberMarker,
  partsPage,
  seekUploads,
  selectParts,
  uploadOf,
} from "../multipart.js";
import type {
  CompleteUploadInput,
  CreateUploadInput,
  CreateUploadResult,
  FencedCommit,
  ListPartsInput,
  ListPartsResult,
  ListUploadsInput,
  ListUploadsResult,
  MultipartStore,
  MultipartUpload,
  PutObjectResult,
  UploadPartInput,
  UploadPartResult,
  UploadRef,
} from "../storage-backend.js";
import { abandoned, azureStatus } from "./azure-errors.js";
import { type AzureStore, isAzureContainerName } from "./azure-store.js";
import { blobPages } from "./blob-listing.js";
import { blobHeadersOf } from "./blob-state.js";
import { stageBody } from "./body-stager.js";
import type { AzureObjectPort, AzureVersion } from "./object-port.js";
import { assembleParts, type ListedPart } from "./part-assembly.js";
import { STAGED_KEY, stagingName } from "./staging.js";
import {
  decodePart,
  decodeUpload,
  encodeJson,
  isUploadId,
  newPartAttempt,
  nextPartOrder,
  PART_META,
  type PartRecord,
  parsePartName,
  partAttemptOrder,
  partBlobName,
  partsPrefix,
  toPartInfo,
  UPLOAD_META,
  type UploadRecord,
  uploadBlobName,
  uploadsPrefix,
} from "./upload-records.js";

/**
 * Multipart uploads on Azure.
 *
 * Blocks cannot move between blobs, and a blob's uncommitted blocks vanish when anyone commits
 * that blob, so parts are NOT staged on the object's blob while the upload is open (an ordinary
 * PutObject to the key would destroy them). Each part is a hidden blob of its own under the meta
 * prefix (upload-records.ts), written with Put Blob or Put Block List like an object's body; the
 * upload itself is a zero-length record blob. Completion then:
 *  1. checks the part list against the recorded parts (InvalidPart, EntityTooSmall) and the HCT
 *     rule early (a doomed completion copies nothing), calls prepare(), and checks again that the
 *     upload and the parts it uses are unchanged;
 *  2. stages the parts' bytes as blocks on the object's blob: Stage Block From URL (a server-side
 *     copy, signed with a short SAS) where the service offers it, else by streaming each part blob
 *     through the gateway (Azurite implements no Stage Block From URL);
 *  3. commits them with the same conditional Put Block List as a PutObject (the HCT rule and the
 *     conditions against the state read, If-Match / If-None-Match), re-staging up to twice when a
 *     concurrent commit discarded the blocks;
 *  4. removes the record and the part blobs (a crash here leaves them for the sweep).
 * Creating an upload and uploading a part check the HCT rule against the object but write only
 * fencegate's own blobs. sweepAbandoned() removes uploads older than multipartMaxAgeMs and part
 * blobs whose upload is gone, in every container.
 */

const RESTAGE_ATTEMPTS = 2;

type ListedUpload = MultipartUpload & { record: UploadRecord };

export class AzureMultipartStore implements MultipartStore {
  constructor(
    private readonly store: AzureStore,
    private readonly assertOpen: () => void,
    /** The backend's commit port (src/fence/commit-port.ts). */
    private readonly port: () => AzureObjectPort,
  ) {}

  private get meta(): string {
    return this.store.opts.metaPrefix;
  }

  async createUpload(input: CreateUploadInput, commit: FencedCommit): Promise<CreateUploadResult> {
    this.assertOpen();
    await this.store.assertKey(input.key);
    // Creating an upload changes nothing visible: the HCT rule is checked, the HCT not raised.
    const { highestToken } = await runCommit(this.port(), input, { op: "check" }, commit);
    const initiated = this.store.opts.clock();
    const uploadId = newUploadId(initiated);
    const record: UploadRecord = {
      key: input.key,
      metadata: input.metadata,
      token: input.token,
      leaseId: input.leaseId,
      initiator: input.initiator,
      initiated,
      ...(input.transactionId ? { transactionId: input.transactionId } : {}),
    };
    const blob = await this.store.blob(input.bucket, uploadBlobName(this.meta, uploadId));
    await this.store.calls.run(`create upload ${uploadId}`, commit.signal, (abortSignal) =>
      blob.upload(Buffer.alloc(0), 0, {
        metadata: { [UPLOAD_META]: encodeJson(record) },
        conditions: { ifNoneMatch: "*" },
        abortSignal,
      }),
    );
    return { uploadId, highestToken };
  }

  async completedBy(ref: UploadRef): Promise<string | null> {
    this.assertOpen();
    const view = await this.store.readView(ref.bucket, ref.key);
    if (view.state?.p?.u === ref.uploadId) return view.state.p.etag ?? null;
    return view.live && view.state?.u === ref.uploadId ? view.s3Etag : null;
  }

  async getUpload(ref: UploadRef): Promise<MultipartUpload> {
    this.assertOpen();
    return (await this.requireUpload(ref)).upload;
  }

  async uploadPart(input: UploadPartInput, commit: FencedCommit): Promise<UploadPartResult> {
    this.assertOpen();
    assertPartNumber(input.partNumber);
    if (!isUploadId(input.uploadId)) throw noSuchUpload(input.uploadId);
    if (!isAzureContainerName(input.bucket)) throw noSuchBucket(input.bucket);
    const name = partBlobName(this.meta, input.uploadId, input.partNumber, newPartAttempt());
    // The body is read at once (its errors listened to); the upload is looked up meanwhile.
    const staging = stageBody(input.body.stream, {
      blob: this.store.blob(input.bucket, name),
      blockSize: this.store.opts.blockSizeBytes,
      calls: this.store.calls,
      signal: commit.signal,
      what: `part ${input.partNumber} of upload ${input.uploadId}`,
    });
    const lookup = this.requireUpload(input, commit.signal);
    // An unknown upload stops the body at once: nothing is staged for it.
    lookup.catch(() => input.body.stream.destroy());
    const [staged, upload] = await Promise.allSettled([staging, lookup]);
    if (upload.status === "rejected") {
      input.body.digest.catch(() => undefined);
      throw upload.reason;
    }
    if (staged.status === "rejected") throw staged.reason;
    const body = staged.value;
    await input.body.digest;
    // A part changes nothing visible: the HCT rule is checked against the object, not raised.
    const ref = { bucket: input.bucket, key: input.key };
    const { highestToken } = await runCommit(this.port(), ref, { op: "check" }, commit);
    const at = this.store.opts.clock();
    const md5 = body.md5.toString("hex");
    const order = nextPartOrder();
    const metadata = { [PART_META]: encodeJson({ md5, size: body.size, at, order } satisfies PartRecord) };
    const blob = await this.store.blob(input.bucket, name);
    if (commit.signal.aborted) throw abandoned();
    await this.store.calls.run(
      `write part ${input.partNumber} of upload ${input.uploadId}`,
      commit.signal,
      (abortSignal) =>
        body.kind === "buffer"
          ? blob.upload(body.data, body.size, { metadata, abortSignal })
          : blob.commitBlockList(body.blockIds, { metadata, abortSignal }),
    );
    // Aborted or completed meanwhile: the part must not outlive its upload.
    try {
      await this.requireUpload(input);
    } catch (e) {
      await this.removeBlob(blob);
      throw e;
    }
    await this.removeEarlierAttempts(input, { at, order, name });
    return { etag: `"${md5}"`, size: body.size, lastModified: new Date(at), highestToken };
  }

  async completeUpload(input: CompleteUploadInput, commit: FencedCommit): Promise<PutObjectResult> {
    this.assertOpen();
    assertPartOrder(input.parts);
    const { upload } = await this.requireUpload(input, commit.signal);
    const recorded = await this.readParts(input.bucket, input.uploadId);
    const byNumber = new Map(recorded.map((part) => [part.partNumber, part]));
    const used = selectParts(
      input.parts,
      (n) => byNumber.get(n),
      (part) => part,
    );
    const etag = multipartEtag(used.map((part) => part.md5));
    const size = used.reduce((sum, part) => sum + part.size, 0);
    const ref = { bucket: input.bucket, key: input.key };

    // A completion the HCT or the conditions refuse already copies nothing.
    const early = await this.store.readView(input.bucket, input.key, commit.signal, true);
    applyFence(commit.fence, early.hct);
    checkWriteConditions(commit.conditions, early.live ? early.s3Etag : null);

    // In a fenced transaction the parts are assembled in a staging blob of their own (staging.ts):
    // the completion is staged, the transaction's roll-forward copies it onto the object's blob.
    const staging = commit.transaction ? stagingName(this.meta, commit.transaction.transactionId) : undefined;
    const blob = await this.store.blob(input.bucket, staging ?? input.key);
    const version: AzureVersion = {
      staged: { kind: "blocks", blockIds: [], size },
      upload: input.uploadId,
      etag,
      headers: upload.metadata.headers,
      userMetadata: upload.metadata.userMetadata,
    };
    const stage = async () => {
      await this.assertUnchanged(input, used, commit.signal);
      const blockIds = await this.assemble(input, blob, used, size, commit.signal);
      if (staging === undefined) {
        version.staged = { kind: "blocks", blockIds, size };
        return;
      }
      const metadata = { [STAGED_KEY]: Buffer.from(input.key).toString("base64url") };
      const blobHTTPHeaders = blobHeadersOf(upload.metadata.headers);
      await this.store.calls.run(`stage the completion of ${input.uploadId}`, commit.signal, (abortSignal) =>
        blob.commitBlockList(blockIds, { blobHTTPHeaders, metadata, abortSignal }),
      );
      version.staged = { kind: "blob", name: staging, size };
    };
    let restaged = 0;
    // The parts are still there: stage them again when a concurrent commit discarded the blocks,
    // a bounded number of times.
    version.restage = async () => {
      if (++restaged > RESTAGE_ATTEMPTS) {
        throw new DomainError(
          "SlowDown",
          "concurrent writes to this key keep discarding the completion's staged blocks; nothing was changed, retry",
          { retryAfterSeconds: 1 },
        );
      }
      await stage();
    };
    // After prepare: the upload and its parts are still the ones listed, then their bytes are
    // staged as blocks on the object's blob.
    const ready = async () => {
      await stage();
      await this.store.hook("body-staged", { op: "complete", ...ref });
    };
    const done = await runCommit(this.port(), ref, { op: "put", version, ready }, commit);
    const result: PutObjectResult = {
      etag,
      size,
      lastModified: done.lastModified ?? new Date(),
      highestToken: done.highestToken,
      checksums: {},
    };
    // Committed: a failure to clean up must not turn the answer into an error (the sweep retries).
    await this.removeUpload(input.bucket, input.uploadId).catch((e: unknown) => {
      this.store.opts.log?.warn(
        { err: e, uploadId: input.uploadId },
        "azure: could not remove a completed upload",
      );
    });
    return result;
  }

  async abortUpload(ref: UploadRef): Promise<void> {
    this.assertOpen();
    await this.requireUpload(ref);
    await this.removeUpload(ref.bucket, ref.uploadId);
  }

  async listParts(input: ListPartsInput): Promise<ListPartsResult> {
    this.assertOpen();
    const marker = partNumberMarker(input);
    const { upload } = await this.requireUpload(input);
    const all = (await this.readParts(input.bucket, input.uploadId)).filter((p) => p.partNumber > marker);
    const infos = all.map((part) => toPartInfo(part.partNumber, part));
    return partsPage(upload, infos, input.maxParts);
  }

  /**
   * Reads all of the bucket's upload records (one listing of `<meta>uploads/`) and pages through
   * them in memory: uploads are few, and their blob names (by id) do not sort by key.
   */
  async listUploads(input: ListUploadsInput): Promise<ListUploadsResult> {
    this.assertOpen();
    assertNonNegative("maxUploads", input.maxUploads);
    await this.store.requireBucket(input.bucket);
    const uploads = await this.listUploadRecords(input.bucket);
    uploads.sort(compareUploads);
    return listUploadsPage(
      input,
      (marker) => (from) => seekUploads(uploads, from, marker),
      ({ record: _record, ...upload }) => upload,
    );
  }

  /**
   * Aborts every upload initiated more than multipartMaxAgeMs ago, in every container (or in
   * `buckets`), and removes part blobs whose upload is gone (left by a crash, or by a part that
   * raced an abort).
   */
  async sweepAbandoned(scope: { buckets?: readonly string[] } = {}): Promise<{ removed: number }> {
    this.assertOpen();
    const cutoff = this.store.opts.clock() - this.store.opts.multipartMaxAgeMs;
    let removed = 0;
    const containers = scope.buckets ?? (await this.store.containerNames());
    for (const bucket of containers) {
      const uploads = await this.listUploadRecords(bucket);
      for (const upload of uploads) {
        if (upload.record.initiated >= cutoff) continue;
        await this.removeUpload(bucket, upload.uploadId);
        removed++;
      }
      const live = new Set(uploads.filter((u) => u.record.initiated >= cutoff).map((u) => u.uploadId));
      const container = await this.store.container(bucket);
      for await (const item of this.listBlobs(container, partsPrefix(this.meta))) {
        const part = parsePartName(this.meta, item.name);
        if (part && live.has(part.uploadId)) continue;
        // Created after this sweep listed the uploads? Then its record exists: look once more.
        if (part && (await this.uploadExists(bucket, part.uploadId))) continue;
        await this.removeBlob(container.getBlockBlobClient(item.name));
      }
    }
    return { removed };
  }

  /** Removes every upload of a bucket (its meta prefix): part of deleting the bucket. */
  /**
   * Removes every upload's record and parts. Only those: the meta prefix also holds the bucket's
   * marker, which a deleted bucket keeps (a commit still in flight reads it and is refused).
   */
  async removeAll(bucket: string): Promise<void> {
    const container = await this.store.container(bucket);
    for (const prefix of [uploadsPrefix(this.meta), partsPrefix(this.meta)]) {
      for await (const item of this.listBlobs(container, prefix)) {
        await this.removeBlob(container.getBlockBlobClient(item.name));
      }
    }
  }

  // ---- internals ----

  private async requireUpload(
    ref: UploadRef,
    signal?: AbortSignal,
  ): Promise<{ upload: MultipartUpload; record: UploadRecord }> {
    if (!isUploadId(ref.uploadId)) throw noSuchUpload(ref.uploadId);
    if (!isAzureContainerName(ref.bucket)) throw noSuchBucket(ref.bucket);
    const name = uploadBlobName(this.meta, ref.uploadId);
    const blob = await this.store.blob(ref.bucket, name);
    let props: Awaited<ReturnType<BlockBlobClient["getProperties"]>>;
    try {
      props = await this.store.calls.run(
        `read upload ${ref.uploadId}`,
        signal,
        (abortSignal) => blob.getProperties({ abortSignal }),
        (e) => azureStatus(e) === 404,
      );
    } catch (e) {
      if (azureStatus(e) !== 404) throw e;
      await this.store.requireBucket(ref.bucket, signal);
      throw noSuchUpload(ref.uploadId);
    }
    const record = decodeUpload(props.metadata, `${ref.bucket}/${name}`);
    if (record.key !== ref.key) throw noSuchUpload(ref.uploadId);
    return { upload: uploadOf(ref.bucket, ref.uploadId, record), record };
  }

  private async uploadExists(bucket: string, uploadId: string): Promise<boolean> {
    const blob = await this.store.blob(bucket, uploadBlobName(this.meta, uploadId));
    try {
      await this.store.calls.run(
        `read upload ${uploadId}`,
        undefined,
        (abortSignal) => blob.getProperties({ abortSignal }),
        (e) => azureStatus(e) === 404,
      );
      return true;
    } catch (e) {
      if (azureStatus(e) === 404) return false;
      throw e;
    }
  }

  private async *listBlobs(container: ContainerClient, prefix: string): AsyncGenerator<BlobItem> {
    const fetch = blobPages(this.store, container, prefix, 5000);
    let marker: string | undefined;
    do {
      const page = await fetch(marker ? { marker } : {});
      yield* page.items;
      marker = page.nextMarker;
    } while (marker);
  }

  private async listUploadRecords(bucket: string): Promise<ListedUpload[]> {
    const container = await this.store.container(bucket);
    const uploads: ListedUpload[] = [];
    for await (const item of this.listBlobs(container, uploadsPrefix(this.meta))) {
      const uploadId = item.name.slice(uploadsPrefix(this.meta).length);
      if (!isUploadId(uploadId)) continue;
      const record = decodeUpload(item.metadata, `${bucket}/${item.name}`);
      uploads.push({ ...uploadOf(bucket, uploadId, record), record });
    }
    return uploads;
  }

  /** The upload's parts in part number order: of several attempts at a part, the last committed. */
  private async readParts(bucket: string, uploadId: string): Promise<ListedPart[]> {
    const container = await this.store.container(bucket);
    const parts = new Map<number, ListedPart>();
    for await (const item of this.listBlobs(container, partsPrefix(this.meta, uploadId))) {
      const parsed = parsePartName(this.meta, item.name);
      if (!parsed) continue;
      const record = decodePart(item.metadata, `${bucket}/${item.name}`);
      const part = {
        ...record,
        partNumber: parsed.partNumber,
        azureEtag: item.properties.etag,
        name: item.name,
      };
      const other = parts.get(part.partNumber);
      if (!other || partAttemptOrder(other, part) < 0) parts.set(part.partNumber, part);
    }
    return [...parts.values()].sort((a, b) => a.partNumber - b.partNumber);
  }

  /** NoSuchUpload when the upload went away, InvalidPart when a part it uses was replaced. */
  private async assertUnchanged(ref: UploadRef, used: ListedPart[], signal: AbortSignal): Promise<void> {
    await this.requireUpload(ref, signal);
    const now = new Map((await this.readParts(ref.bucket, ref.uploadId)).map((p) => [p.partNumber, p]));
    for (const part of used) {
      const current = now.get(part.partNumber);
      if (current?.name !== part.name || current.azureEtag !== part.azureEtag) {
        throw partReplaced(part.partNumber);
      }
    }
  }

  /** Stages the parts' bytes, in order, as blocks on the object's blob; returns their ids. */
  private assemble(
    ref: UploadRef,
    blob: BlockBlobClient,
    used: ListedPart[],
    size: number,
    signal: AbortSignal,
  ): Promise<string[]> {
    return assembleParts(this.store, { ref, blob, used, size, signal }, () =>
      this.assertUnchanged(ref, used, signal),
    );
  }

  /**
   * Removes the attempts at this part committed before `mine` (a part uploaded again, or twice at
   * once): the part is the attempt committed last, whole. A later attempt is left alone.
   */
  private async removeEarlierAttempts(
    ref: UploadRef & { partNumber: number },
    mine: { at: number; order: number; name: string },
  ): Promise<void> {
    const container = await this.store.container(ref.bucket);
    const prefix = partBlobName(this.meta, ref.uploadId, ref.partNumber);
    for await (const item of this.listBlobs(container, prefix)) {
      if (item.name === mine.name || parsePartName(this.meta, item.name)?.partNumber !== ref.partNumber)
        continue;
      const record = decodePart(item.metadata, `${ref.bucket}/${item.name}`);
      if (partAttemptOrder({ ...record, name: item.name }, mine) < 0) {
        await this.removeBlob(container.getBlockBlobClient(item.name));
      }
    }
  }

  /** Removes the record first (no part can be added after), then the parts. */
  private async removeUpload(bucket: string, uploadId: string): Promise<void> {
    const container = await this.store.container(bucket);
    await this.removeBlob(container.getBlockBlobClient(uploadBlobName(this.meta, uploadId)));
    for await (const item of this.listBlobs(container, partsPrefix(this.meta, uploadId))) {
      await this.removeBlob(container.getBlockBlobClient(item.name));
    }
  }

  private async removeBlob(blob: BlockBlobClient): Promise<void> {
    await this.store.calls
      .run(
        `remove ${blob.name}`,
        undefined,
        (abortSignal) => blob.delete({ abortSignal }),
        (e) => azureStatus(e) === 404,
      )
      .catch((e: unknown) => {
        if (azureStatus(e) !== 404) throw e;
      });
  }
}
