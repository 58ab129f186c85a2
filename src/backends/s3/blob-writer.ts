import { createHash } from "node:crypto";
import type { Readable } from "node:stream";
import { abandoned } from "../backend-errors.js";
import type { Store } from "./store.js";

/** A body stored in full under its blob name, not yet referenced by any record. */
type WrittenBlob = { size: number; md5Hex: string };

/**
 * Streams a body into a new blob with bounded memory: up to `partSize` bytes are buffered; a
 * body that ends within them is one PutObject, a longer one becomes an S3 multipart upload of
 * `partSize` parts, each sent before the next is read (the source waits meanwhile). The MD5 and
 * the size are computed on the way. A body that errors leaves nothing behind (its upload is
 * aborted) and rejects with the body's own error.
 *
 * Call it before any other await: iteration starts at once, so the body's errors are listened to.
 */
export async function writeBlob(
  store: Store,
  bucket: string,
  name: string,
  stream: Readable,
  opts: { partSize: number; metadata: Record<string, string>; signal?: AbortSignal },
): Promise<WrittenBlob> {
  const md5 = createHash("md5");
  let size = 0;
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let uploadId: string | undefined;
  const parts: { partNumber: number; etag: string }[] = [];
  let finishing = false;

  const take = (bytes: number): Buffer => {
    const all = pending.length === 1 ? pending[0]! : Buffer.concat(pending, pendingBytes);
    const part = all.subarray(0, bytes);
    const rest = all.subarray(bytes);
    pending = rest.length > 0 ? [rest] : [];
    pendingBytes = rest.length;
    return part;
  };
  const sendPart = async (body: Buffer) => {
    uploadId ??= await store.createMultipart(bucket, name, opts.metadata, opts.signal);
    const partNumber = parts.length + 1;
    parts.push({
      partNumber,
      etag: await store.uploadPart(bucket, name, uploadId, partNumber, body, opts.signal),
    });
  };

  try {
    for await (const chunk of stream as AsyncIterable<Buffer | Uint8Array | string>) {
      const bytes =
        typeof chunk === "string"
          ? Buffer.from(chunk)
          : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
      md5.update(bytes);
      size += bytes.length;
      pending.push(bytes);
      pendingBytes += bytes.length;
      // Strictly more than a part: a body of exactly one part size stays a single PUT.
      while (pendingBytes > opts.partSize) await sendPart(take(opts.partSize));
    }
    finishing = true;
    if (uploadId === undefined) {
      await store.put(bucket, name, {
        body: take(pendingBytes),
        metadata: opts.metadata,
        signal: opts.signal,
      });
    } else {
      if (pendingBytes > 0) await sendPart(take(pendingBytes));
      await store.completeMultipart(bucket, name, uploadId, parts, opts.signal);
    }
  } catch (e) {
    pending = [];
    if (uploadId !== undefined) {
      await store.abortMultipart(bucket, name, uploadId).catch(() => undefined);
    }
    // A PUT or completion whose answer was lost may have stored the blob all the same: removed
    // in the background (a store that stopped answering must not hold the refusal; what stays is
    // the collector's).
    if (finishing) void store.delete(bucket, name).catch(() => undefined);
    // The request went away (its signal): a refusal, nothing was committed.
    throw opts.signal?.aborted ? abandoned() : e;
  }
  return { size, md5Hex: md5.digest("hex") };
}
