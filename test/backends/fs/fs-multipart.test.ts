import { randomBytes, randomUUID } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { createFsBackend } from "../../../src/backends/fs/index.js";
import { MIN_PART_SIZE } from "../../../src/backends/storage-backend.js";
import { fakeClock } from "../../../src/core/clock.js";
import { fencedCommit } from "../../../src/fence/commit.js";
import { openEmbeddedDb } from "../../../src/sqlite/db.js";
import { metadataOf, readAll, sleep, verifiedBody } from "../../support/bodies.js";
import { describeMultipartContract, MULTIPART_MAX_AGE_MS } from "../multipart.contract.js";
import { type FsFixture, fsFixture } from "./fs-fixture.js";

/**
 * Multipart uploads of the fs backend: the shared conformance suite, then what only the fs
 * backend has: part blobs on disk across restarts and crashes, and the periodic age sweep.
 */

const multipartFixture = () =>
  fsFixture({ clock: fakeClock(), multipartMaxAgeMs: MULTIPART_MAX_AGE_MS, multipartSweepIntervalMs: 0 });

describeMultipartContract("fs", multipartFixture);

describe("fs backend multipart uploads", () => {
  const BUCKET = "bucket";
  const KEY = "big/object.bin";
  let fx: FsFixture | undefined;
  afterEach(async () => {
    await fx?.cleanup();
    fx = undefined;
  });

  it("keeps uploads and their part blobs across a restart, and sweeps orphaned part files", async () => {
    fx = await multipartFixture();
    const backend = fx.current();
    await backend.createBucket(BUCKET);
    const ref = { bucket: BUCKET, key: KEY };
    const { uploadId } = await backend.multipart.createUpload(
      { ...ref, metadata: metadataOf(), token: 5, leaseId: "lease-a", initiator: "tester" },
      fencedCommit(5),
    );
    const data = [randomBytes(MIN_PART_SIZE), randomBytes(123_457)];
    const parts = [];
    for (const [i, bytes] of data.entries()) {
      const { etag } = await backend.multipart.uploadPart(
        { ...ref, uploadId, partNumber: i + 1, body: verifiedBody(bytes, {}, 256 * 1024) },
        fencedCommit(5),
      );
      parts.push({ partNumber: i + 1, etag });
    }
    // Crash leftovers: a part body renamed into place but never recorded, and a temp file.
    const orphan = randomUUID();
    await mkdir(join(fx.dataDir, "blobs", orphan.slice(0, 2)), { recursive: true });
    await writeFile(join(fx.dataDir, "blobs", orphan.slice(0, 2), orphan), "unrecorded part");
    await writeFile(join(fx.dataDir, "blobs", "tmp", randomUUID()), "half a part");
    expect(await fx.leftovers()).toHaveLength(2);

    const reopened = await fx.reopen();
    expect(await fx.leftovers()).toEqual([]);
    const listed = await reopened.multipart.listParts({ ...ref, uploadId, maxParts: 10 });
    expect(listed.parts.map((p) => p.etag)).toEqual(parts.map((p) => p.etag));
    await reopened.multipart.completeUpload({ ...ref, uploadId, parts }, fencedCommit(5));
    const content = await readAll((await reopened.getObject(BUCKET, KEY)).body);
    expect(content.equals(Buffer.concat(data))).toBe(true);
    expect(await fx.storedParts()).toBe(0);
  });

  it("runs the age sweep periodically", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "fencegate-mpu-timer-"));
    const db = openEmbeddedDb({ dataDir });
    const clock = fakeClock();
    const backend = await createFsBackend({
      dataDir,
      db,
      clock,
      multipartMaxAgeMs: 1000,
      multipartSweepIntervalMs: 20,
    });
    try {
      await backend.createBucket(BUCKET);
      const ref = { bucket: BUCKET, key: KEY };
      const uploadId = (
        await backend.multipart.createUpload(
          { ...ref, metadata: metadataOf(), token: null, leaseId: null, initiator: null },
          fencedCommit(null),
        )
      ).uploadId;
      await sleep(100);
      expect((await backend.multipart.getUpload({ ...ref, uploadId })).uploadId).toBe(uploadId);
      clock.advance(1001);
      await vi.waitFor(
        async () => {
          await expect(backend.multipart.getUpload({ ...ref, uploadId })).rejects.toMatchObject({
            code: "NoSuchUpload",
          });
        },
        { timeout: 2000, interval: 20 },
      );
    } finally {
      await backend.close();
      db.close();
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
