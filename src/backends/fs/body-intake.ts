import { createHash } from "node:crypto";
import type { Readable } from "node:stream";
import { type BlobStore, toBuffer } from "./blob-store.js";

/**
 * A body as the fs backend keeps it: in the object's database row when it is small, in an
 * immutable blob file otherwise. Either way its MD5 (the ETag) was computed once, on the way in.
 */
type TakenBody =
  | { inline: Buffer; blob?: undefined; size: number; md5Hex: string }
  | { inline?: undefined; blob: string; size: number; md5Hex: string };

/**
 * Reads a body, deciding small or large by the bytes that actually arrive (never by a declared
 * length): up to `inlineMax` bytes are kept in memory for the database row; the first byte
 * beyond turns the body into a blob file, written from what was held so far and then streamed.
 * Memory stays within inlineMax plus one chunk, whatever the body's size.
 */
export async function takeBody(stream: Readable, inlineMax: number, blobs: BlobStore): Promise<TakenBody> {
  // The pull below starts at once, but a failure may be emitted before the first chunk: the
  // iterator reports it, and this listener keeps it from counting as unhandled meanwhile.
  stream.on("error", noop);
  const iterator = stream[Symbol.asyncIterator]() as AsyncIterator<Buffer | string>;
  const held: Buffer[] = [];
  let size = 0;
  try {
    for (;;) {
      const next = await iterator.next();
      if (next.done) {
        // Small: hashed here, at once (a few microseconds for the inline sizes).
        const inline = held.length === 1 ? held[0]! : Buffer.concat(held, size);
        return { inline, size, md5Hex: createHash("md5").update(inline).digest("hex") };
      }
      const chunk = toBuffer(next.value);
      size += chunk.length;
      held.push(chunk);
      if (size > inlineMax) break;
    }
  } catch (e) {
    await iterator.return?.();
    throw e;
  }
  // Large: what was held, then the rest as it comes, into a blob file (hashed on its way there).
  try {
    const {
      id,
      size: total,
      md5Hex,
    } = await blobs.writeHashed(
      (async function* rest() {
        yield* held.splice(0);
        try {
          for (;;) {
            const next = await iterator.next();
            if (next.done) return;
            yield toBuffer(next.value);
          }
        } finally {
          await iterator.return?.();
        }
      })(),
    );
    return { blob: id, size: total, md5Hex };
  } catch (e) {
    // The file could fail before the generator ever ran: the body must not stay half-read.
    await iterator.return?.();
    throw e;
  }
}

const noop = () => undefined;
