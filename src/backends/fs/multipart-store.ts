import { Readable } from "node:stream";
import type { Clock } from "../../core/clock.js";
import { runCommit } from "../../fence/commit-driver.js";
import type { EmbeddedDomain } from "../../sqlite/db.js";
import { assertNonNegative, partReplaced } from "../backend-errors.js";
import {
  assertPartNumber,
  assertPartOrder,
  listUploadsPage,
  multipartEtag,
  newUploadId,
  partInfo,
  partNumberMarker,
  partsPage,
  selectParts,
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
  PartInfo,
  PutObjectResult,
  UploadPartInput,
  UploadPartResult,
  UploadRef,
} from "../storage-backend.js";
import type { BlobStore } from "./blob-store.js";
import type { FsMetadataStore, FsVersion, StoredMetadata } from "./metadata-store.js";
import { type FsMultipartMetadata, type PartRow, toUpload } from "./multipart-metadata.js";
import type { FsObjectPort } from "./object-port.js";

type FsMultipartOptions = {
  clock: Clock;
  domain: EmbeddedDomain;
  /** Uploads initiated longer ago than this are aborted by sweepAbandoned(). */
  maxAgeMs: number;
  /** Refuses calls once the backend is closed. */
  assertOpen: () => void;
};

const SWEEP_BATCH = 100;

/**
 * Multipart uploads of the fs backend. Parts are blobs like objects' (written to
 * `blobs/tmp`, fsynced, renamed into a shard) referenced by `fs_parts` rows; completion
 * concatenates the listed part blobs into a new blob, fsyncs it, and only then commits the
 * object row in one step of the database's domain that checks the HCT, the conditions, and
 * that the upload and its parts are still what was assembled. Part blobs are unlinked after the
 * upload's rows are gone; a crash in between leaves orphans that the startup sweep removes.
 */
export class FsMultipartStore implements MultipartStore {
  constructor(
    private readonly rows: FsMultipartMetadata,
    private readonly objects: FsMetadataStore,
    private readonly blobs: BlobStore,
    /** The backend's commit port (src/fence/commit-port.ts). */
    private readonly port: FsObjectPort,
    private readonly opts: FsMultipartOptions,
  ) {}

  async createUpload(input: CreateUploadInput, commit: FencedCommit): Promise<CreateUploadResult> {
    this.opts.assertOpen();
    const initiated = this.opts.clock();
    const uploadId = newUploadId(initiated);
    // Creating an upload changes nothing visible: the HCT rule is checked, the HCT not raised.
    const inStep = () => this.rows.insertUpload({ ...input, uploadId, initiated });
    const { highestToken } = await runCommit(this.port, input, { op: "check", inStep }, commit);
    return { uploadId, highestToken };
  }

  async getUpload(ref: UploadRef): Promise<MultipartUpload> {
    this.opts.assertOpen();
    return toUpload(this.rows.requireUpload(ref));
  }

  async uploadPart(input: UploadPartInput, commit: FencedCommit): Promise<UploadPartResult> {
    this.opts.assertOpen();
    assertPartNumber(input.partNumber);
    // Refuse before receiving the body what recording the part would refuse anyway.
    this.rows.requireUpload(input);

    // No await before this call: the body must be piped (and its errors listened to) at once.
    const blob = await this.blobs.write(input.body.stream);
    const lastModified = this.opts.clock();
    let replacedBlob: string | null = null;
    let highestToken: number | null;
    try {
      await input.body.digest;
      // A part changes nothing visible: the HCT rule is checked against the object, not raised.
      const inStep = () => {
        replacedBlob = this.rows.recordPart({
          ref: input,
          partNumber: input.partNumber,
          blob: blob.id,
          size: blob.size,
          md5: blob.md5Hex,
          lastModified,
        });
      };
      ({ highestToken } = await runCommit(this.port, input, { op: "check", inStep }, commit));
    } catch (e) {
      await this.blobs.remove(blob.id);
      throw e;
    }
    if (replacedBlob) await this.blobs.remove(replacedBlob);
    return {
      etag: `"${blob.md5Hex}"`,
      size: blob.size,
      lastModified: new Date(lastModified),
      highestToken,
    };
  }

  async completeUpload(input: CompleteUploadInput, commit: FencedCommit): Promise<PutObjectResult> {
    this.opts.assertOpen();
    assertPartOrder(input.parts);
    const upload = toUpload(this.rows.requireUpload(input));
    const byNumber = new Map(this.rows.parts(upload.uploadId).map((row) => [row.part_number, row]));
    const used = selectParts(
      input.parts,
      (n) => byNumber.get(n),
      (row) => ({ ...row, partNumber: row.part_number }),
    );

    const expectedSize = used.reduce((sum, part) => sum + part.size, 0);
    const blob = await this.blobs.write(Readable.from(this.concatenate(input, used)));
    const etag = multipartEtag(used.map((part) => part.md5));
    const lastModified = this.opts.clock();
    if (blob.size !== expectedSize) {
      await this.blobs.remove(blob.id);
      throw new Error(`assembled ${blob.size} bytes for upload ${upload.uploadId}, expected ${expectedSize}`);
    }
    let partBlobs: string[] = [];
    const version: FsVersion = {
      body: { blob: blob.id },
      size: blob.size,
      etag,
      lastModified,
      metadata: { ...upload.metadata, upload: upload.uploadId },
      // In the commit's step: the upload and the parts assembled are still there, and go.
      inStep: () => {
        partBlobs = this.rows.completeInStep(
          input,
          used.map((part) => ({ partNumber: part.part_number, blob: part.blob })),
        );
      },
    };
    const { highestToken } = await runCommit(this.port, input, { op: "put", version }, commit);
    await Promise.all(partBlobs.map((id) => this.blobs.remove(id)));
    return {
      etag,
      size: blob.size,
      lastModified: new Date(lastModified),
      highestToken,
      checksums: {},
    };
  }

  async completedBy(ref: UploadRef): Promise<string | null> {
    this.opts.assertOpen();
    const row = this.objects.currentLive(ref.bucket, ref.key);
    if (!row) return null;
    return (JSON.parse(row.metadata) as StoredMetadata).upload === ref.uploadId ? row.etag : null;
  }

  async abortUpload(ref: UploadRef): Promise<void> {
    this.opts.assertOpen();
    const blobs = await this.opts.domain.run(() => this.rows.remove(ref));
    await Promise.all(blobs.map((id) => this.blobs.remove(id)));
  }

  async listParts(input: ListPartsInput): Promise<ListPartsResult> {
    this.opts.assertOpen();
    const marker = partNumberMarker(input);
    // One synchronous stretch: the upload and its parts are read as one snapshot.
    const upload = toUpload(this.rows.requireUpload(input));
    const rows = this.rows.partsAfter(upload.uploadId, marker, input.maxParts + 1);
    return partsPage(upload, rows.map(toPartInfo), input.maxParts);
  }

  async listUploads(input: ListUploadsInput): Promise<ListUploadsResult> {
    this.opts.assertOpen();
    assertNonNegative("maxUploads", input.maxUploads);
    this.objects.requireBucket(input.bucket);
    return listUploadsPage(input, (marker) => (from) => this.rows.seek(input.bucket, from, marker), toUpload);
  }

  /** Aborts every upload initiated more than maxAgeMs ago (S3's AbortIncompleteMultipartUpload). */
  async sweepAbandoned(): Promise<{ removed: number }> {
    this.opts.assertOpen();
    const cutoff = this.opts.clock() - this.opts.maxAgeMs;
    let removed = 0;
    for (;;) {
      const ids = this.rows.initiatedBefore(cutoff, SWEEP_BATCH);
      for (const id of ids) {
        const blobs = await this.opts.domain.run(() => this.rows.removeById(id));
        await Promise.all(blobs.map((blob) => this.blobs.remove(blob)));
        removed++;
      }
      if (ids.length < SWEEP_BATCH) return { removed };
    }
  }

  isBlobReferenced(id: string): boolean {
    return this.rows.isBlobReferenced(id);
  }

  /** The parts' bytes one after the other; a part replaced or aborted meanwhile fails the assembly. */
  private async *concatenate(ref: UploadRef, parts: PartRow[]): AsyncGenerator<Buffer> {
    for (const part of parts) {
      const handle = await this.blobs.openForRead(part.blob);
      if (!handle) {
        this.rows.requireUpload(ref); // NoSuchUpload when it was aborted or completed meanwhile
        throw partReplaced(part.part_number);
      }
      const stream = handle.createReadStream();
      try {
        for await (const chunk of stream) yield chunk as Buffer;
      } finally {
        stream.destroy();
      }
    }
  }
}

const toPartInfo = (row: PartRow): PartInfo =>
  partInfo(row.part_number, row.size, row.md5, row.last_modified);
