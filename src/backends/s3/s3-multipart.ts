import { OutcomeUnknownError, runCommit } from "../../fence/commit-driver.js";
import { assertNonNegative, partReplaced } from "../backend-errors.js";
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
} from "../multipart.js";
import {
  type CompleteUploadInput,
  type CreateUploadInput,
  type CreateUploadResult,
  type FencedCommit,
  type ListPartsInput,
  type ListPartsResult,
  type ListUploadsInput,
  type ListUploadsResult,
  MAX_PART_NUMBER,
  type MultipartStore,
  type MultipartUpload,
  type PutObjectResult,
  type UploadPartInput,
  type UploadPartResult,
  type UploadRef,
} from "../storage-backend.js";
import { writeBlob } from "./blob-writer.js";
import type { S3Context } from "./context.js";
import { BLOB_META, encodeKey } from "./layout.js";
import type { S3ObjectPort } from "./object-port.js";
import { type LiveVersion, liveOf } from "./records.js";
import type { UploadStore } from "./upload-store.js";
import { type PartManifest, toPartInfo, toUpload, type UploadManifest } from "./uploads.js";

type S3MultipartOptions = {
  partSizeBytes: number;
  /** Uploads initiated longer ago than this are aborted by sweepAbandoned(). */
  maxAgeMs: number;
};

/**
 * Multipart uploads of the S3 backend, with the fs backend's rules and errors.
 *
 * An upload is a manifest `<m>u/<upload id>` (key, metadata, the binding's token and lease,
 * initiator, initiation time); each part is a blob (streamed like a PutObject body) and a part
 * manifest `<m>u/<upload id>/<nnnnn>` naming it. Uploading a part again writes a new blob and a
 * new manifest; the old blob is removed (or collected). Creating an upload and recording a part
 * check the HCT rule against the record without raising it; they change nothing visible, so a
 * check that is not atomic with them cannot break a safety rule. The completion is: assemble the
 * final blob server-side with UploadPartCopy from the part blobs, then after `prepare` check that
 * the upload and the parts used are still there, then commit the record by CAS exactly like a
 * PutObject (ETag: S3's multipart ETag of the parts' MD5s), then remove the upload, its part
 * manifests and part blobs. A refused completion removes the assembled blob and keeps the upload.
 */
export class S3MultipartStore implements MultipartStore {
  constructor(
    private readonly ctx: S3Context,
    private readonly uploads: UploadStore,
    private readonly port: S3ObjectPort,
    private readonly opts: S3MultipartOptions,
  ) {}

  async createUpload(input: CreateUploadInput, commit: FencedCommit): Promise<CreateUploadResult> {
    this.ctx.assertOpen();
    await this.ctx.gate.require(input.bucket);
    const { highestToken } = await runCommit(this.port, input, { op: "check" }, commit);
    const initiated = this.ctx.clock();
    const manifest: UploadManifest = {
      v: 1,
      uploadId: newUploadId(initiated),
      key: input.key,
      metadata: structuredClone(input.metadata),
      token: input.token,
      leaseId: input.leaseId,
      initiator: input.initiator,
      initiated,
      ...(input.transactionId ? { transactionId: input.transactionId } : {}),
    };
    await this.uploads.create(input.bucket, manifest);
    return { uploadId: manifest.uploadId, highestToken };
  }

  async getUpload(ref: UploadRef): Promise<MultipartUpload> {
    this.ctx.assertOpen();
    return toUpload(ref.bucket, await this.uploads.require(ref));
  }

  async uploadPart(input: UploadPartInput, commit: FencedCommit): Promise<UploadPartResult> {
    this.ctx.assertOpen();
    assertPartNumber(input.partNumber);
    const { bucket, key, uploadId, partNumber, body } = input;
    // The body is read only once the upload is known (a refusal leaves it unread, as fs does);
    // meanwhile a body error must not go unheard.
    body.stream.on("error", () => undefined);
    await this.uploads.require(input);

    const blob = this.ctx.layout.newBlobId();
    const stored = await writeBlob(this.ctx.store, bucket, this.ctx.layout.blobName(blob), body.stream, {
      partSize: this.opts.partSizeBytes,
      metadata: {
        [BLOB_META.key]: encodeKey(key),
        [BLOB_META.kind]: "part",
        [BLOB_META.upload]: uploadId,
        [BLOB_META.part]: String(partNumber),
      },
      signal: commit.signal,
    });
    const lastModified = this.ctx.clock();
    let highestToken: number | null;
    let replaced: PartManifest | null;
    try {
      await body.digest;
      await this.ctx.gate.require(bucket);
      ({ highestToken } = await runCommit(this.port, { bucket, key }, { op: "check" }, commit));
      await this.uploads.require(input); // aborted or completed meanwhile: NoSuchUpload
      const manifest = {
        v: 1 as const,
        partNumber,
        blob,
        md5: stored.md5Hex,
        size: stored.size,
        lastModified,
      };
      replaced = await this.uploads.putPart(bucket, uploadId, manifest, key);
    } catch (e) {
      // A part whose outcome is unknown may be recorded: its blob stays (the collector decides).
      if (!(e instanceof OutcomeUnknownError)) await this.ctx.removeBlob(bucket, blob);
      throw e;
    }
    if (replaced && replaced.blob !== blob) await this.ctx.removeBlob(bucket, replaced.blob);
    return {
      etag: `"${stored.md5Hex}"`,
      size: stored.size,
      lastModified: new Date(lastModified),
      highestToken,
    };
  }

  async completeUpload(input: CompleteUploadInput, commit: FencedCommit): Promise<PutObjectResult> {
    this.ctx.assertOpen();
    assertPartOrder(input.parts);
    const { bucket, key, uploadId } = input;
    const manifest = await this.uploads.require(input);
    const recorded = await this.uploads.partsAfter(bucket, uploadId, 0, MAX_PART_NUMBER);
    const byNumber = new Map(recorded.map((part) => [part.partNumber, part]));
    const used = selectParts(
      input.parts,
      (n) => byNumber.get(n),
      (part) => part,
    );

    const blob = this.ctx.layout.newBlobId();
    await this.assemble(input, blob, used);
    const version: LiveVersion = {
      blob,
      size: used.reduce((sum, part) => sum + part.size, 0),
      etag: multipartEtag(used.map((part) => part.md5)),
      lastModified: this.ctx.clock(),
      metadata: structuredClone(manifest.metadata),
      upload: uploadId,
    };
    try {
      await this.ctx.hooks?.("blob-stored", { op: "complete", bucket, key, attempt: 0 });
      await this.ctx.gate.require(bucket);
    } catch (e) {
      await this.ctx.removeBlob(bucket, blob);
      throw e;
    }
    // After prepare: the upload must still be there, with the parts that were assembled.
    const ready = async () => {
      await this.uploads.require(input);
      for (const part of used) {
        if ((await this.uploads.part(bucket, uploadId, part.partNumber))?.blob !== part.blob) {
          throw partReplaced(part.partNumber);
        }
      }
    };
    const { highestToken } = await runCommit(
      this.port,
      { bucket, key },
      { op: "put", version, ready },
      commit,
    );
    await this.uploads
      .remove(bucket, uploadId)
      .catch((err) =>
        this.ctx.log?.warn({ err, bucket, uploadId }, "s3 backend: removing a completed upload failed"),
      );
    return {
      etag: version.etag,
      size: version.size,
      lastModified: new Date(version.lastModified),
      highestToken,
      checksums: {},
    };
  }

  async completedBy(ref: UploadRef): Promise<string | null> {
    this.ctx.assertOpen();
    const live = liveOf((await this.ctx.records.read(ref.bucket, ref.key))?.record ?? null);
    return live?.upload === ref.uploadId ? live.etag : null;
  }

  async abortUpload(ref: UploadRef): Promise<void> {
    this.ctx.assertOpen();
    await this.uploads.require(ref);
    await this.uploads.remove(ref.bucket, ref.uploadId);
  }

  async listParts(input: ListPartsInput): Promise<ListPartsResult> {
    this.ctx.assertOpen();
    const marker = partNumberMarker(input);
    const upload = toUpload(input.bucket, await this.uploads.require(input));
    const rows =
      marker >= MAX_PART_NUMBER
        ? []
        : await this.uploads.partsAfter(input.bucket, input.uploadId, marker, input.maxParts + 1);
    return partsPage(upload, rows.map(toPartInfo), input.maxParts);
  }

  async listUploads(input: ListUploadsInput): Promise<ListUploadsResult> {
    this.ctx.assertOpen();
    assertNonNegative("maxUploads", input.maxUploads);
    await this.ctx.requireBucket(input.bucket);
    // In-progress uploads are few: all of them, sorted here (manifests are named by upload id).
    const sorted = (await this.uploads.all(input.bucket)).sort(compareUploads);
    return listUploadsPage(
      input,
      (marker) => (from) => seekUploads(sorted, from, marker),
      (m) => toUpload(input.bucket, m),
    );
  }

  /**
   * Aborts every upload initiated more than maxAgeMs ago (S3's AbortIncompleteMultipartUpload),
   * in every store bucket or the ones given.
   */
  async sweepAbandoned(options: { buckets?: string[] } = {}): Promise<{ removed: number }> {
    this.ctx.assertOpen();
    const buckets = options.buckets ?? (await this.ctx.store.listBuckets()).map((b) => b.name);
    const cutoff = this.ctx.clock() - this.opts.maxAgeMs;
    let removed = 0;
    for (const bucket of buckets) {
      for (const manifest of await this.uploads.all(bucket)) {
        if (manifest.initiated >= cutoff) continue;
        await this.uploads.remove(bucket, manifest.uploadId);
        removed++;
      }
    }
    return { removed };
  }

  /**
   * The final blob, copied part by part inside the store. A part blob gone meanwhile (replaced,
   * or the upload aborted) fails the assembly: NoSuchUpload or InvalidPart.
   */
  private async assemble(ref: UploadRef, blob: string, parts: PartManifest[]): Promise<void> {
    const { store, layout } = this.ctx;
    const name = layout.blobName(blob);
    const storeUpload = await store.createMultipart(ref.bucket, name, {
      [BLOB_META.key]: encodeKey(ref.key),
      [BLOB_META.kind]: "object",
    });
    try {
      const copied: { partNumber: number; etag: string }[] = [];
      for (const [i, part] of parts.entries()) {
        const etag = await store.uploadPartCopy(
          ref.bucket,
          name,
          storeUpload,
          i + 1,
          layout.blobName(part.blob),
        );
        if (etag === null) {
          await this.uploads.require(ref);
          throw partReplaced(part.partNumber);
        }
        copied.push({ partNumber: i + 1, etag });
      }
      await store.completeMultipart(ref.bucket, name, storeUpload, copied);
    } catch (e) {
      await store.abortMultipart(ref.bucket, name, storeUpload).catch(() => undefined);
      await this.ctx.removeBlob(ref.bucket, blob);
      throw e;
    }
  }
}
