import { DomainError } from "../../core/errors.js";
import type { Checksums, ObjectHeaders, ObjectInfo } from "../storage-backend.js";

/**
 * fencegate's state of one object, kept in the metadata of the blob at the object's own name,
 * so that the state and the bytes change together in one conditional call.
 *
 * Azure metadata names must be C# identifiers and values are sent as HTTP headers, while S3
 * user metadata names and values are not that constrained: the authoritative state is one value,
 * `fencegate`, holding base64url JSON. Two plain values repeat what a person or tool reading the
 * container directly most needs: `fencegate_hct` (the HCT, decimal) and `fencegate_tombstone`
 * ("true" on a deleted object's tombstone). fencegate reads only `fencegate`.
 */

export const STATE_KEY = "fencegate";
export const HCT_KEY = "fencegate_hct";
export const TOMBSTONE_KEY = "fencegate_tombstone";
/** ADLS Gen2 marks a directory's blob with this metadata. */
const FOLDER_KEY = "hdi_isfolder";

export type StoredState = {
  v: 1;
  hct: number | null;
  /** A tombstone: the object is deleted, the blob (zero bytes) only keeps the HCT. */
  deleted?: true;
  /** The S3 ETag, quoted: `"<md5 hex>"` or `"<hex>-N"`. */
  etag?: string;
  headers?: ObjectHeaders;
  meta?: Record<string, string>;
  checksums?: Checksums;
  /**
   * The id of the write that stored this state: a commit whose answer was lost (a timeout, a
   * retried request) recognises its own write when it reads the blob again.
   */
  w?: string;
  /** The ids of the writes before it, oldest first (with `w`, at most WRITE_HISTORY). */
  h?: string[];
  /** The multipart upload whose completion made it (a retried completion is answered again). */
  u?: string;
  /** The note of the last write that put or deleted the object (FencedCommit.note). */
  a?: string;
  /**
   * A write of a fenced transaction staged over this state (commit-port.ts Pending): it becomes
   * the live state only once its transaction's record says committed and lists it.
   */
  p?: StoredPending;
};

/**
 * A pending transaction write as the object's state keeps it: a delete, or a put whose bytes are
 * the staging blob `b` (under the meta prefix) and whose description is the rest.
 */
export type StoredPending = {
  tx: string;
  token: number;
  kind: "put" | "delete";
  /** The staging write's id. */
  w: string;
  /** The write's note. */
  a?: string;
  /** A put: the staging blob's name, its size, the S3 ETag, headers, metadata, checksums, upload. */
  b?: string;
  size?: number;
  etag?: string;
  headers?: ObjectHeaders;
  meta?: Record<string, string>;
  checksums?: Checksums;
  u?: string;
  /** When it was staged (ms since the epoch): a reader's Last-Modified until it is rolled forward. */
  t?: number;
};

/** What the gateway sees of the blob at an object's name. */
export type BlobView = {
  /** A committed blob exists at the name (live, tombstone, or a directory marker). */
  exists: boolean;
  /** Azure's ETag of that blob: the compare-and-swap token of the next commit. */
  azureEtag: string | null;
  /** The object's HCT, live or deleted. */
  hct: number | null;
  /** A live object, visible through the gateway. */
  live: boolean;
  /** The live object's S3 ETag (quoted), else null. */
  s3Etag: string | null;
  /** The stored state; null for a blob written without fencegate (or none). */
  state: StoredState | null;
  /** The blob's metadata as Azure returned it (kept by HCT raises of adopted blobs). */
  rawMetadata: Record<string, string>;
  info: Omit<ObjectInfo, "key"> | null;
};

export const MISSING: BlobView = {
  exists: false,
  azureEtag: null,
  hct: null,
  live: false,
  s3Etag: null,
  state: null,
  rawMetadata: {},
  info: null,
};

/** The properties of a blob as Get Blob Properties, Download and List Blobs give them. */
type BlobProps = {
  etag?: string | undefined;
  metadata?: Record<string, string> | undefined;
  contentLength?: number | undefined;
  lastModified?: Date | undefined;
  contentMD5?: Uint8Array | undefined;
  contentType?: string | undefined;
  contentEncoding?: string | undefined;
  contentDisposition?: string | undefined;
  contentLanguage?: string | undefined;
  cacheControl?: string | undefined;
};

export function encodeState(state: StoredState): Record<string, string> {
  const metadata: Record<string, string> = {
    [STATE_KEY]: Buffer.from(JSON.stringify(state)).toString("base64url"),
  };
  if (state.hct !== null) metadata[HCT_KEY] = String(state.hct);
  if (state.deleted) metadata[TOMBSTONE_KEY] = "true";
  return metadata;
}

/** Azure's metadata names are case-insensitive; the SDK may hand them back in any case. */
function lowerKeys(metadata: Record<string, string> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(metadata ?? {})) out[name.toLowerCase()] = value;
  return out;
}

function decodeState(encoded: string, where: string): StoredState {
  let state: unknown;
  try {
    state = JSON.parse(Buffer.from(encoded, "base64url").toString("utf8"));
  } catch {
    state = undefined;
  }
  const s = state as Partial<StoredState> | undefined;
  const hctOk = s?.hct === null || (typeof s?.hct === "number" && Number.isSafeInteger(s.hct) && s.hct >= 0);
  const historyOk = s?.h === undefined || (Array.isArray(s.h) && s.h.every((id) => typeof id === "string"));
  const p = s?.p;
  const pendingOk =
    p === undefined ||
    (typeof p === "object" &&
      p !== null &&
      typeof p.tx === "string" &&
      Number.isSafeInteger(p.token) &&
      typeof p.w === "string" &&
      (p.kind === "delete" ||
        (p.kind === "put" &&
          typeof p.b === "string" &&
          typeof p.etag === "string" &&
          Number.isSafeInteger(p.size))));
  if (s?.v !== 1 || !hctOk || !historyOk || !pendingOk || (!s.deleted && typeof s.etag !== "string")) {
    // Never guess: reading this blob as unfenced would drop its HCT.
    throw new DomainError(
      "InternalError",
      `the fencegate metadata of ${where} is unreadable; fencegate will not write over it`,
    );
  }
  return s as StoredState;
}

/** Reads the blob's state; `where` names it in errors. */
export function viewOf(props: BlobProps, where: string): BlobView {
  const rawMetadata = props.metadata ?? {};
  const metadata = lowerKeys(rawMetadata);
  const azureEtag = props.etag ?? null;
  const size = props.contentLength ?? 0;
  const lastModified = props.lastModified ?? new Date(0);
  const encoded = metadata[STATE_KEY];
  if (encoded !== undefined) {
    const state = decodeState(encoded, where);
    if (state.deleted) {
      return { ...MISSING, exists: true, azureEtag, hct: state.hct, state, rawMetadata };
    }
    const info: Omit<ObjectInfo, "key"> = {
      size,
      etag: state.etag!,
      lastModified,
      headers: state.headers ?? {},
      userMetadata: state.meta ?? {},
      ...(state.checksums && Object.keys(state.checksums).length > 0 ? { checksums: state.checksums } : {}),
    };
    return {
      exists: true,
      azureEtag,
      hct: state.hct,
      live: true,
      s3Etag: info.etag,
      state,
      rawMetadata,
      info,
    };
  }
  if (metadata[FOLDER_KEY] === "true") {
    // An ADLS Gen2 directory: a path, not an object.
    return { ...MISSING, exists: true, azureEtag, rawMetadata };
  }
  // A blob written without fencegate: readable and writable, unfenced until its first fenced write.
  const s3Etag = adoptedEtag(props);
  const headers: ObjectHeaders = {};
  if (props.contentType) headers.contentType = props.contentType;
  if (props.contentEncoding) headers.contentEncoding = props.contentEncoding;
  if (props.contentDisposition) headers.contentDisposition = props.contentDisposition;
  if (props.contentLanguage) headers.contentLanguage = props.contentLanguage;
  if (props.cacheControl) headers.cacheControl = props.cacheControl;
  const info: Omit<ObjectInfo, "key"> = { size, etag: s3Etag, lastModified, headers, userMetadata: metadata };
  return { exists: true, azureEtag, hct: null, live: true, s3Etag, state: null, rawMetadata, info };
}

/**
 * The S3 ETag of a blob written without fencegate: the MD5 Azure keeps in Content-MD5 (set by
 * Put Blob, and by uploaders that send x-ms-blob-content-md5), so S3 clients that compare the
 * ETag with the body's MD5 agree; otherwise Azure's own ETag (`"0x8D…"`), which is not an MD5
 * but changes on every write, so conditional requests through the gateway still work.
 */
export function adoptedEtag(props: BlobProps): string {
  if (props.contentMD5 && props.contentMD5.length === 16) {
    return `"${Buffer.from(props.contentMD5).toString("hex")}"`;
  }
  return `"${(props.etag ?? "").replaceAll('"', "")}"`;
}

/** The state a live object's commit stores. */
export function liveState(
  hct: number | null,
  etag: string,
  headers: ObjectHeaders,
  meta: Record<string, string>,
  checksums: Checksums | undefined,
  writeId?: string,
  history?: string[],
  upload?: string,
): StoredState {
  return {
    v: 1,
    hct,
    etag,
    ...(writeId ? { w: writeId } : {}),
    ...(history && history.length > 0 ? { h: history } : {}),
    ...(upload ? { u: upload } : {}),
    ...(Object.keys(headers).length > 0 ? { headers } : {}),
    ...(Object.keys(meta).length > 0 ? { meta } : {}),
    ...(checksums && Object.keys(checksums).length > 0 ? { checksums } : {}),
  };
}

export const tombstoneState = (hct: number | null, writeId?: string, history?: string[]): StoredState => ({
  v: 1,
  hct,
  deleted: true,
  ...(writeId ? { w: writeId } : {}),
  ...(history && history.length > 0 ? { h: history } : {}),
});

// Blob properties travel as HTTP headers: a value outside printable ASCII stays in the state only.
const HEADER_SAFE = /^[\x20-\x7e]*$/;

/** The blob properties (for readers that bypass the gateway) matching an object's headers. */
export function blobHeadersOf(headers: ObjectHeaders, md5?: Buffer) {
  const out: {
    blobContentType?: string;
    blobContentEncoding?: string;
    blobContentDisposition?: string;
    blobContentLanguage?: string;
    blobCacheControl?: string;
    blobContentMD5?: Uint8Array;
  } = {};
  const set = (name: Exclude<keyof typeof out, "blobContentMD5">, value: string | undefined) => {
    if (value !== undefined && HEADER_SAFE.test(value)) out[name] = value;
  };
  set("blobContentType", headers.contentType);
  set("blobContentEncoding", headers.contentEncoding);
  set("blobContentDisposition", headers.contentDisposition);
  set("blobContentLanguage", headers.contentLanguage);
  set("blobCacheControl", headers.cacheControl);
  if (md5) out.blobContentMD5 = md5;
  return out;
}
