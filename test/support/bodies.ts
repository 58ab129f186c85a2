import { Readable } from "node:stream";
import { setImmediate as tick } from "node:timers/promises";
import type { Checksums, ObjectMetadata, VerifiedBody } from "../../src/backends/storage-backend.js";
import { md5Hex } from "./digest.js";

export { sleep } from "./wait.js";

/** A body delivered in chunks, yielding to the event loop between them so writes interleave. */
export function bodyOf(data: string | Buffer, chunkSize = 16 * 1024): Readable {
  const bytes = typeof data === "string" ? Buffer.from(data) : data;
  return Readable.from(
    (async function* chunks() {
      for (let at = 0; at < bytes.length; at += chunkSize) {
        yield bytes.subarray(at, at + chunkSize);
        await tick();
      }
    })(),
    { objectMode: false },
  );
}

/** A body that delivers `sent` and then fails, as a body whose signature or checksum does not verify. */
export function failingBody(
  sent: string | Buffer,
  error: Error = new Error("body verification failed"),
): Readable {
  return Readable.from(
    (async function* chunks() {
      yield typeof sent === "string" ? Buffer.from(sent) : sent;
      await tick();
      throw error;
    })(),
    { objectMode: false },
  );
}

export async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
  return Buffer.concat(chunks);
}

export const md5Etag = (data: string | Buffer) => `"${md5Hex(data)}"`;

export const metadataOf = (userMetadata: Record<string, string> = {}, extra: Partial<ObjectMetadata> = {}) =>
  ({ headers: {}, userMetadata, ...extra }) satisfies ObjectMetadata;

export function shuffled<T>(items: T[]): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/** A verified body (as the S3 layer hands one to a backend) of these bytes and checksums. */
export function verifiedBody(
  data: string | Buffer,
  checksums: Checksums = {},
  chunkSize?: number,
): VerifiedBody {
  const bytes = typeof data === "string" ? Buffer.from(data) : data;
  return { stream: bodyOf(bytes, chunkSize), digest: Promise.resolve({ size: bytes.length, checksums }) };
}

/** A body that delivers `sent` and then fails verification: its stream errors, its digest rejects. */
export function failingVerifiedBody(
  sent: string | Buffer,
  error: Error = new Error("body verification failed"),
) {
  const digest = Promise.reject(error);
  digest.catch(() => undefined);
  return { stream: failingBody(sent, error), digest } satisfies VerifiedBody;
}
