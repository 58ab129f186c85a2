import { randomInt, randomUUID } from "node:crypto";
import { createWriteStream } from "node:fs";
import { type FileHandle, mkdir, open, opendir, rename, rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { Md5Thread } from "../../core/md5-thread.js";
import { DirSyncer, syncDir } from "./dir-sync.js";

/**
 * How much of a body may wait for the file while a write is in flight: the chunks that arrive
 * meanwhile go down in one writev, and the socket keeps being read while the disk works.
 */
const WRITE_BUFFER_BYTES = 512 * 1024;

/** A body written in full and durably, under its final name, not yet referenced by any row. */
type StoredBlob = { id: string; size: number; md5Hex: string };

/** New blobs go to one shard for this many writes, so that concurrent writes share dir fsyncs. */
const BLOBS_PER_SHARD_TURN = 256;

const SHARD = /^[0-9a-f]{2}$/;

/**
 * The bytes of the fs backend: immutable files `<root>/<2 hex>/<uuid>`, one per object
 * version. Object keys never become paths, so no key can escape the root. A blob is written
 * once and never modified; an overwrite writes a new blob and unlinks the old one after the
 * metadata commit, so a reader holding an open descriptor always sees one complete version.
 */
export class BlobStore {
  private readonly tmpDir: string;
  readonly dirSyncs = new DirSyncer();
  private written = randomInt(256 * BLOBS_PER_SHARD_TURN);

  private constructor(readonly root: string) {
    this.tmpDir = join(root, "tmp");
  }

  static async open(root: string): Promise<BlobStore> {
    const store = new BlobStore(root);
    await mkdir(store.tmpDir, { recursive: true });
    // Shard directories are made on first use (see intoShard).
    await syncDir(root);
    await syncDir(dirname(root));
    return store;
  }

  pathOf(id: string): string {
    return join(this.root, id.slice(0, 2), id);
  }

  /**
   * Streams the body to a temp file while hashing and counting it, fsyncs it, renames it to
   * its final name and fsyncs the directory. A body that errors leaves nothing behind.
   */
  async write(body: Readable): Promise<StoredBlob> {
    // The iteration below starts on a later tick: an error emitted before then must not go
    // unhandled (the iterator still sees it, from the stream's errored state).
    body.on("error", noop);
    return this.writeHashed(
      (async function* bytes() {
        for await (const chunk of body) yield toBuffer(chunk as Buffer | string);
      })(),
    );
  }

  /**
   * Like write, from chunks (the fs backend's body intake hands over what it held, then the
   * rest). The MD5 (the ETag) is computed on a worker thread (src/core/md5-thread.ts); the
   * chunks wait for it only when it falls behind.
   */
  async writeHashed(source: AsyncIterable<Buffer>): Promise<StoredBlob> {
    const md5 = new Md5Thread();
    let stored: { id: string; size: number };
    try {
      stored = await this.writeChunks(
        (async function* hashed() {
          for await (const chunk of source) {
            if (!md5.update(chunk)) await md5.drained();
            yield chunk;
          }
        })(),
      );
    } catch (e) {
      md5.cancel();
      throw e;
    }
    let md5Hex: string;
    try {
      md5Hex = await md5.digest();
    } catch (e) {
      await this.remove(stored.id);
      throw e;
    }
    return { ...stored, md5Hex };
  }

  /**
   * The chunks go to a temp file, which is fsynced, renamed to its final name, and its directory
   * fsynced (shared with concurrent writes into the same directory).
   */
  private async writeChunks(source: AsyncIterable<Buffer>): Promise<{ id: string; size: number }> {
    const id = this.newId();
    const tmp = join(this.tmpDir, id);
    const final = this.pathOf(id);
    let size = 0;
    // flush: the stream fsyncs before it closes, and pipeline resolves only after 'close'.
    const file = createWriteStream(tmp, { flags: "wx", flush: true, highWaterMark: WRITE_BUFFER_BYTES });
    try {
      await pipeline(
        Readable.from(
          (async function* counted() {
            for await (const chunk of source) {
              size += chunk.length;
              yield chunk;
            }
          })(),
          { objectMode: false },
        ),
        file,
      );
      await this.intoShard(tmp, final);
    } catch (e) {
      // A body can fail before the stream has even created the file: wait until the stream
      // is closed, or the file would appear after its removal.
      if (!file.closed) await new Promise<void>((resolve) => file.once("close", () => resolve()));
      await rm(tmp, { force: true });
      throw e;
    }
    try {
      await this.dirSyncs.sync(dirname(final));
    } catch (e) {
      await this.remove(id);
      throw e;
    }
    return { id, size };
  }

  /**
   * Renames a temp file to its final name. A shard's directory is made by the first write into
   * it, and the root directory fsynced before the rename, so that the directory entry is durable
   * before any blob in it is acknowledged (the caller then fsyncs the shard directory).
   */
  private async intoShard(tmp: string, final: string): Promise<void> {
    try {
      await rename(tmp, final);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
      await mkdir(dirname(final), { recursive: true });
      await syncDir(this.root);
      await rename(tmp, final);
    }
  }

  /**
   * A random id whose first two hex digits (its shard) change every BLOBS_PER_SHARD_TURN
   * writes: writes in flight together land in one directory and share its fsync.
   */
  private newId(): string {
    const shard = Math.floor(this.written++ / BLOBS_PER_SHARD_TURN) % 256;
    return `${shard.toString(16).padStart(2, "0")}${randomUUID().slice(2)}`;
  }

  /** Opens a blob for reading; null when it is gone (unlinked by a concurrent overwrite). */
  async openForRead(id: string): Promise<FileHandle | null> {
    try {
      return await open(this.pathOf(id), "r");
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw e;
    }
  }

  /** Best effort: a blob left behind is an orphan that the next startup sweeps. */
  async remove(id: string): Promise<void> {
    await rm(this.pathOf(id), { force: true }).catch(() => undefined);
  }

  /**
   * Startup cleanup of crash leftovers: every temp file, and every blob no row references
   * (written but never committed, or replaced but not yet unlinked). Streams the directories
   * so that memory stays flat however many blobs there are. Run only before the backend
   * serves requests: a write in flight has a blob that is not referenced yet.
   */
  async sweep(isReferenced: (id: string) => boolean): Promise<{ removed: number }> {
    let removed = 0;
    for await (const entry of await opendir(this.tmpDir)) {
      await rm(join(this.tmpDir, entry.name), { recursive: true, force: true });
      removed++;
    }
    for await (const shard of await opendir(this.root)) {
      if (!shard.isDirectory() || !SHARD.test(shard.name)) continue;
      const shardDir = join(this.root, shard.name);
      for await (const entry of await opendir(shardDir)) {
        if (entry.isFile() && isReferenced(entry.name)) continue;
        await rm(join(shardDir, entry.name), { recursive: true, force: true });
        removed++;
      }
    }
    return { removed };
  }
}

const noop = () => undefined;

/** A body chunk as bytes (a stream in string mode yields strings, as UTF-8). */
export const toBuffer = (chunk: Buffer | string): Buffer =>
  typeof chunk === "string" ? Buffer.from(chunk) : chunk;
