import { createHash, randomUUID } from "node:crypto";
import { createWriteStream } from "node:fs";
import { type FileHandle, mkdir, open, opendir, rename, rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";

/** A body written in full and durably, under its final name, not yet referenced by any row. */
export type StoredBlob = { id: string; size: number; md5Hex: string };

const SHARD = /^[0-9a-f]{2}$/;

/**
 * The bytes of the fs backend: immutable files `<root>/<2 hex>/<uuid>`, one per object
 * version. Object keys never become paths, so no key can escape the root. A blob is written
 * once and never modified; an overwrite writes a new blob and unlinks the old one after the
 * metadata commit, so a reader holding an open descriptor always sees one complete version.
 */
export class BlobStore {
  private readonly tmpDir: string;

  private constructor(readonly root: string) {
    this.tmpDir = join(root, "tmp");
  }

  static async open(root: string): Promise<BlobStore> {
    const store = new BlobStore(root);
    await mkdir(store.tmpDir, { recursive: true });
    // All 256 shards exist up front, so a write only ever needs to fsync its shard directory.
    await Promise.all(
      Array.from({ length: 256 }, (_, i) =>
        mkdir(join(root, i.toString(16).padStart(2, "0")), { recursive: true }),
      ),
    );
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
    const id = randomUUID();
    const tmp = join(this.tmpDir, id);
    const final = this.pathOf(id);
    const md5 = createHash("md5");
    let size = 0;
    // flush: the stream fsyncs before it closes, and pipeline resolves only after 'close'.
    const file = createWriteStream(tmp, { flags: "wx", flush: true });
    try {
      await pipeline(
        body,
        async function* measure(source: AsyncIterable<Buffer | Uint8Array | string>) {
          for await (const chunk of source) {
            const bytes = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
            md5.update(bytes);
            size += bytes.length;
            yield bytes;
          }
        },
        file,
      );
      await rename(tmp, final);
    } catch (e) {
      // A body can fail before the stream has even created the file: wait until the stream
      // is closed, or the file would appear after its removal.
      if (!file.closed) await new Promise<void>((resolve) => file.once("close", () => resolve()));
      await rm(tmp, { force: true });
      throw e;
    }
    try {
      await syncDir(dirname(final));
    } catch (e) {
      await this.remove(id);
      throw e;
    }
    return { id, size, md5Hex: md5.digest("hex") };
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

async function syncDir(dir: string): Promise<void> {
  const handle = await open(dir, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
