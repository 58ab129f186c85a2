import { Readable } from "node:stream";

const BYTES = Symbol("fencegate.memoryBody");

/**
 * A readable of bytes already in memory (an inline body), in one chunk. It remembers its bytes,
 * so that the HTTP layer can send them with the response head in one write instead of piping.
 */
export function memoryBody(data: Buffer): Readable {
  const stream = new Readable({
    read() {
      this.push(data);
      this.push(null);
    },
  });
  (stream as Readable & { [BYTES]?: Buffer })[BYTES] = data;
  return stream;
}

/** The bytes of a memoryBody not yet read from, or undefined for any other stream. */
export function memoryBytes(stream: Readable): Buffer | undefined {
  const data = (stream as Readable & { [BYTES]?: Buffer })[BYTES];
  return data !== undefined && stream.readableLength === 0 && !stream.readableEnded && !stream.destroyed
    ? data
    : undefined;
}
