import type { Readable } from "node:stream";
import { DomainError } from "../core/errors.js";

/** Reads a small request body (XML operations) with a hard size limit. */
export async function readBounded(body: Readable, limit: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += (chunk as Buffer).length;
    if (size > limit) {
      body.destroy();
      throw new DomainError("InvalidRequest", `the request body exceeds ${limit} bytes`, {
        s3Code: "MaxMessageLengthExceeded",
      });
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

export async function drainBounded(body: Readable, limit: number): Promise<void> {
  await readBounded(body, limit);
}
