import type { IncomingHttpHeaders } from "node:http";
import type { Readable } from "node:stream";
import { DomainError } from "../../core/errors.js";

/** Reads a small request body (XML operations) with a hard size limit. */
export async function readBounded(body: Readable, limit: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += (chunk as Buffer).length;
    if (size > limit) {
      body.destroy();
      throw new DomainError("MaxMessageLengthExceeded", `the request body exceeds ${limit} bytes`);
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

/**
 * S3 refuses an object upload that declares no length: neither Content-Length nor chunked
 * transfer encoding (whose length the aws-chunked framing or the stream end gives).
 */
export function requireDeclaredLength(headers: IncomingHttpHeaders): void {
  if (headers["content-length"] === undefined && headers["transfer-encoding"] === undefined) {
    throw new DomainError("MissingContentLength", "You must provide the Content-Length HTTP header.");
  }
}
