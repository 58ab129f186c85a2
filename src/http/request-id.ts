import { randomBytes } from "node:crypto";

/** The id of one request, as S3 writes its x-amz-request-id: 16 upper-case hex digits. */
export function newRequestId(): string {
  return randomBytes(8).toString("hex").toUpperCase();
}
