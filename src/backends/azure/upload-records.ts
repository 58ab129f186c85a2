import { randomBytes } from "node:crypto";
import { DomainError } from "../../core/errors.js";
import { partInfo, type UploadFields } from "../multipart.js";
import type { PartInfo } from "../storage-backend.js";

/**
 * The blobs of a multipart upload, under the meta prefix of the object's container:
 *
 *   <meta>uploads/<uploadId>                 zero bytes; metadata `fencegate_upload` = base64url JSON
 *                                            {key, metadata, token, leaseId, initiator, initiated}
 *   <meta>parts/<uploadId>/<part, 5 digits>  the part's bytes; metadata `fencegate_part` = base64url
 *                                            JSON {md5, size, at}
 *
 * Upload ids are 44 hex digits: the initiation time (12) then 16 random bytes, so that ordering
 * an object's uploads by id orders them by initiation, as S3 lists them.
 */

export const UPLOAD_META = "fencegate_upload";
export const PART_META = "fencegate_part";

export type UploadRecord = UploadFields;

/**
 * `order`: when the attempt was committed, in microseconds of the real clock, strictly increasing
 * within a process (absent in records of older versions: `at` in milliseconds stands in).
 */
export type PartRecord = { md5: string; size: number; at: number; order?: number };

const UPLOAD_ID = /^[0-9a-f]{44}$/;

export const isUploadId = (id: string): boolean => UPLOAD_ID.test(id);

export const uploadsPrefix = (meta: string) => `${meta}uploads/`;
export const uploadBlobName = (meta: string, uploadId: string) => `${meta}uploads/${uploadId}`;
export const partsPrefix = (meta: string, uploadId?: string) =>
  uploadId === undefined ? `${meta}parts/` : `${meta}parts/${uploadId}/`;
/**
 * A part's blob: `<m>parts/<upload id>/<nnnnn>.<attempt>`, one blob per UploadPart request (older
 * versions wrote `<m>parts/<upload id>/<nnnnn>`). A blob's uncommitted blocks vanish when anyone
 * commits that blob, so two requests uploading the same part at once each stage their blocks on a
 * blob of their own; the part is the attempt committed last (partAttemptOrder), and each request
 * removes the attempts committed before its own once it has committed.
 */
export const partBlobName = (meta: string, uploadId: string, partNumber: number, attempt?: string) =>
  `${meta}parts/${uploadId}/${String(partNumber).padStart(5, "0")}${attempt === undefined ? "" : `.${attempt}`}`;

/** A fresh attempt name for partBlobName. */
export const newPartAttempt = (): string => randomBytes(16).toString("hex");

/** The upload id and part number of a part blob's name, or undefined when it is not one. */
export function parsePartName(
  meta: string,
  name: string,
): { uploadId: string; partNumber: number } | undefined {
  const match = /^([0-9a-f]{44})\/(\d{5})(?:\.[0-9a-f]{32})?$/.exec(name.slice(partsPrefix(meta).length));
  if (!name.startsWith(partsPrefix(meta)) || !match) return undefined;
  return { uploadId: match[1]!, partNumber: Number(match[2]) };
}

let lastOrder = 0;

/** A PartRecord's `order` for an attempt committed now. */
export function nextPartOrder(): number {
  lastOrder = Math.max(lastOrder + 1, Date.now() * 1000);
  return lastOrder;
}

type Attempt = { at: number; order?: number | undefined; name: string };

/**
 * The order of two attempts at one part: by the time each was committed (`order`, taken just
 * before the commit; replicas order by their clocks), then by name. The greatest is the part.
 */
export function partAttemptOrder(a: Attempt, b: Attempt): number {
  const ka = a.order ?? a.at * 1000;
  const kb = b.order ?? b.at * 1000;
  if (ka !== kb) return ka - kb;
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}

export const encodeJson = (value: unknown): string =>
  Buffer.from(JSON.stringify(value)).toString("base64url");

function decodeJson<T>(encoded: string | undefined, what: string): T {
  try {
    if (encoded === undefined) throw new Error("missing");
    return JSON.parse(Buffer.from(encoded, "base64url").toString("utf8")) as T;
  } catch {
    throw new DomainError("InternalError", `the fencegate metadata of ${what} is unreadable`);
  }
}

/** Metadata names come back in any case from some services. */
const metaValue = (metadata: Record<string, string> | undefined, name: string): string | undefined =>
  Object.entries(metadata ?? {}).find(([k]) => k.toLowerCase() === name)?.[1];

export const decodeUpload = (metadata: Record<string, string> | undefined, what: string) =>
  decodeJson<UploadRecord>(metaValue(metadata, UPLOAD_META), what);

export const decodePart = (metadata: Record<string, string> | undefined, what: string) =>
  decodeJson<PartRecord>(metaValue(metadata, PART_META), what);

export const toPartInfo = (partNumber: number, part: PartRecord): PartInfo =>
  partInfo(partNumber, part.size, part.md5, part.at);
