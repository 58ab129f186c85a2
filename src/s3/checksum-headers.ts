import type { Checksums, ObjectInfo } from "../backends/storage-backend.js";
import { header, type S3Request } from "./context.js";

const NAMES: Record<string, string> = {
  CRC32: "x-amz-checksum-crc32",
  CRC32C: "x-amz-checksum-crc32c",
  SHA1: "x-amz-checksum-sha1",
  SHA256: "x-amz-checksum-sha256",
  CRC64NVME: "x-amz-checksum-crc64nvme",
};

/** Checksum response headers: after a write, and on GET/HEAD with x-amz-checksum-mode: ENABLED. */
export function checksumHeaders(
  checksums: Checksums | Record<string, string> | undefined,
): Record<string, string> {
  const out: Record<string, string> = {};
  if (!checksums) return out;
  for (const [algorithm, value] of Object.entries(checksums)) {
    const name = NAMES[algorithm];
    if (name && value) out[name] = value;
  }
  if (Object.keys(out).length > 0) out["x-amz-checksum-type"] = "FULL_OBJECT";
  return out;
}

/** Stored checksums are returned only when asked for, and never for a part of the object. */
export function requestedChecksumHeaders(
  req: S3Request,
  info: ObjectInfo,
  ranged: boolean,
): Record<string, string> {
  if (ranged || header(req, "x-amz-checksum-mode")?.toUpperCase() !== "ENABLED") return {};
  return checksumHeaders(info.checksums);
}
