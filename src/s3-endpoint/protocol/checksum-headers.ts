import type { Checksums, ObjectInfo } from "../../backends/storage-backend.js";
import { CHECKSUM_ALGORITHMS, type ChecksumAlgorithm, checksumHeaderName } from "../body/index.js";
import { header, type S3Request } from "./context.js";

/** Checksum response headers: after a write, and on GET/HEAD with x-amz-checksum-mode: ENABLED. */
export function checksumHeaders(
  checksums: Checksums | Record<string, string> | undefined,
): Record<string, string> {
  const out: Record<string, string> = {};
  if (!checksums) return out;
  for (const [algorithm, value] of Object.entries(checksums)) {
    if (value && (CHECKSUM_ALGORITHMS as readonly string[]).includes(algorithm)) {
      out[checksumHeaderName(algorithm as ChecksumAlgorithm)] = value;
    }
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
