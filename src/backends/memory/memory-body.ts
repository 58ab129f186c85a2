import { createHash } from "node:crypto";
import { Readable } from "node:stream";
import { setImmediate as tick } from "node:timers/promises";

/** A body held in memory: its own copy of the bytes, never modified once stored. */
export type BufferedBody = { bytes: Buffer; size: number; md5Hex: string };

/**
 * Reads a body to its end, hashing and counting it as the chunks arrive. Call it before any
 * other await: iteration starts synchronously, so the body's errors are listened to at once.
 * A body that errors rejects with its own error.
 */
export async function bufferBody(stream: Readable): Promise<BufferedBody> {
  const md5 = createHash("md5");
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of stream as AsyncIterable<Uint8Array | string>) {
    const bytes = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
    md5.update(bytes);
    size += bytes.length;
    chunks.push(bytes);
  }
  // concat copies: a writer reusing its chunk buffers cannot change a stored object.
  return { bytes: Buffer.concat(chunks, size), size, md5Hex: md5.digest("hex") };
}

const READ_CHUNK = 64 * 1024;

/**
 * A stream of `bytes[start..end]` (inclusive). Stored bytes are never modified, so a reader
 * keeps the exact version it started on while overwrites commit around it.
 */
export function snapshotStream(bytes: Buffer, start = 0, end = bytes.length - 1): Readable {
  return Readable.from(
    (async function* chunks() {
      for (let at = start; ; at += READ_CHUNK) {
        // Each chunk arrives on a later turn of the event loop, as a file read's would: a reader
        // looping over GETs must not starve the writers it races.
        await tick();
        if (at > end) return;
        yield bytes.subarray(at, Math.min(at + READ_CHUNK, end + 1));
      }
    })(),
    { objectMode: false },
  );
}
