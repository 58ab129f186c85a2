import { randomUUID } from "node:crypto";
import { mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { afterEach, describe, expect, it, vi } from "vitest";
import { BlobStore } from "../../../src/backends/fs/blob-store.js";
import { createFsBackend, type FsBackend, INLINE_MAX_BYTES } from "../../../src/backends/fs/index.js";
import { fencedCommit } from "../../../src/fence/commit.js";
import { openEmbeddedDb } from "../../../src/sqlite/db.js";
import {
  bodyOf,
  failingVerifiedBody,
  md5Etag,
  metadataOf,
  readAll,
  verifiedBody,
} from "../../support/bodies.js";
import { describeStorageBackendContract } from "../storage-backend.contract.js";
import { type FsFixture, fsFixture } from "./fs-fixture.js";

describeStorageBackendContract("fs", () => fsFixture());

describe("fs backend", () => {
  let fixture: FsFixture | undefined;
  afterEach(async () => {
    vi.restoreAllMocks();
    await fixture?.cleanup();
    fixture = undefined;
  });

  const open = async () => {
    fixture = await fsFixture();
    await fixture.backend.createBucket("bucket");
    return fixture;
  };

  /** A body just too large to be kept inline: a blob file. */
  const large = (text: string) => text.padEnd(INLINE_MAX_BYTES + 1, ".");

  const put = (backend: FsBackend, key: string, data: string, token: number | null = null) =>
    backend.putObject(
      { bucket: "bucket", key, body: verifiedBody(data), metadata: metadataOf() },
      fencedCommit(token),
    );

  it("removes crash leftovers on startup: temp files and unreferenced blobs", async () => {
    const fx = await open();
    await put(fx.current(), "kept", "kept body", 1);
    const blobs = join(fx.dataDir, "blobs");
    await writeFile(join(blobs, "tmp", randomUUID()), "half-written upload");
    await mkdir(join(blobs, "tmp", "odd-dir"));
    const orphan = randomUUID();
    await mkdir(join(blobs, orphan.slice(0, 2)), { recursive: true });
    await writeFile(join(blobs, orphan.slice(0, 2), orphan), "renamed but never committed");
    expect(await fx.leftovers()).toHaveLength(3);

    const backend = await fx.reopen();
    expect(await fx.leftovers()).toEqual([]);
    expect((await readAll((await backend.getObject("bucket", "kept")).body)).toString()).toBe("kept body");
  });

  it("keeps no temp file after a body error, and rethrows the body's own error", async () => {
    const fx = await open();
    const error = new Error("signature mismatch");
    await expect(
      fx.current().putObject(
        {
          bucket: "bucket",
          key: "k",
          body: failingVerifiedBody("x".repeat(100_000), error),
          metadata: metadataOf(),
        },
        fencedCommit(null),
      ),
    ).rejects.toBe(error);
    expect(await readdir(join(fx.dataDir, "blobs", "tmp"))).toEqual([]);
    expect(await fx.leftovers()).toEqual([]);
  });

  it("keeps no temp file when the body fails before its first byte", async () => {
    const fx = await open();
    for (let i = 0; i < 20; i++) {
      const body = new PassThrough();
      const digest = new Promise<never>((_, reject) => body.once("error", reject));
      digest.catch(() => undefined);
      const write = fx
        .current()
        .putObject(
          { bucket: "bucket", key: "k", body: { stream: body, digest }, metadata: metadataOf() },
          fencedCommit(null),
        );
      body.destroy(new Error("client went away"));
      await expect(write).rejects.toThrow("client went away");
    }
    expect(await fx.leftovers()).toEqual([]);
  });

  it("unlinks the replaced blob after an overwrite and the blob of a deleted object", async () => {
    const fx = await open();
    await put(fx.current(), "k", large("one"));
    await put(fx.current(), "k", large("two"));
    const blobFiles = async () => {
      const files: string[] = [];
      for (const shard of await readdir(join(fx.dataDir, "blobs"))) {
        if (shard !== "tmp") files.push(...(await readdir(join(fx.dataDir, "blobs", shard))));
      }
      return files;
    };
    expect(await blobFiles()).toHaveLength(1);
    await fx.current().deleteObject({ bucket: "bucket", key: "k" }, fencedCommit(1));
    expect(await blobFiles()).toEqual([]);
  });

  it("retries a GET whose blob was unlinked by an overwrite between reading the row and opening the file", async () => {
    const fx = await open();
    await put(fx.current(), "k", large("old"), 1);
    const original = BlobStore.prototype.openForRead;
    let raced = false;
    vi.spyOn(BlobStore.prototype, "openForRead").mockImplementation(async function (
      this: BlobStore,
      id: string,
    ) {
      if (!raced) {
        raced = true;
        await put(fx.current(), "k", large("new"), 2);
      }
      return original.call(this, id);
    });
    const got = await fx.current().getObject("bucket", "k");
    expect((await readAll(got.body)).toString()).toBe(large("new"));
    expect(got.info.size).toBe(large("new").length);
  });

  it("serves the version a GET found, even when an overwrite commits before its body is read", async () => {
    const fx = await open();
    const old = Buffer.alloc(300 * 1024, "a");
    await fx
      .current()
      .putObject(
        { bucket: "bucket", key: "k", body: verifiedBody(old), metadata: metadataOf() },
        fencedCommit(1),
      );
    const got = await fx.current().getObject("bucket", "k");
    const ranged = await fx.current().getObject("bucket", "k", { start: 10, end: 19 });
    await fx.current().putObject(
      {
        bucket: "bucket",
        key: "k",
        body: verifiedBody(Buffer.alloc(300 * 1024, "b")),
        metadata: metadataOf(),
      },
      fencedCommit(2),
    );
    await fx.current().deleteObject({ bucket: "bucket", key: "k" }, fencedCommit(3));
    expect((await readAll(got.body)).equals(old)).toBe(true);
    expect(got.info.etag).toBe(md5Etag(old));
    expect((await readAll(ranged.body)).toString()).toBe("a".repeat(10));
  });

  it("keeps its own copy of bodies and metadata", async () => {
    const fx = await open();
    const chunk = Buffer.from("original");
    const metadata = metadataOf({ who: "writer" });
    await fx.current().putObject(
      {
        bucket: "bucket",
        key: "k",
        body: { stream: bodyOf(chunk), digest: Promise.resolve({ size: 8, checksums: {} }) },
        metadata,
      },
      fencedCommit(null),
    );
    chunk.fill("x");
    metadata.userMetadata.who = "changed later";
    const head = await fx.current().headObject("bucket", "k");
    head.userMetadata.who = "changed by a reader";
    expect((await readAll((await fx.current().getObject("bucket", "k")).body)).toString()).toBe("original");
    expect((await fx.current().headObject("bucket", "k")).userMetadata).toEqual({ who: "writer" });
  });

  it("refuses every call after close with ServiceUnavailable", async () => {
    const fx = await open();
    const backend = fx.current();
    await put(backend, "k", "v", 1);
    await backend.close();
    const calls: Array<() => Promise<unknown>> = [
      () => backend.listBuckets(),
      () => backend.createBucket("another"),
      () => backend.headBucket("bucket"),
      () => backend.deleteBucket("bucket"),
      () => backend.writeState("bucket", "k"),
      () => put(backend, "k", "v2", 2),
      () => backend.deleteObject({ bucket: "bucket", key: "k" }, fencedCommit(2)),
      () => backend.raiseHighestToken("bucket", "k", 2),
      () => backend.headObject("bucket", "k"),
      () => backend.getObject("bucket", "k"),
      () => backend.listObjects({ bucket: "bucket", maxKeys: 1 }),
      () => backend.highestToken("bucket", "k"),
      () => backend.multipart.sweepAbandoned(),
    ];
    for (const call of calls) await expect(call()).rejects.toMatchObject({ code: "ServiceUnavailable" });
  });

  it("keeps its tables in the shared database under the fs_ prefix", async () => {
    const fx = await open();
    const tables = fx
      .db()
      .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
      .all()
      .map((row) => (row as { name: string }).name);
    expect(tables.sort()).toEqual(["fs_bodies", "fs_buckets", "fs_objects", "fs_parts", "fs_uploads"]);
  });

  it("lists from the covering live-object index, so tombstones cost nothing", async () => {
    const fx = await open();
    const plan = fx
      .db()
      .prepare(
        `EXPLAIN QUERY PLAN SELECT key, size, etag, last_modified FROM fs_objects INDEXED BY fs_objects_live
         WHERE bucket = ? AND deleted = 0 AND key > ? ORDER BY key`,
      )
      .all("bucket", "a")
      .map((row) => (row as { detail: string }).detail)
      .join("\n");
    expect(plan).toMatch(/USING COVERING INDEX fs_objects_live \(bucket=\? AND key>\?\)/);
    expect(plan).not.toMatch(/TEMP B-TREE/);
  });

  it("keeps lastModified to the millisecond from the injected clock", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "fencegate-fs-"));
    const db = openEmbeddedDb({ dataDir });
    try {
      const at = Date.UTC(2026, 10, 22, 12, 0, 0, 123);
      const backend = await createFsBackend({ dataDir, db, clock: () => at });
      await backend.createBucket("bucket");
      const result = await put(backend, "k", "v");
      expect(result.lastModified.getTime()).toBe(at);
      expect((await backend.headObject("bucket", "k")).lastModified.getTime()).toBe(at);
      expect((await backend.headBucket("bucket")).creationDate.getTime()).toBe(at);
      const listed = await backend.listObjects({ bucket: "bucket", maxKeys: 10 });
      expect(listed.objects[0]!.lastModified.getTime()).toBe(at);
    } finally {
      db.close();
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
