import type { IncomingHttpHeaders } from "node:http";
import type { ObjectHeaders, ObjectInfo, ObjectMetadata } from "../../backends/storage-backend.js";
import { DomainError } from "../../core/errors.js";
import { headerValue } from "../../http/sigv4/index.js";
import type { S3Request } from "./context.js";
import { FENCE_TOKEN_META_HEADER, FENCE_TRANSACTION_META_HEADER } from "./fence-token.js";
import { decodeMetadataValue, encodeMetadataValue, metadataValueBytes } from "./metadata-encoding.js";

const META_PREFIX = "x-amz-meta-";
/** S3 limits user metadata to 2 KiB (names and values, UTF-8). */
const MAX_USER_METADATA_BYTES = 2048;

const STANDARD: ReadonlyArray<[keyof ObjectHeaders, string]> = [
  ["contentType", "content-type"],
  ["contentEncoding", "content-encoding"],
  ["contentDisposition", "content-disposition"],
  ["contentLanguage", "content-language"],
  ["cacheControl", "cache-control"],
  ["expires", "expires"],
];

/**
 * Object metadata from a write's headers and, for a presigned URL, its x-amz-meta-* query
 * parameters (where the AWS SDK presigner puts Metadata). Stored headers are kept byte for byte
 * as sent. The fence-token and fence-transaction metadata are never stored.
 */
export function metadataFromRequest(req: Pick<S3Request, "headers" | "query" | "presigned">): ObjectMetadata {
  const metadata = metadataFromHeaders(req.headers);
  if (!req.presigned) return metadata;
  const fromQuery: Record<string, string> = {};
  for (const [name, value] of req.query) {
    const lower = name.toLowerCase();
    if (!lower.startsWith(META_PREFIX) || isFenceMetadata(lower)) continue;
    const short = lower.slice(META_PREFIX.length);
    if (short === "") {
      throw new DomainError("InvalidArgument", "A user metadata parameter needs a name after x-amz-meta-.", {
        ArgumentName: name,
      });
    }
    const other = fromQuery[short] ?? metadata.userMetadata[short];
    if (other !== undefined && other !== value) {
      throw new DomainError("InvalidArgument", `The metadata ${name} is given twice with different values.`, {
        ArgumentName: name,
      });
    }
    fromQuery[short] = value;
  }
  const userMetadata = { ...metadata.userMetadata, ...fromQuery };
  checkMetadataSize(userMetadata);
  return { headers: metadata.headers, userMetadata };
}

/** The metadata fencegate reads as instructions (a token, a transaction), never stored. */
const isFenceMetadata = (name: string) =>
  name === FENCE_TOKEN_META_HEADER || name === FENCE_TRANSACTION_META_HEADER;

/** Object metadata from a write's headers. The fence-token and fence-transaction metadata are never stored. */
function metadataFromHeaders(headers: IncomingHttpHeaders): ObjectMetadata {
  const std: ObjectHeaders = {};
  for (const [field, name] of STANDARD) {
    const v = headerValue(headers, name);
    if (v !== undefined) std[field] = v;
  }
  if (std.contentEncoding !== undefined) {
    const rest = withoutAwsChunked(std.contentEncoding);
    if (rest !== undefined) std.contentEncoding = rest;
    else delete std.contentEncoding;
  }
  const userMetadata: Record<string, string> = {};
  for (const name of Object.keys(headers)) {
    if (!name.startsWith(META_PREFIX) || isFenceMetadata(name)) continue;
    const short = name.slice(META_PREFIX.length);
    if (short === "") {
      throw new DomainError("InvalidArgument", "A user metadata header needs a name after x-amz-meta-.", {
        ArgumentName: name,
      });
    }
    userMetadata[short] = decodeMetadataValue(headerValue(headers, name) ?? "");
  }
  checkMetadataSize(userMetadata);
  return { headers: std, userMetadata };
}

/**
 * aws-chunked is transfer framing, not a property of the object: it is taken out of
 * Content-Encoding, and the rest is kept exactly as sent (a value without it is untouched).
 */
function withoutAwsChunked(value: string): string | undefined {
  const codings = value.split(",");
  const kept = codings.filter((c) => c.trim().toLowerCase() !== "aws-chunked");
  if (kept.length === codings.length) return value;
  const rest = kept.join(",").trim();
  return rest === "" ? undefined : rest;
}

function checkMetadataSize(userMetadata: Record<string, string>): void {
  let bytes = 0;
  for (const [name, value] of Object.entries(userMetadata))
    bytes += Buffer.byteLength(name) + metadataValueBytes(value);
  if (bytes > MAX_USER_METADATA_BYTES) {
    throw new DomainError(
      "MetadataTooLarge",
      `Your metadata headers exceed the maximum allowed metadata size (${MAX_USER_METADATA_BYTES} bytes)`,
    );
  }
}

/** Response headers describing an object (GET and HEAD). */
export function objectResponseHeaders(info: ObjectInfo): Record<string, string> {
  const out: Record<string, string> = {
    "last-modified": info.lastModified.toUTCString(),
    etag: info.etag,
    "accept-ranges": "bytes",
    "content-type": info.headers.contentType ?? "binary/octet-stream",
  };
  for (const [field, name] of STANDARD) {
    const v = info.headers[field];
    if (v !== undefined && field !== "contentType") out[name] = v;
  }
  for (const [name, value] of Object.entries(info.userMetadata))
    out[META_PREFIX + name] = encodeMetadataValue(value);
  return out;
}
