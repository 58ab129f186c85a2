import { createHash, randomBytes, randomUUID } from "node:crypto";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { createFsBackend, type FsBackend } from "../../src/backends/fs/index.js";
import { MIN_PART_SIZE, multipartEtag } from "../../src/backends/multipart.js";
import type { CommitHooks, WriteConditions } from "../../src/backends/storage-backend.js";
import { fakeClock } from "../../src/core/clock.js";
import { DomainError, StaleTokenError } from "../../src/core/errors.js";
import { type EmbeddedDb, openEmbeddedDb } from "../../src/embedded/db.js";
import { bodyOf, failingBody, md5Etag, metadataOf, readAll, sleep } from "./helpers.js";

/**
 * Multipart uploads of the fs backend: assembly, S3's rules for the part list, the fencing
 * rules (an upload is bound to its token; the HCT check is atomic with the completion), the
 * age sweep, and crash/restart behaviour of part blobs.
 */

const BUCKET = "bucket";
const KEY = "big/object.bin";

type Fixture = {
  dataDir: string;
  clock: ReturnType<typeof fakeClock>;
  backend: () => FsBackend;
  db: () => EmbeddedDb;
  reopen(): Promise<FsBackend>;
  leftovers(): Promise<string[]>;
  cleanup(): Promise<void>;
};

async function openFixture(): Promise<Fixture> {
  const dataDir = await mkdtemp(join(tmpdir(), "fencegate-mpu-"));
  const clock = fakeClock();
  const open = async (db: EmbeddedDb) =>
    createFsBackend({ dataDir, db, clock, multipartMaxAgeMs: 60_000, multipartSweepIntervalMs: 0 });
  let db = openEmbeddedDb({ dataDir });
  let backend = await open(db);
  await backend.createBucket(BUCKET);
  const blobsDir = join(dataDir, "blobs");
  return {
    dataDir,
    clock,
    backend: () => backend,
    db: () => db,
    async reopen() {
      await backend.close();
      db.close();
      db = openEmbeddedDb({ dataDir });
      backend = await open(db);
      return backend;
    },
    /** Temp files, and blobs that neither an object nor a live upload's part references. */
    async leftovers() {
      const found = (await readdir(join(blobsDir, "tmp"))).map((name) => `tmp/${name}`);
      const object = db.prepare("SELECT 1 FROM fs_objects WHERE blob = ?");
      const part = db.prepare("SELECT 1 FROM fs_parts WHERE blob = ?");
      for (const shard of await readdir(blobsDir)) {
        if (shard === "tmp") continue;
        for (const name of await readdir(join(blobsDir, shard))) {
          if (!object.get(name) && !part.get(name)) found.push(`${shard}/${name}`);
        }
      }
      return found;
    },
    async cleanup() {
      await backend.close();
      db.close();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

const fence = (token: number | null) => (token === null ? null : { token });

describe("fs backend multipart uploads", () => {
  let fx: Fixture;
  afterEach(async () => {
    await fx?.cleanup();
  });

  const mp = () => fx.backend().multipart;

  const create = async (token: number | null = 5, key = KEY, leaseId: string | null = "lease-a") =>
    (
      await mp().createUpload({
        bucket: BUCKET,
        key,
        metadata: metadataOf({ color: "blue" }, { headers: { contentType: "application/x-test" } }),
        fence: fence(token),
        leaseId: token === null ? null : leaseId,
        initiator: "tester",
      })
    ).uploadId;

  const part = (
    uploadId: string,
    partNumber: number,
    data: Buffer,
    token: number | null = 5,
    hooks?: CommitHooks,
  ) =>
    mp().uploadPart(
      { bucket: BUCKET, key: KEY, uploadId, partNumber, body: bodyOf(data, 256 * 1024), fence: fence(token) },
      hooks,
    );

  const complete = (
    uploadId: string,
    parts: { partNumber: number; etag: string }[],
    token: number | null = 5,
    options: { hooks?: CommitHooks; conditions?: WriteConditions } = {},
  ) =>
    mp().completeUpload(
      {
        bucket: BUCKET,
        key: KEY,
        uploadId,
        parts,
        fence: fence(token),
        ...(options.conditions ? { conditions: options.conditions } : {}),
      },
      options.hooks,
    );

  const put = (data: string | Buffer, token: number | null) =>
    fx.backend().putObject({
      bucket: BUCKET,
      key: KEY,
      body: bodyOf(data),
      metadata: metadataOf(),
      fence: fence(token),
    });

  const content = async () => readAll((await fx.backend().getObject(BUCKET, KEY)).body);

  const rejection = async (promise: Promise<unknown>): Promise<DomainError> => {
    const err = await promise.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(DomainError);
    return err as DomainError;
  };

  /** Two parts: one of exactly the minimum size and a short last one. */
  const twoParts = async (uploadId: string, token: number | null = 5) => {
    const a = randomBytes(MIN_PART_SIZE);
    const b = randomBytes(123_457);
    const ra = await part(uploadId, 1, a, token);
    const rb = await part(uploadId, 2, b, token);
    return { a, b, parts: [ra, rb].map((r, i) => ({ partNumber: i + 1, etag: r.etag })) };
  };

  it("assembles the parts in order into one object with S3's multipart ETag", async () => {
    fx = await openFixture();
    const uploadId = await create(5);
    const { a, b, parts } = await twoParts(uploadId);
    expect(parts[0]!.etag).toBe(md5Etag(a));

    const result = await complete(uploadId, parts);
    const md5s = [a, b].map((d) => createHash("md5").update(d).digest("hex"));
    expect(result.etag).toBe(multipartEtag(md5s));
    expect(result.etag).toMatch(/^"[0-9a-f]{32}-2"$/);
    expect(result).toMatchObject({ size: a.length + b.length, highestToken: 5 });

    expect((await content()).equals(Buffer.concat([a, b]))).toBe(true);
    const info = await fx.backend().headObject(BUCKET, KEY);
    expect(info).toMatchObject({ etag: result.etag, size: a.length + b.length });
    expect(info.userMetadata).toEqual({ color: "blue" });
    expect(info.headers.contentType).toBe("application/x-test");
    expect(await fx.backend().highestToken(BUCKET, KEY)).toBe(5);

    // The upload and its part files are gone.
    await expect(mp().getUpload({ bucket: BUCKET, key: KEY, uploadId })).rejects.toMatchObject({
      code: "NoSuchUpload",
    });
    expect(await fx.leftovers()).toEqual([]);
    expect(fx.db().prepare("SELECT COUNT(*) AS n FROM fs_parts").get()).toEqual({ n: 0 });
  });

  it("uses only the listed parts, accepts unquoted ETags, and takes a single small part", async () => {
    fx = await openFixture();
    const uploadId = await create(5);
    const one = await part(uploadId, 3, Buffer.from("only part"));
    await part(uploadId, 7, Buffer.from("not listed"));
    const result = await complete(uploadId, [{ partNumber: 3, etag: one.etag.replaceAll('"', "") }]);
    expect((await content()).toString()).toBe("only part");
    expect(result.etag).toMatch(/-1"$/);
    expect(await fx.leftovers()).toEqual([]); // the unlisted part is removed too
  });

  it("replaces a part uploaded again under the same number", async () => {
    fx = await openFixture();
    const uploadId = await create(5);
    await part(uploadId, 1, Buffer.from("first version"));
    const second = await part(uploadId, 1, Buffer.from("second"));
    const listed = await mp().listParts({ bucket: BUCKET, key: KEY, uploadId, maxParts: 1000 });
    expect(listed.parts).toEqual([
      { partNumber: 1, size: 6, etag: second.etag, lastModified: expect.any(Date) },
    ]);
    expect(await fx.leftovers()).toEqual([]);
    await complete(uploadId, [{ partNumber: 1, etag: second.etag }]);
    expect((await content()).toString()).toBe("second");
  });

  it("refuses part lists that S3 refuses: order, unknown parts, wrong ETags, small parts", async () => {
    fx = await openFixture();
    const uploadId = await create(5);
    const { parts } = await twoParts(uploadId);
    const small = await part(uploadId, 3, Buffer.from("tiny"));

    const refusal = async (list: { partNumber: number; etag: string }[]) =>
      (await rejection(complete(uploadId, list))).code;
    expect(await refusal([parts[1]!, parts[0]!])).toBe("InvalidPartOrder");
    expect(await refusal([parts[0]!, parts[0]!])).toBe("InvalidPartOrder");
    expect(await refusal([parts[0]!, { partNumber: 4, etag: parts[1]!.etag }])).toBe("InvalidPart");
    expect(await refusal([parts[0]!, { partNumber: 2, etag: parts[0]!.etag }])).toBe("InvalidPart");
    expect(await refusal([{ partNumber: 0, etag: parts[0]!.etag }])).toBe("InvalidPart");
    const tooSmall = await rejection(complete(uploadId, [parts[1]!, { partNumber: 3, etag: small.etag }]));
    expect(tooSmall.code).toBe("EntityTooSmall");
    expect(tooSmall.details).toMatchObject({ partNumber: 2, proposedSize: 123_457 });
    expect((await rejection(complete(uploadId, []))).details.s3Code).toBe("MalformedXML");

    // Nothing was written, the upload is intact and can still complete.
    await expect(fx.backend().headObject(BUCKET, KEY)).rejects.toMatchObject({ code: "NoSuchKey" });
    expect(await fx.leftovers()).toEqual([]);
    await complete(uploadId, [parts[0]!, { partNumber: 3, etag: small.etag }]);
    expect((await fx.backend().headObject(BUCKET, KEY)).size).toBe(MIN_PART_SIZE + 4);
  });

  it("refuses part numbers outside 1..10000", async () => {
    fx = await openFixture();
    const uploadId = await create(5);
    for (const n of [0, 10_001, -1, 1.5]) {
      expect((await rejection(part(uploadId, n, Buffer.from("x")))).code).toBe("InvalidArgument");
    }
    expect((await part(uploadId, 10_000, Buffer.from("x"))).size).toBe(1);
  });

  it("answers NoSuchUpload for unknown, aborted and completed uploads, and for another key", async () => {
    fx = await openFixture();
    const unknown = "0".repeat(44);
    expect((await rejection(part(unknown, 1, Buffer.from("x")))).code).toBe("NoSuchUpload");

    const aborted = await create(5);
    await part(aborted, 1, Buffer.from("x"));
    await mp().abortUpload({ bucket: BUCKET, key: KEY, uploadId: aborted });
    expect(await fx.leftovers()).toEqual([]);
    expect((await rejection(part(aborted, 1, Buffer.from("x")))).code).toBe("NoSuchUpload");
    expect((await rejection(complete(aborted, [{ partNumber: 1, etag: md5Etag("x") }]))).code).toBe(
      "NoSuchUpload",
    );
    expect((await rejection(mp().abortUpload({ bucket: BUCKET, key: KEY, uploadId: aborted }))).code).toBe(
      "NoSuchUpload",
    );

    const done = await create(5);
    const p = await part(done, 1, Buffer.from("y"));
    await complete(done, [{ partNumber: 1, etag: p.etag }]);
    expect((await rejection(complete(done, [{ partNumber: 1, etag: p.etag }]))).code).toBe("NoSuchUpload");

    const other = await create(5, "other-key");
    expect((await rejection(part(other, 1, Buffer.from("x")))).code).toBe("NoSuchUpload");
    expect(
      (await rejection(mp().listParts({ bucket: BUCKET, key: KEY, uploadId: other, maxParts: 10 }))).code,
    ).toBe("NoSuchUpload");
  });

  describe("fencing", () => {
    it("binds the upload to its token: other tokens and missing tokens are refused", async () => {
      fx = await openFixture();
      const uploadId = await create(5);
      const scope = await rejection(part(uploadId, 1, Buffer.from("x"), 6));
      expect(scope.code).toBe("FencingTokenScopeMismatch");
      expect((await rejection(part(uploadId, 1, Buffer.from("x"), 4))).code).toBe(
        "FencingTokenScopeMismatch",
      );
      expect((await rejection(part(uploadId, 1, Buffer.from("x"), null))).code).toBe("FencingTokenRequired");
      const ok = await part(uploadId, 1, Buffer.from("x"), 5);
      const list = [{ partNumber: 1, etag: ok.etag }];
      expect((await rejection(complete(uploadId, list, 6))).code).toBe("FencingTokenScopeMismatch");
      expect((await rejection(complete(uploadId, list, null))).code).toBe("FencingTokenRequired");

      // An unfenced upload does not take parts or a completion that carry a token.
      const unfenced = await create(null);
      expect((await rejection(part(unfenced, 1, Buffer.from("x"), 5))).code).toBe(
        "FencingTokenScopeMismatch",
      );
      const p = await part(unfenced, 1, Buffer.from("unfenced"), null);
      await complete(unfenced, [{ partNumber: 1, etag: p.etag }], null);
      expect((await content()).toString()).toBe("unfenced");
      expect(await fx.leftovers()).toEqual([]);
    });

    it("checks the HCT at creation without raising it", async () => {
      fx = await openFixture();
      await put("v7", 7);
      const stale = await rejection(create(6));
      expect(stale).toBeInstanceOf(StaleTokenError);
      expect(stale.details.highestToken).toBe(7);
      expect((await mp().listUploads({ bucket: BUCKET, maxUploads: 10 })).uploads).toEqual([]);

      await create(9);
      expect(await fx.backend().highestToken(BUCKET, KEY)).toBe(7);
      const created = (await mp().listUploads({ bucket: BUCKET, maxUploads: 10 })).uploads;
      expect(created).toMatchObject([{ key: KEY, token: 9, leaseId: "lease-a", initiator: "tester" }]);
      await expect(
        mp().createUpload({
          bucket: "no-such-bucket",
          key: KEY,
          metadata: metadataOf(),
          fence: null,
          leaseId: null,
          initiator: null,
        }),
      ).rejects.toMatchObject({ code: "NoSuchBucket" });
    });

    it("a completion refused by the HCT leaves the earlier object intact and the upload abortable", async () => {
      fx = await openFixture();
      const uploadId = await create(5);
      const { parts } = await twoParts(uploadId);
      await put("written by the newer lease holder", 7); // token 7 commits after the upload began

      const refused = await rejection(complete(uploadId, parts));
      expect(refused).toBeInstanceOf(StaleTokenError);
      expect(refused.details.highestToken).toBe(7);
      expect((await content()).toString()).toBe("written by the newer lease holder");
      expect(await fx.backend().highestToken(BUCKET, KEY)).toBe(7);
      expect(await fx.leftovers()).toEqual([]); // the assembled blob is gone

      // The upload is still there (its parts too) and can be aborted.
      expect((await mp().listParts({ bucket: BUCKET, key: KEY, uploadId, maxParts: 10 })).parts).toHaveLength(
        2,
      );
      await mp().abortUpload({ bucket: BUCKET, key: KEY, uploadId });
      expect(await fx.leftovers()).toEqual([]);
      expect(fx.db().prepare("SELECT COUNT(*) AS n FROM fs_parts").get()).toEqual({ n: 0 });
    });

    it("checks the HCT atomically with the completion's commit", async () => {
      fx = await openFixture();
      await put("v1", 1);
      const uploadId = await create(5);
      const { parts } = await twoParts(uploadId);
      // A newer writer commits after the completion's early checks and its assembly, right
      // before its commit: only a check inside the commit itself can see it.
      const hooks: CommitHooks = {
        beforeCommit: async () => {
          await put("racing write", 8);
        },
      };
      const refused = await rejection(complete(uploadId, parts, 5, { hooks }));
      expect(refused).toBeInstanceOf(StaleTokenError);
      expect((await content()).toString()).toBe("racing write");
      expect(await fx.backend().highestToken(BUCKET, KEY)).toBe(8);
      expect(await fx.leftovers()).toEqual([]);
    });

    it("a beforeCommit refusal (lost lease) changes nothing", async () => {
      fx = await openFixture();
      await put("earlier", 2);
      const uploadId = await create(5);
      const { parts } = await twoParts(uploadId);
      const lost = new DomainError("LeaseExpired", "the lease expired");
      const hooks = { beforeCommit: () => Promise.reject(lost) };
      await expect(complete(uploadId, parts, 5, { hooks })).rejects.toBe(lost);
      expect((await content()).toString()).toBe("earlier");
      expect(await fx.backend().highestToken(BUCKET, KEY)).toBe(2);
      // A part refused by the hook is not recorded either.
      await expect(part(uploadId, 3, Buffer.from("late"), 5, hooks)).rejects.toBe(lost);
      expect((await mp().listParts({ bucket: BUCKET, key: KEY, uploadId, maxParts: 10 })).parts).toHaveLength(
        2,
      );
      expect(await fx.leftovers()).toEqual([]);
    });

    it("refuses a completion whose part was replaced or whose upload was aborted meanwhile", async () => {
      fx = await openFixture();
      await put("earlier", 2);
      const uploadId = await create(5);
      const { parts } = await twoParts(uploadId);
      const replace = { beforeCommit: async () => void (await part(uploadId, 2, Buffer.from("replaced"))) };
      expect((await rejection(complete(uploadId, parts, 5, { hooks: replace }))).code).toBe("InvalidPart");
      expect((await content()).toString()).toBe("earlier");

      const listed = (await mp().listParts({ bucket: BUCKET, key: KEY, uploadId, maxParts: 10 })).parts;
      const current = listed.map((p) => ({ partNumber: p.partNumber, etag: p.etag }));
      const abort = { beforeCommit: () => mp().abortUpload({ bucket: BUCKET, key: KEY, uploadId }) };
      expect((await rejection(complete(uploadId, current, 5, { hooks: abort }))).code).toBe("NoSuchUpload");
      expect((await content()).toString()).toBe("earlier");
      expect(await fx.leftovers()).toEqual([]);
    });

    it("applies If-Match / If-None-Match at completion", async () => {
      fx = await openFixture();
      const existing = await put("existing", 1);
      const uploadId = await create(5);
      const p = await part(uploadId, 1, Buffer.from("new"));
      const list = [{ partNumber: 1, etag: p.etag }];
      const noneMatch = await rejection(complete(uploadId, list, 5, { conditions: { ifNoneMatch: "*" } }));
      expect(noneMatch.code).toBe("PreconditionFailed");
      const match = await rejection(complete(uploadId, list, 5, { conditions: { ifMatch: '"nope"' } }));
      expect(match.code).toBe("PreconditionFailed");
      expect((await content()).toString()).toBe("existing");
      await complete(uploadId, list, 5, { conditions: { ifMatch: existing.etag } });
      expect((await content()).toString()).toBe("new");
    });
  });

  it("lists parts in pages", async () => {
    fx = await openFixture();
    const uploadId = await create(5);
    for (const n of [4, 1, 9, 2, 7]) await part(uploadId, n, Buffer.from(`part ${n}`));
    const ref = { bucket: BUCKET, key: KEY, uploadId };
    const first = await mp().listParts({ ...ref, maxParts: 2 });
    expect(first.parts.map((p) => p.partNumber)).toEqual([1, 2]);
    expect(first).toMatchObject({ isTruncated: true, nextPartNumberMarker: 2 });
    expect(first.upload).toMatchObject({
      uploadId,
      key: KEY,
      token: 5,
      metadata: { userMetadata: { color: "blue" } },
    });
    const second = await mp().listParts({ ...ref, maxParts: 2, partNumberMarker: 2 });
    expect(second.parts.map((p) => p.partNumber)).toEqual([4, 7]);
    const last = await mp().listParts({ ...ref, maxParts: 2, partNumberMarker: 7 });
    expect(last.parts.map((p) => p.partNumber)).toEqual([9]);
    expect(last.isTruncated).toBe(false);
    expect(last.nextPartNumberMarker).toBeUndefined();
  });

  it("lists uploads by key, then by initiation, with prefix, delimiter and both markers", async () => {
    fx = await openFixture();
    const ids: Record<string, string> = {};
    for (const name of ["b", "a#1", "a#2", "dir/x", "dir/y", "c"]) {
      fx.clock.advance(1000);
      ids[name] = await create(null, name.replace(/#\d$/, ""));
    }
    const all = await mp().listUploads({ bucket: BUCKET, maxUploads: 100 });
    expect(all.uploads.map((u) => u.uploadId)).toEqual(
      ["a#1", "a#2", "b", "c", "dir/x", "dir/y"].map((n) => ids[n]),
    );
    expect(all.isTruncated).toBe(false);

    const page1 = await mp().listUploads({ bucket: BUCKET, maxUploads: 1 });
    expect(page1).toMatchObject({ isTruncated: true, nextKeyMarker: "a", nextUploadIdMarker: ids["a#1"] });
    const page2 = await mp().listUploads({
      bucket: BUCKET,
      maxUploads: 2,
      keyMarker: "a",
      uploadIdMarker: ids["a#1"]!,
    });
    expect(page2.uploads.map((u) => u.uploadId)).toEqual([ids["a#2"], ids["b"]]);
    const afterKey = await mp().listUploads({ bucket: BUCKET, maxUploads: 10, keyMarker: "a" });
    expect(afterKey.uploads.map((u) => u.key)).toEqual(["b", "c", "dir/x", "dir/y"]);

    const grouped = await mp().listUploads({ bucket: BUCKET, maxUploads: 10, delimiter: "/" });
    expect(grouped.uploads.map((u) => u.key)).toEqual(["a", "a", "b", "c"]);
    expect(grouped.commonPrefixes).toEqual(["dir/"]);
    const prefixed = await mp().listUploads({ bucket: BUCKET, maxUploads: 10, prefix: "dir/" });
    expect(prefixed.uploads.map((u) => u.key)).toEqual(["dir/x", "dir/y"]);
    await expect(mp().listUploads({ bucket: "missing-bucket", maxUploads: 1 })).rejects.toMatchObject({
      code: "NoSuchBucket",
    });
  });

  it("sweeps uploads older than the configured age, with their parts", async () => {
    fx = await openFixture();
    const old = await create(5, "old");
    await mp().uploadPart({
      bucket: BUCKET,
      key: "old",
      uploadId: old,
      partNumber: 1,
      body: bodyOf("old part"),
      fence: fence(5),
    });
    fx.clock.advance(45_000);
    const young = await create(5);
    await part(young, 1, Buffer.from("young part"));

    fx.clock.advance(10_000); // old: 55 s, young: 10 s; the limit is 60 s
    expect(await mp().sweepAbandoned()).toEqual({ removed: 0 });
    fx.clock.advance(10_000); // old: 65 s
    expect(await mp().sweepAbandoned()).toEqual({ removed: 1 });
    await expect(mp().getUpload({ bucket: BUCKET, key: "old", uploadId: old })).rejects.toMatchObject({
      code: "NoSuchUpload",
    });
    expect(
      (await mp().listUploads({ bucket: BUCKET, maxUploads: 10 })).uploads.map((u) => u.uploadId),
    ).toEqual([young]);
    expect(await fx.leftovers()).toEqual([]);
    expect(fx.db().prepare("SELECT COUNT(*) AS n FROM fs_parts").get()).toEqual({ n: 1 });
  });

  it("keeps uploads and their part blobs across a restart, and sweeps orphaned part files", async () => {
    fx = await openFixture();
    const uploadId = await create(5);
    const { a, b, parts } = await twoParts(uploadId);
    // Crash leftovers: a part body renamed into place but never recorded, and a temp file.
    const orphan = randomUUID();
    await writeFile(join(fx.dataDir, "blobs", orphan.slice(0, 2), orphan), "unrecorded part");
    await writeFile(join(fx.dataDir, "blobs", "tmp", randomUUID()), "half a part");
    expect(await fx.leftovers()).toHaveLength(2);

    await fx.reopen();
    expect(await fx.leftovers()).toEqual([]);
    const listed = await mp().listParts({ bucket: BUCKET, key: KEY, uploadId, maxParts: 10 });
    expect(listed.parts.map((p) => p.etag)).toEqual(parts.map((p) => p.etag));
    await complete(uploadId, parts);
    expect((await content()).equals(Buffer.concat([a, b]))).toBe(true);
  });

  it("records nothing and leaves no file when a part body fails", async () => {
    fx = await openFixture();
    const uploadId = await create(5);
    const error = new Error("chunk signature mismatch");
    await expect(
      mp().uploadPart({
        bucket: BUCKET,
        key: KEY,
        uploadId,
        partNumber: 1,
        body: failingBody("partial", error),
        fence: fence(5),
      }),
    ).rejects.toBe(error);
    expect((await mp().listParts({ bucket: BUCKET, key: KEY, uploadId, maxParts: 10 })).parts).toEqual([]);
    expect(await fx.leftovers()).toEqual([]);
  });

  it("races completions against newer writes: the newer token always wins, nothing is torn", async () => {
    fx = await openFixture();
    for (let round = 0; round < 10; round++) {
      const older = 10 * round + 5;
      const uploadId = await create(older);
      const p = await part(uploadId, 1, Buffer.from(`multipart ${round}`), older);
      const results = await Promise.allSettled([
        complete(uploadId, [{ partNumber: 1, etag: p.etag }], older),
        put(`newer ${round}`, older + 1),
      ]);
      expect(results[1].status).toBe("fulfilled");
      if (results[0].status === "rejected") expect(results[0].reason).toBeInstanceOf(StaleTokenError);
      // Whichever committed first, the newer write is what remains.
      expect((await content()).toString()).toBe(`newer ${round}`);
      expect(await fx.backend().highestToken(BUCKET, KEY)).toBe(older + 1);
      if (results[0].status === "rejected") await mp().abortUpload({ bucket: BUCKET, key: KEY, uploadId });
    }
    expect(await fx.leftovers()).toEqual([]);
  });

  it("runs the age sweep periodically", async () => {
    fx = await openFixture();
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
        await backend.multipart.createUpload({
          ...ref,
          metadata: metadataOf(),
          fence: null,
          leaseId: null,
          initiator: null,
        })
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

  it("refuses calls after close", async () => {
    fx = await openFixture();
    const uploadId = await create(5);
    await fx.backend().close();
    await expect(mp().getUpload({ bucket: BUCKET, key: KEY, uploadId })).rejects.toMatchObject({
      code: "ServiceUnavailable",
    });
    await fx.reopen();
  });
});
