import { randomUUID } from "node:crypto";

/**
 * The id of one request, as S3 writes its x-amz-request-id: 16 upper-case hex digits. Taken from
 * randomUUID, which draws from a cached pool of random bytes instead of asking the system for
 * eight bytes on every request.
 */
export function newRequestId(): string {
  // xxxxxxxx-xxxx-4xxx-Nxxx-xxxxxxxxxxxx: skip the version digit and the variant digit.
  const uuid = randomUUID();
  return (uuid.slice(0, 8) + uuid.slice(9, 13) + uuid.slice(15, 18) + uuid.slice(20, 21)).toUpperCase();
}
