import type { IncomingHttpHeaders } from "node:http";
import type { ObjectHeaders, ObjectInfo, ObjectMetadata } from "../backends/storage-backend.js";
import { DomainError } from "../core/errors.js";
import { headerValue } from "./auth/index.js";
import { FENCE_TOKEN_META_HEADER } from "./fence-token.js";
import { decodeMetadataValue, encodeMetadataValue } from "./metadata-encoding.js";

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

/** Object metadata from a write's headers. The fence-token metadata header is never stored. */
export function metadataFromHeaders(headers: IncomingHttpHeaders): ObjectMetadata {
  const std: ObjectHeaders = {};
  for (const [field, name] of STANDARD) {
    const v = headerValue(headers, name);
    if (v !== undefined) std[field] = v;
  }
  if (std.contentEncoding !== undefined) {
    // aws-chunked is transfer framing, not a property of the object.
    const rest = std.contentEncoding
      .split(",")
      .map((s) => s.trim())
      .filter((s) => s && s.toLowerCase() !== "aws-chunked");
    if (rest.length > 0) std.contentEncoding = rest.join(",");
    else delete std.contentEncoding;
  }
  const userMetadata: Record<string, string> = {};
  let bytes = 0;
  for (const name of Object.keys(headers)) {
    if (!name.startsWith(META_PREFIX) || name === FENCE_TOKEN_META_HEADER) continue;
    const short = name.slice(META_PREFIX.length);
    const v = decodeMetadataValue(headerValue(headers, name) ?? "");
    userMetadata[short] = v;
    bytes += Buffer.byteLength(short) + Buffer.byteLength(v);
  }
  if (bytes > MAX_USER_METADATA_BYTES) {
    throw new DomainError(
      "InvalidArgument",
      `Your metadata headers exceed the maximum allowed metadata size (${MAX_USER_METADATA_BYTES} bytes)`,
      { s3Code: "MetadataTooLarge" },
    );
  }
  return { headers: std, userMetadata };
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
