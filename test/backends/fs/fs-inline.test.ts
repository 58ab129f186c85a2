import { mkdir, mkdtemp, readdir, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { afterEach, describe, expect, it } from "vitest";
import { DirSyncer } from "../../../src/backends/fs/dir-sync.js";
import { createFsBackend, type FsBackend, INLINE_MAX_BYTES } from "../../../src/backends/fs/index.js";
import { fencedCommit } from "../../../src/fence/commit.js";
import { type EmbeddedDb, openEmbeddedDb } from "../../../src/sqlite/db.js";
import { md5Etag, metadataOf, readAll, verifiedBody } from "../../support/bodies.js";
import { type FsFixture, fsFixture } from "./fs-fixture.js";

/**
 * Small bodies live in the database row (fs_bodies), large ones in blob files; the size decides
 * by the bytes that arrive. A data directory from before inline bodies keeps working.
 */
describe("fs backend inline bodies", () => {
  let fixture: FsFixture | undefined;
  afterEach(async () => {
    await fixture?.cleanup();
    fixture = undefined;
  });

  const open = async () => {
    fixture = await fsFixture();
    await fixture.backend.createBucket("bucket");
    return fixture;
  };

  const put = (
    backend: FsBackend,
    key: string,
    data: string | Buffer,
    token: number | null = null,
    chunk?: number,
  ) =>
    backend.putObject(
      { bucket: "bucket", key, body: verifiedBody(data, {}, chunk), metadata: metadataOf() },
      fencedCommit(token),
    );

  const blobFiles = async (fx: FsFixture) => {
    const files: string[] = [];
    for (const shard of await readdir(join(fx.dataDir, "blobs"))) {
      if (shard !== "tmp") files.push(...(await readdir(join(fx.dataDir, "blobs", shard))));
    }
    return files;
  };
  const inlineBodies = (fx: FsFixture) =>
    (fx.db().prepare("SELECT COUNT(*) AS n FROM fs_bodies").get() as { n: number }).n;

  it("keeps a body up to the threshold in the row, and one byte more in a blob file", async () => {
    const fx = await open();
    const atLimit = Buffer.alloc(INLINE_MAX_BYTES, "a");
    const over = Buffer.alloc(INLINE_MAX_BYTES + 1, "b");
    // Delivered in pieces that straddle the threshold: bytes decide, not chunks.
    const a = await put(fx.current(), "at-limit", atLimit, null, 10_000);
    const b = await put(fx.current(), "over", over, null, 10_000);
    expect(a.etag).toBe(md5Etag(atLimit));
    expect(b.etag).toBe(md5Etag(over));
    expect(inlineBodies(fx)).toBe(1);
    expect(await blobFiles(fx)).toHaveLength(1);
    expect(await readAll((await fx.current().getObject("bucket", "at-limit")).body)).toEqual(atLimit);
    expect(await readAll((await fx.current().getObject("bucket", "over")).body)).toEqual(over);
  });

  it("serves an inline body whole, by range, and to HEAD", async () => {
    const fx = await open();
    await put(fx.current(), "k", "0123456789");
    const head = await fx.current().headObject("bucket", "k");
    expect(head).toMatchObject({ size: 10, etag: md5Etag("0123456789") });
    const ranged = await fx.current().getObject("bucket", "k", { start: 2, end: 5 });
    expect(ranged.range).toEqual({ start: 2, end: 5 });
    expect((await readAll(ranged.body)).toString()).toBe("2345");
    const suffix = await fx.current().getObject("bucket", "k", { suffix: 3 });
    expect((await readAll(suffix.body)).toString()).toBe("789");
    const empty = await put(fx.current(), "empty", "");
    expect(empty.etag).toBe(md5Etag(""));
    expect((await readAll((await fx.current().getObject("bucket", "empty")).body)).length).toBe(0);
  });

  it("leaves no inline body and no blob behind through overwrites and a delete", async () => {
    const fx = await open();
    const big = "L".repeat(INLINE_MAX_BYTES * 3);
    await put(fx.current(), "k", "small one", 1);
    await put(fx.current(), "k", big, 2);
    expect(inlineBodies(fx)).toBe(0);
    expect(await blobFiles(fx)).toHaveLength(1);
    await put(fx.current(), "k", "small two", 3);
    expect(inlineBodies(fx)).toBe(1);
    expect(await blobFiles(fx)).toHaveLength(0);
    await put(fx.current(), "k", "small three", 4);
    expect(inlineBodies(fx)).toBe(1);
    expect((await readAll((await fx.current().getObject("bucket", "k")).body)).toString()).toBe(
      "small three",
    );
    await fx.current().deleteObject({ bucket: "bucket", key: "k" }, fencedCommit(5));
    expect(inlineBodies(fx)).toBe(0);
    expect(await fx.current().highestToken("bucket", "k")).toBe(5);
  });

  it("changes nothing when an inline write is refused", async () => {
    const fx = await open();
    await put(fx.current(), "k", "kept", 5);
    await expect(put(fx.current(), "k", "stale", 4)).rejects.toMatchObject({ code: "StaleFencingToken" });
    await expect(
      fx.current().putObject(
        { bucket: "bucket", key: "k", body: verifiedBody("refused in the step"), metadata: metadataOf() },
        fencedCommit(6, {
          atomic: () => {
            throw new Error("audit log unavailable");
          },
        }),
      ),
    ).rejects.toThrow("audit log unavailable");
    expect(inlineBodies(fx)).toBe(1);
    expect((await readAll((await fx.current().getObject("bucket", "k")).body)).toString()).toBe("kept");
    expect(await fx.leftovers()).toEqual([]);
  });

  it("never holds more than the threshold and one chunk of a large body", async () => {
    const fx = await open();
    const chunk = Buffer.alloc(64 * 1024, "z");
    const chunks = 256; // 16 MiB
    let sent = 0;
    let maxAhead = 0;
    const stored = { bytes: 0 };
    // The source counts how far it runs ahead of what reached the blob file.
    const source = Readable.from(
      (async function* gen() {
        for (let i = 0; i < chunks; i++) {
          sent += chunk.length;
          yield chunk;
        }
      })(),
      { objectMode: false, highWaterMark: 1 },
    );
    const tmp = join(fx.dataDir, "blobs", "tmp");
    const watch = setInterval(async () => {
      for (const name of await readdir(tmp).catch(() => [])) {
        const sentBefore = sent;
        // Gone between readdir and stat (renamed into place): no sample, not an empty file.
        const size = await stat(join(tmp, name)).then(
          (s) => s.size,
          () => null,
        );
        if (size === null) continue;
        stored.bytes = Math.max(stored.bytes, size);
        maxAhead = Math.max(maxAhead, sentBefore - size);
      }
    }, 5);
    try {
      const result = await fx.current().putObject(
        {
          bucket: "bucket",
          key: "big",
          body: { stream: source, digest: Promise.resolve({ size: chunk.length * chunks, checksums: {} }) },
          metadata: metadataOf(),
        },
        fencedCommit(null),
      );
      expect(result.size).toBe(chunk.length * chunks);
    } finally {
      clearInterval(watch);
    }
    expect(stored.bytes).toBeGreaterThan(0);
    // Streams keep a few chunks in flight; a buffered body would run 16 MiB ahead.
    expect(maxAhead).toBeLessThan(4 * 1024 * 1024);
  });
});

describe("fs backend on a data directory from before inline bodies", () => {
  it("serves its blob objects and writes new small ones inline", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "fencegate-fs-legacy-"));
    let db: EmbeddedDb | undefined;
    try {
      // The schema and the blob layout as they were: no inline_id column, no fs_bodies.
      db = openEmbeddedDb({ dataDir });
      db.exec(`
        CREATE TABLE fs_buckets (name TEXT PRIMARY KEY, created_at INTEGER NOT NULL) WITHOUT ROWID;
        CREATE TABLE fs_objects (bucket TEXT NOT NULL, key TEXT NOT NULL, blob TEXT, size INTEGER NOT NULL DEFAULT 0,
          etag TEXT, last_modified INTEGER, metadata TEXT, hct INTEGER, deleted INTEGER NOT NULL DEFAULT 0,
          PRIMARY KEY (bucket, key)) WITHOUT ROWID;
        CREATE INDEX fs_objects_live ON fs_objects (bucket, key, size, etag, last_modified) WHERE deleted = 0;
        CREATE UNIQUE INDEX fs_objects_blob ON fs_objects (blob) WHERE blob IS NOT NULL;
        INSERT INTO fs_buckets VALUES ('bucket', 1);
      `);
      const blobId = "3f2504e0-4f89-41d3-9a0c-0305e82c3301";
      await rm(join(dataDir, "blobs"), { recursive: true, force: true });
      await mkdir(join(dataDir, "blobs", "3f"), { recursive: true });
      await writeFile(join(dataDir, "blobs", "3f", blobId), "old bytes");
      db.prepare(
        `INSERT INTO fs_objects (bucket, key, blob, size, etag, last_modified, metadata, hct, deleted)
         VALUES ('bucket', 'old', ?, 9, ?, 1000, '{"headers":{},"userMetadata":{}}', 7, 0)`,
      ).run(blobId, md5Etag("old bytes"));

      const backend = await createFsBackend({ dataDir, db });
      const got = await backend.getObject("bucket", "old");
      expect((await readAll(got.body)).toString()).toBe("old bytes");
      expect(got.info.etag).toBe(md5Etag("old bytes"));
      expect(await backend.highestToken("bucket", "old")).toBe(7);
      const listed = await backend.listObjects({ bucket: "bucket", maxKeys: 10 });
      expect(listed.objects.map((o) => o.key)).toEqual(["old"]);

      // An overwrite with a small body goes inline and unlinks the old blob.
      await backend.putObject(
        { bucket: "bucket", key: "old", body: verifiedBody("new bytes"), metadata: metadataOf() },
        fencedCommit(8),
      );
      expect((await readAll((await backend.getObject("bucket", "old")).body)).toString()).toBe("new bytes");
      expect(await readdir(join(dataDir, "blobs", "3f"))).toEqual([]);
      await backend.close();
    } finally {
      db?.close();
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});

describe("directory fsyncs", () => {
  it("are shared by concurrent callers, each getting one that started after its call", async () => {
    const dir = await mkdtemp(join(tmpdir(), "fencegate-dirsync-"));
    try {
      const syncer = new DirSyncer();
      await Promise.all(Array.from({ length: 50 }, () => syncer.sync(dir)));
      expect(syncer.issued).toBeLessThanOrEqual(2);
      await syncer.sync(dir);
      expect(syncer.issued).toBeLessThanOrEqual(3);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
