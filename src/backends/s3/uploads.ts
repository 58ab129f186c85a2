import { partInfo, uploadOf } from "../multipart.js";
import type { MultipartUpload, ObjectMetadata, PartInfo } from "../storage-backend.js";

/** A multipart upload's manifest, `<m>u/<upload id>`: written once, removed at completion or abort. */
export type UploadManifest = {
  v: 1;
  uploadId: string;
  key: string;
  metadata: ObjectMetadata;
  token: number | null;
  leaseId: string | null;
  initiator: string | null;
  initiated: number;
  /** The fenced transaction the upload was created in; its completion is staged in it. */
  transactionId?: string;
};

/**
 * A part's manifest, `<m>u/<upload id>/<nnnnn>`: the part's blob and what S3 reports of it.
 * Uploading the part again writes a new manifest naming a new blob (so a new ETag).
 */
export type PartManifest = {
  v: 1;
  partNumber: number;
  blob: string;
  md5: string;
  size: number;
  lastModified: number;
};

export function parseUploadManifest(text: string, where: string): UploadManifest {
  const value = JSON.parse(text) as Partial<UploadManifest>;
  if (
    value?.v !== 1 ||
    typeof value.uploadId !== "string" ||
    typeof value.key !== "string" ||
    typeof value.initiated !== "number"
  ) {
    throw new Error(`${where} is not a fencegate upload manifest`);
  }
  return value as UploadManifest;
}

export function parsePartManifest(text: string, where: string): PartManifest {
  const value = JSON.parse(text) as Partial<PartManifest>;
  if (
    value?.v !== 1 ||
    !Number.isSafeInteger(value.partNumber) ||
    typeof value.blob !== "string" ||
    typeof value.md5 !== "string" ||
    typeof value.size !== "number"
  ) {
    throw new Error(`${where} is not a fencegate part manifest`);
  }
  return value as PartManifest;
}

export const toUpload = (bucket: string, m: UploadManifest): MultipartUpload =>
  uploadOf(bucket, m.uploadId, { ...m, metadata: structuredClone(m.metadata) });

export const toPartInfo = (p: PartManifest): PartInfo =>
  partInfo(p.partNumber, p.size, p.md5, p.lastModified);
