import type { Clock } from "../../core/clock.js";
import type { MemoryDomain } from "../../core/tx.js";
import { runCommit } from "../../fence/commit-driver.js";
import { assertNonNegative } from "../backend-errors.js";
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
import { bufferBody } from "./memory-body.js";
import type { MemoryObjects, MemoryVersion } from "./memory-objects.js";
import { MemoryUploads, type PartRecord, toUpload } from "./memory-uploads.js";
import type { MemoryObjectPort } from "./object-port.js";

export type MemoryMultipartOptions = {
  clock: Clock;
  domain: MemoryDomain;
  /** Uploads initiated longer ago than this are aborted by sweepAbandoned(). */
  maxAgeMs: number;
  /** Refuses calls once the backend is closed. */
  assertOpen: () => void;
};

/**
 * Multipart uploads of the memory backend, with the fs backend's rules: a part is buffered and
 * verified before it is recorded; a completion assembles the listed parts, then commits the
 * object in one step of the domain that checks the HCT, the conditions, and that the upload and
 * its parts are still the ones assembled.
 */
export class MemoryMultipartStore implements MultipartStore {
  private readonly uploads: MemoryUploads;
  /** Orders uploads initiated within the same millisecond by initiation. */
  private sequence = 0;

  constructor(
    private readonly objects: MemoryObjects,
    /** The backend's commit port (src/fence/commit-port.ts). */
    private readonly port: MemoryObjectPort,
    private readonly opts: MemoryMultipartOptions,
  ) {
    this.uploads = new MemoryUploads(opts.domain);
  }

  async createUpload(input: CreateUploadInput, commit: FencedCommit): Promise<CreateUploadResult> {
    this.opts.assertOpen();
    const initiated = this.opts.clock();
    const uploadId = newUploadId(initiated, this.sequence++);
    // Creating an upload changes nothing visible: the HCT rule is checked, the HCT not raised.
    const inStep = () => this.uploads.insertUpload({ ...input, uploadId, initiated });
    const { highestToken } = await runCommit(this.port, input, { op: "check", inStep }, commit);
    return { uploadId, highestToken };
  }

  async getUpload(ref: UploadRef): Promise<MultipartUpload> {
    this.opts.assertOpen();
    return toUpload(this.uploads.requireUpload(ref));
  }

  async uploadPart(input: UploadPartInput, commit: FencedCommit): Promise<UploadPartResult> {
    this.opts.assertOpen();
    assertPartNumber(input.partNumber);
    // Refuse before receiving the body what recording the part would refuse anyway.
    this.uploads.requireUpload(input);

    // No await before this call: the body must be read (and its errors listened to) at once.
    const body = await bufferBody(input.body.stream);
    const lastModified = this.opts.clock();
    await input.body.digest;
    const part: PartRecord = {
      partNumber: input.partNumber,
      bytes: body.bytes,
      size: body.size,
      md5Hex: body.md5Hex,
      lastModified,
    };
    const inStep = () => this.uploads.recordPart(input, part);
    const { highestToken } = await runCommit(this.port, input, { op: "check", inStep }, commit);
    return { etag: `"${body.md5Hex}"`, size: body.size, lastModified: new Date(lastModified), highestToken };
  }

  async completeUpload(input: CompleteUploadInput, commit: FencedCommit): Promise<PutObjectResult> {
    this.opts.assertOpen();
    assertPartOrder(input.parts);
    const upload = this.uploads.requireUpload(input);
    const used = selectParts(
      input.parts,
      (n) => upload.parts.get(n),
      (r) => ({ ...r, md5: r.md5Hex }),
    );
    const bytes = Buffer.concat(
      used.map((part) => part.bytes),
      used.reduce((sum, part) => sum + part.size, 0),
    );
    const etag = multipartEtag(used.map((part) => part.md5Hex));
    const lastModified = this.opts.clock();
    const version: MemoryVersion = {
      bytes,
      size: bytes.length,
      etag,
      lastModified,
      metadata: { ...structuredClone(upload.metadata), upload: upload.uploadId },
      // In the commit's step: the upload and the parts assembled are still there, and go.
      inStep: () => this.uploads.completeInStep(input, used),
    };
    const { highestToken } = await runCommit(this.port, input, { op: "put", version }, commit);
    return {
      etag,
      size: bytes.length,
      lastModified: new Date(lastModified),
      highestToken,
      checksums: {},
    };
  }

  async completedBy(ref: UploadRef): Promise<string | null> {
    this.opts.assertOpen();
    const live = this.objects.liveOrNull(ref.bucket, ref.key);
    return live?.metadata.upload === ref.uploadId ? live.etag : null;
  }

  async abortUpload(ref: UploadRef): Promise<void> {
    this.opts.assertOpen();
    await this.opts.domain.run(() => this.uploads.remove(ref));
  }

  async listParts(input: ListPartsInput): Promise<ListPartsResult> {
    this.opts.assertOpen();
    const marker = partNumberMarker(input);
    const record = this.uploads.requireUpload(input);
    const after = this.uploads.parts(record).filter((part) => part.partNumber > marker);
    return partsPage(toUpload(record), after.map(toPartInfo), input.maxParts);
  }

  async listUploads(input: ListUploadsInput): Promise<ListUploadsResult> {
    this.opts.assertOpen();
    assertNonNegative("maxUploads", input.maxUploads);
    this.objects.requireBucket(input.bucket);
    return listUploadsPage(input, (marker) => this.uploads.seeker(input.bucket, marker), toUpload);
  }

  /** Aborts every upload initiated more than maxAgeMs ago (S3's AbortIncompleteMultipartUpload). */
  async sweepAbandoned(): Promise<{ removed: number }> {
    this.opts.assertOpen();
    const cutoff = this.opts.clock() - this.opts.maxAgeMs;
    const removed = await this.opts.domain.run(() => this.uploads.removeInitiatedBefore(cutoff));
    return { removed };
  }

  /** How many parts the live uploads hold together (for tests: none after completion or abort). */
  storedParts(): number {
    return this.uploads.storedParts();
  }
}

const toPartInfo = (part: PartRecord): PartInfo =>
  partInfo(part.partNumber, part.size, part.md5Hex, part.lastModified);
