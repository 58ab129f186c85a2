import { createHash, randomBytes } from "node:crypto";
import { DomainError } from "../core/errors.js";
import { normalizeEtag } from "../core/etag.js";
import { assertNonNegative } from "./backend-errors.js";
import { compareKeys, listSorted, type SeekFn, type SeekFrom, seekSorted } from "./list-helper.js";
import {
  type CompletedPart,
  type ListPartsInput,
  type ListPartsResult,
  type ListUploadsInput,
  type ListUploadsResult,
  MAX_PART_NUMBER,
  MIN_PART_NUMBER,
  MIN_PART_SIZE,
  type MultipartUpload,
  type ObjectMetadata,
  type PartInfo,
} from "./storage-backend.js";

/** S3's multipart rules that every backend applies the same way. */

export function assertPartNumber(partNumber: number): void {
  if (!Number.isSafeInteger(partNumber) || partNumber < MIN_PART_NUMBER || partNumber > MAX_PART_NUMBER) {
    throw new DomainError(
      "InvalidArgument",
      `Part number must be an integer between ${MIN_PART_NUMBER} and ${MAX_PART_NUMBER}, inclusive`,
      { partNumber },
    );
  }
}

/** The part list of a completion must name each part once, in ascending order. */
export function assertPartOrder(parts: readonly CompletedPart[]): void {
  if (parts.length === 0) throw new DomainError("MalformedXML", "You must specify at least one part");
  let previous = 0;
  for (const part of parts) {
    if (
      !Number.isSafeInteger(part.partNumber) ||
      part.partNumber < MIN_PART_NUMBER ||
      part.partNumber > MAX_PART_NUMBER
    ) {
      throw new DomainError("InvalidPart", `part number ${part.partNumber} is not a valid part number`, {
        partNumber: part.partNumber,
      });
    }
    if (part.partNumber <= previous) {
      throw new DomainError(
        "InvalidPartOrder",
        "The list of parts was not in ascending order. Parts must be ordered by part number.",
        { partNumber: part.partNumber },
      );
    }
    previous = part.partNumber;
  }
}

/** What a completion checks of a part a backend recorded. */
type RecordedPart = { partNumber: number; md5: string; size: number };

/**
 * The recorded parts a completion names, in its order, checked against S3's rules: each must have
 * been uploaded with the ETag given (InvalidPart), and each but the last must be at least
 * MIN_PART_SIZE (EntityTooSmall). `find` looks a part up by number; `view` reads what is checked.
 */
export function selectParts<T>(
  wanted: readonly CompletedPart[],
  find: (partNumber: number) => T | undefined,
  view: (part: T) => RecordedPart,
): T[] {
  const used = wanted.map((part) => {
    const found = find(part.partNumber);
    if (found === undefined || bareEtag(part.etag) !== view(found).md5) {
      throw new DomainError(
        "InvalidPart",
        "One or more of the specified parts could not be found. The part may not have been uploaded, or the specified entity tag may not match the part's entity tag.",
        { partNumber: part.partNumber },
      );
    }
    return found;
  });
  used.forEach((found, i) => {
    const part = view(found);
    if (i < used.length - 1 && part.size < MIN_PART_SIZE) {
      throw new DomainError(
        "EntityTooSmall",
        "Your proposed upload is smaller than the minimum allowed size",
        {
          partNumber: part.partNumber,
          minSizeAllowed: MIN_PART_SIZE,
          proposedSize: part.size,
        },
      );
    }
  });
  return used;
}

/** `"<md5 of the concatenated binary part md5s>-N"`, as S3 computes a multipart ETag. */
export function multipartEtag(partMd5Hexes: readonly string[]): string {
  const md5 = createHash("md5");
  for (const hex of partMd5Hexes) md5.update(Buffer.from(hex, "hex"));
  return `"${md5.digest("hex")}-${partMd5Hexes.length}"`;
}

/** An ETag as a client may send it (quoted or not, weak or not) reduced to its bare value. */
export const bareEtag = normalizeEtag;

/** ListParts' checks: its counts are non-negative; the part number marker (0 when none). */
export function partNumberMarker(input: ListPartsInput): number {
  assertNonNegative("maxParts", input.maxParts);
  const marker = input.partNumberMarker ?? 0;
  assertNonNegative("partNumberMarker", marker);
  return marker;
}

/** A ListParts page from the parts after the marker (more than maxParts of them when more follow). */
export function partsPage(
  upload: MultipartUpload,
  after: readonly PartInfo[],
  maxParts: number,
): ListPartsResult {
  const parts = after.slice(0, maxParts);
  const isTruncated = after.length > maxParts;
  const last = parts.at(-1);
  return {
    upload,
    parts,
    isTruncated,
    ...(isTruncated && last ? { nextPartNumberMarker: last.partNumber } : {}),
  };
}

/** ListMultipartUploads' marker: a key, and within that key the last upload id returned. */
type UploadMarker = { key: string; uploadId: string };

/**
 * A ListMultipartUploads page of valid counts (S3 listing rules over uploads in key, then upload id, order).
 * `seekWith` gives the seek of the bucket's uploads that, seeking just after the key marker,
 * continues within that key after the upload id marker; `toUpload` reads an entry.
 */
export function listUploadsPage<E extends { key: string }>(
  input: ListUploadsInput,
  seekWith: (marker: UploadMarker | undefined) => SeekFn<E>,
  toUpload: (entry: E) => MultipartUpload,
): ListUploadsResult {
  const marker =
    input.keyMarker !== undefined && input.uploadIdMarker !== undefined
      ? { key: input.keyMarker, uploadId: input.uploadIdMarker }
      : undefined;
  const page = listSorted(
    {
      ...(input.prefix !== undefined ? { prefix: input.prefix } : {}),
      ...(input.delimiter !== undefined ? { delimiter: input.delimiter } : {}),
      ...(input.keyMarker !== undefined ? { startAfter: input.keyMarker } : {}),
      maxKeys: input.maxUploads,
    },
    seekWith(marker),
  );
  const uploads = page.objects.map(toUpload);
  const last = uploads.at(-1);
  const result: ListUploadsResult = {
    uploads,
    commonPrefixes: page.commonPrefixes,
    isTruncated: page.isTruncated,
  };
  if (page.isTruncated && page.nextStartAfter !== undefined) {
    result.nextKeyMarker = page.nextStartAfter;
    // The last entry was an upload (not a common prefix): continue within its key.
    if (last && last.key === page.nextStartAfter) result.nextUploadIdMarker = last.uploadId;
  }
  return result;
}

// Upload ids are lower-case hex, so code unit order is byte order.
const compareIds = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** Uploads in listing order: by key (S3 order), then by upload id (= by initiation). */
export const compareUploads = (a: UploadMarker, b: UploadMarker): number =>
  compareKeys(a.key, b.key) || compareIds(a.uploadId, b.uploadId);

/**
 * Uploads of `sorted` (in compareUploads order) from `from`; seeking just after the key marker
 * with an upload id marker, within that key after that upload (even when it is gone by now).
 */
export function seekUploads<E extends UploadMarker>(
  sorted: readonly E[],
  from: SeekFrom,
  marker: UploadMarker | undefined,
): Generator<E> {
  return seekSorted(sorted, (upload) => {
    const order = compareKeys(upload.key, from.key);
    if (from.inclusive) return order >= 0;
    if (marker && marker.key === from.key && order === 0)
      return compareIds(upload.uploadId, marker.uploadId) > 0;
    return order > 0;
  });
}

/** Uploads this process initiated: orders those of one millisecond by initiation. */
let uploadSequence = 0;

/**
 * A new upload id: 44 hex digits, the initiation time (12) first, so that ordering an object's
 * uploads by id orders them by initiation, as S3 lists them; then 8 digits of this process's
 * sequence (uploads initiated within the same millisecond keep their order) and 12 random bytes.
 */
export function newUploadId(initiated: number): string {
  const time = Math.max(0, initiated).toString(16).padStart(12, "0");
  const seq = (uploadSequence++ % 0x1_0000_0000).toString(16).padStart(8, "0");
  return `${time}${seq}${randomBytes(12).toString("hex")}`;
}

/** An upload as a backend records it (initiated: ms since the epoch). */
export type UploadFields = {
  key: string;
  metadata: ObjectMetadata;
  token: number | null;
  leaseId: string | null;
  initiator: string | null;
  initiated: number;
  /** The fenced transaction the upload was created in: its completion is staged in it. */
  transactionId?: string | null | undefined;
};

export function uploadOf(bucket: string, uploadId: string, upload: UploadFields): MultipartUpload {
  return {
    uploadId,
    bucket,
    key: upload.key,
    metadata: upload.metadata,
    token: upload.token,
    leaseId: upload.leaseId,
    initiator: upload.initiator,
    initiated: new Date(upload.initiated),
    ...(upload.transactionId ? { transactionId: upload.transactionId } : {}),
  };
}

/** What ListParts reports of a recorded part. */
export const partInfo = (
  partNumber: number,
  size: number,
  md5Hex: string,
  lastModified: number,
): PartInfo => ({
  partNumber,
  size,
  etag: `"${md5Hex}"`,
  lastModified: new Date(lastModified),
});
