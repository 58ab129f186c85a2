import { createHash, randomBytes } from "node:crypto";
import type { Readable } from "node:stream";
import type { BlockBlobClient } from "@azure/storage-blob";
import type { AzureCalls } from "./azure-calls.js";

/**
 * Takes a body of unknown length off its stream without holding more than a few blocks of it:
 * a body that ends within one block is kept in memory (the caller writes it with one Put Blob,
 * and can send it again when its compare-and-swap loses); a longer one is staged block by block
 * (Put Block) on the target blob as it arrives, up to two blocks in flight, and the caller
 * commits it with one conditional Put Block List.
 *
 * Staged blocks are invisible until committed and change nothing: not the blob's bytes,
 * metadata or ETag. A write that never commits leaves them behind until the blob's next commit
 * discards them, or Azure does after 7 days.
 */
type StagedBody =
  | { kind: "buffer"; data: Buffer; size: number; md5: Buffer }
  | { kind: "blocks"; blockIds: string[]; size: number; md5: Buffer };

const MAX_IN_FLIGHT = 2;

/**
 * Block ids: every fencegate writer uses ids of one length (Azure requires all the blocks of a
 * blob to have ids of equal length): a random 32-hex nonce per write and a 6-digit sequence.
 */
export function blockIdFactory(): (index: number) => string {
  const nonce = randomBytes(16).toString("hex");
  return (index) => Buffer.from(`${nonce}-${String(index).padStart(6, "0")}`).toString("base64");
}

type StageOptions = {
  /** Stage even a body that fits in one block (assembling parts); default false. */
  alwaysBlocks?: boolean;
  /** Ids for the blocks, continuing across several streams of one write. Default: a new factory. */
  blockId?: (index: number) => string;
  /** Index of this stream's first block in the write's block list. Default 0. */
  firstIndex?: number;
  /** The target blob (a promise: reading the body must not wait for anything). */
  blob: Promise<BlockBlobClient>;
  blockSize: number;
  calls: AzureCalls;
  signal: AbortSignal;
  what: string;
};

/**
 * Starts reading the stream at once (its errors are listened to from the first tick). Rejects
 * with the stream's own error when the body fails, after the blocks in flight have settled.
 *
 * Memory: a small body is kept as the chunks it came in. From the first byte beyond one block
 * on, bytes are copied into block-sized buffers, at most MAX_IN_FLIGHT + 1 of them, each reused
 * once its block is staged.
 */
export async function stageBody(stream: Readable, o: StageOptions): Promise<StagedBody> {
  const md5 = createHash("md5");
  const blockId = o.blockId ?? blockIdFactory();
  const firstIndex = o.firstIndex ?? 0;
  const blockIds: string[] = [];
  const inFlight = new Set<Promise<void>>();
  const free: Buffer[] = [];
  let failure: { error: unknown } | undefined;
  let chunks: Buffer[] = [];
  let chunkBytes = 0;
  let block: Buffer | undefined;
  let filled = 0;
  let size = 0;

  const stage = (buffer: Buffer, length: number) => {
    const data = buffer.subarray(0, length);
    const id = blockId(firstIndex + blockIds.length);
    blockIds.push(id);
    const transactionalContentMD5 = createHash("md5").update(data).digest();
    const call = o.calls
      .run(`stage a block of ${o.what}`, o.signal, async (abortSignal) =>
        (await o.blob).stageBlock(id, data, data.length, { abortSignal, transactionalContentMD5 }),
      )
      .then(
        () => undefined,
        (error: unknown) => {
          failure ??= { error };
        },
      )
      .finally(() => {
        inFlight.delete(call);
        free.push(buffer);
      });
    inFlight.add(call);
  };

  /** Copies into the current block; a full block is staged once another byte arrives. */
  const append = async (bytes: Buffer) => {
    for (let at = 0; at < bytes.length; ) {
      if (filled === o.blockSize) {
        stage(block!, filled);
        while (inFlight.size >= MAX_IN_FLIGHT) await Promise.race(inFlight);
        if (failure) throw failure.error;
        block = free.pop() ?? Buffer.allocUnsafe(o.blockSize);
        filled = 0;
      }
      const copied = bytes.copy(block!, filled, at);
      filled += copied;
      at += copied;
    }
  };

  const startBlocks = async () => {
    block = Buffer.allocUnsafe(o.blockSize);
    filled = 0;
    const held = chunks;
    chunks = [];
    chunkBytes = 0;
    for (const chunk of held) await append(chunk);
  };

  try {
    for await (const chunk of stream) {
      const bytes: Buffer = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string | Uint8Array);
      md5.update(bytes);
      size += bytes.length;
      if (block) {
        await append(bytes);
      } else {
        chunks.push(bytes);
        chunkBytes += bytes.length;
        // Strictly more than a block: a body of exactly one block is still one Put Blob.
        if (chunkBytes > o.blockSize) await startBlocks();
      }
      if (failure) throw failure.error;
    }
    if (!block) {
      if (!o.alwaysBlocks) {
        return { kind: "buffer", data: Buffer.concat(chunks, chunkBytes), size, md5: md5.digest() };
      }
      if (chunkBytes > 0) await startBlocks();
    }
    if (block && filled > 0) stage(block, filled);
    await Promise.all(inFlight);
    if (failure) throw failure.error;
    return { kind: "blocks", blockIds, size, md5: md5.digest() };
  } catch (e) {
    stream.destroy();
    await Promise.all(inFlight);
    throw e;
  }
}
