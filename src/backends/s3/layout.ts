import { createHash, randomBytes } from "node:crypto";

/**
 * Where fencegate keeps its own objects inside a store bucket, under the meta prefix `<m>`
 * (default `.fencegate/`). Everything else in the bucket is a "plain" object: bytes fencegate did
 * not write, readable through it, never deleted by it.
 *
 *   <m>r/<key>               the record of <key> (JSON): the commit point; lists in key order
 *   <m>l/<sha256 hex>        the record of a key too long to fit after `<m>r/` in S3's 1024 bytes
 *   <m>d/<blob id>           an immutable blob: an object version's or an upload part's bytes
 *   <m>u/<upload id>         a multipart upload's manifest (JSON)
 *   <m>u/<upload id>/<nnnnn> the manifest of its part nnnnn (JSON)
 *   <m>p/<random>            capability probes (short-lived)
 *   <m>t/<transaction id>    a fenced transaction's record (JSON): its commit point
 *   <m>deleted               present while the bucket is deleted for fencegate but kept in the
 *                            store because records in it still carry HCTs
 *   <m>location              the LocationConstraint the bucket was created with (text), when it
 *                            had one
 */

/** S3's key limit, in UTF-8 bytes. */
const MAX_STORE_KEY_BYTES = 1024;

/** Blob metadata (x-amz-meta-*): how the collector finds what references a blob. */
export const BLOB_META = {
  /** base64url of the object key. */
  key: "fg-key",
  /** "object" or "part". */
  kind: "fg-kind",
  upload: "fg-upload",
  part: "fg-part",
} as const;

export class Layout {
  readonly records: string;
  readonly longRecords: string;
  readonly blobs: string;
  readonly uploads: string;
  readonly probes: string;
  readonly transactions: string;
  readonly deletedMarker: string;
  readonly locationRecord: string;
  /** The longest key (UTF-8 bytes) whose record fits at `<m>r/<key>`. */
  private readonly maxDirectKeyBytes: number;

  constructor(readonly meta: string) {
    this.records = `${meta}r/`;
    this.longRecords = `${meta}l/`;
    this.blobs = `${meta}d/`;
    this.uploads = `${meta}u/`;
    this.probes = `${meta}p/`;
    this.transactions = `${meta}t/`;
    this.deletedMarker = `${meta}deleted`;
    this.locationRecord = `${meta}location`;
    this.maxDirectKeyBytes = MAX_STORE_KEY_BYTES - Buffer.byteLength(this.records);
  }

  /** Whether `key`'s record sits at `<m>r/<key>` (in key order) rather than under `<m>l/`. */
  isDirect(key: string): boolean {
    return Buffer.byteLength(key) <= this.maxDirectKeyBytes;
  }

  recordName(key: string): string {
    if (this.isDirect(key)) return this.records + key;
    return this.longRecords + createHash("sha256").update(key).digest("hex");
  }

  /** The object key of a `<m>r/` record name. */
  keyOfRecordName(name: string): string {
    return name.slice(this.records.length);
  }

  blobName(id: string): string {
    return this.blobs + id;
  }

  /** `t` + the staging time (12 hex digits of ms) + 20 random hex digits: see blobTime. */
  newBlobId(now: number = Date.now()): string {
    return `t${Math.max(0, now).toString(16).padStart(12, "0")}${randomBytes(10).toString("hex")}`;
  }

  manifestName(uploadId: string): string {
    return this.uploads + uploadId;
  }

  partsPrefix(uploadId: string): string {
    return `${this.uploads}${uploadId}/`;
  }

  /** Part numbers are zero-padded so that manifests list in part number order. */
  partName(uploadId: string, partNumber: number): string {
    return this.partsPrefix(uploadId) + String(partNumber).padStart(5, "0");
  }

  isMeta(name: string): boolean {
    return name.startsWith(this.meta);
  }
}

export const encodeKey = (key: string): string => Buffer.from(key, "utf8").toString("base64url");
export const decodeKey = (encoded: string): string => Buffer.from(encoded, "base64url").toString("utf8");

/** Upload ids fencegate issues: 12 hex digits of initiation time, then random hex (see newUploadId). */
export const UPLOAD_ID = /^[0-9a-f]{44}$/;

/**
 * When a blob was staged (ms, the stager's clock), from its id; 0 for ids of older versions,
 * which carried no time. The collector marks a record with the time before which blobs of its
 * key may be gone, and a commit whose blob is older than the mark is refused (object-port.ts).
 */
export function blobTime(id: string): number {
  if (id.length !== 33 || id[0] !== "t") return 0;
  const time = Number.parseInt(id.slice(1, 13), 16);
  return Number.isSafeInteger(time) ? time : 0;
}
