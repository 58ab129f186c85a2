import { DomainError } from "../../core/errors.js";
import {
  INVALID_PAYLOAD_HASH_MESSAGE,
  isHexSha256,
  STREAMING_SIGNED_PAYLOAD,
  STREAMING_SIGNED_PAYLOAD_TRAILER,
  STREAMING_UNSIGNED_PAYLOAD,
  STREAMING_UNSIGNED_PAYLOAD_TRAILER,
  UNSIGNED_PAYLOAD,
} from "../../http/sigv4/payload-hash.js";

/**
 * How the body is framed and verified, decided by x-amz-content-sha256 alone: some clients
 * send Content-Encoding: aws-chunked over a plain body, and minio-go sends aws-chunked without it.
 */
export type BodyMode =
  | { kind: "plain"; sha256Hex: string | undefined }
  | { kind: "chunked"; signed: boolean; trailers: boolean };

export function bodyModeOf(payloadHash: string): BodyMode {
  if (isHexSha256(payloadHash)) return { kind: "plain", sha256Hex: payloadHash.toLowerCase() };
  switch (payloadHash) {
    case UNSIGNED_PAYLOAD:
      return { kind: "plain", sha256Hex: undefined };
    case STREAMING_UNSIGNED_PAYLOAD:
    case STREAMING_UNSIGNED_PAYLOAD_TRAILER:
      return { kind: "chunked", signed: false, trailers: true };
    case STREAMING_SIGNED_PAYLOAD:
      return { kind: "chunked", signed: true, trailers: false };
    case STREAMING_SIGNED_PAYLOAD_TRAILER:
      return { kind: "chunked", signed: true, trailers: true };
    default:
      throw new DomainError("InvalidArgument", INVALID_PAYLOAD_HASH_MESSAGE, {
        ArgumentName: "x-amz-content-sha256",
        ArgumentValue: payloadHash,
      });
  }
}
