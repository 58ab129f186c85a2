import { randomUUID } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type {
  Checksums,
  FencedCommit,
  ListInput,
  ObjectMetadata,
  PutObjectResult,
  StorageBackend,
  WriteConditions,
} from "../../src/backends/storage-backend.js";
import { DomainError, StaleTokenError } from "../../src/core/errors.js";
import { fencedCommit } from "../../src/fence/commit.js";
import {
  bodyOf,
  failingVerifiedBody,
  md5Etag,
  metadataOf,
  readAll,
  shuffled,
  sleep,
  verifiedBody,
} from "../support/bodies.js";

/**
 * The conformance suite every StorageBackend passes (fs, s3, azure). It checks S3 semantics and
 * the fencing safety rules the backend owns: the HCT rule is atomic with the commit, the HCT never
 * decreases (deletes, bucket re-creation, restarts), a refused or failed write changes nothing,
 * and the commit contract (src/fence/commit.ts) is honoured.
 */

export type BackendFixture = {
  backend: StorageBackend;
  /** Closes the current backend and removes everything the fixture created. */
  cleanup: () => Promise<void>;
  /** Closes the backend and opens a new one on the same state, as after a restart. */
  reopen?: () => Promise<StorageBackend>;
  /** Temp files and unreferenced blobs left in the backend's storage (expected: none). */
  leftovers?: () => Promise<string[]>;
};

export type BackendFactory = () => Promise<BackendFixture>;

export function describeStorageBackendContract(name: string, factory: BackendFactory): void {
  describe(`StorageBackend contract: ${name}`, () => {
    let fixture: BackendFixture;
    let backend: StorageBackend;
    let bucket: string;

    beforeEach(async () => {
      fixture = await factory();
      backend = fixture.backend;
      bucket = `fg-${randomUUID().slice(0, 13)}`;
      await backend.createBucket(bucket);
    });

    afterEach(async () => {
      await fixture.cleanup();
    });

    const put = (
      key: string,
      data: string | Buffer,
      token: number | null = null,
      options: {
        metadata?: ObjectMetadata;
        conditions?: WriteConditions;
        checksums?: Checksums;
        commit?: Partial<FencedCommit>;
      } = {},
    ): Promise<PutObjectResult> =>
      backend.putObject(
        {
          bucket,
          key,
          body: verifiedBody(data, options.checksums),
          metadata: options.metadata ?? metadataOf(),
        },
        fencedCommit(token, { conditions: options.conditions ?? {}, ...options.commit }),
      );

    const del = (key: string, token: number | null = null, commit: Partial<FencedCommit> = {}) =>
      backend.deleteObject({ bucket, key }, fencedCommit(token, commit));

    const content = async (key: string) =>
      (await readAll((await backend.getObject(bucket, key)).body)).toString();

    const list = (input: Omit<ListInput, "bucket" | "maxKeys"> & { maxKeys?: number }) =>
      backend.listObjects({ bucket, maxKeys: 1000, ...input });

    /** Everything about an object a refused write must leave untouched. */
    const snapshot = async (key: string) => {
      const got = await backend.getObject(bucket, key);
      return {
        info: got.info,
        body: (await readAll(got.body)).toString(),
        hct: await backend.highestToken(bucket, key),
      };
    };

    const rejectsWithCode = (promise: Promise<unknown>, code: string) =>
      expect(promise).rejects.toMatchObject({ code });

    const reopen = async () => {
      if (!fixture.reopen) throw new Error("fixture cannot reopen");
      backend = await fixture.reopen();
    };

    const expectNoLeftovers = async () => {
      if (fixture.leftovers) expect(await fixture.leftovers()).toEqual([]);
    };

    describe("buckets", () => {
      it("creates, heads and lists a bucket", async () => {
        const info = await backend.headBucket(bucket);
        expect(info.name).toBe(bucket);
        expect(info.creationDate).toBeInstanceOf(Date);
        const names = (await backend.listBuckets()).map((b) => b.name);
        expect(names).toContain(bucket);
      });

      it("refuses to create a bucket that exists", async () => {
        await rejectsWithCode(backend.createBucket(bucket), "BucketAlreadyOwnedByYou");
      });

      it("keeps a bucket's location constraint (none by default), across re-creation and restarts", async () => {
        expect(await backend.bucketLocation(bucket)).toBe("");
        const located = `fg-${randomUUID().slice(0, 13)}`;
        await backend.createBucket(located, { location: "eu-west-1" });
        expect(await backend.bucketLocation(located)).toBe("eu-west-1");
        // Created again with another constraint after a deletion: the new one counts.
        await backend.deleteBucket(located);
        await backend.createBucket(located, { location: "default" });
        expect(await backend.bucketLocation(located)).toBe("default");
        await rejectsWithCode(
          backend.bucketLocation(`fg-missing-${randomUUID().slice(0, 8)}`),
          "NoSuchBucket",
        );
        if (fixture.reopen) {
          await reopen();
          expect(await backend.bucketLocation(located)).toBe("default");
          expect(await backend.bucketLocation(bucket)).toBe("");
        }
        await backend.deleteBucket(located);
        await backend.createBucket(located);
        expect(await backend.bucketLocation(located)).toBe("");
      });

      it("refuses invalid bucket names", async () => {
        for (const name of [
          "ab",
          "Upper-case",
          "192.168.1.1",
          "a..b",
          "-leading",
          "trailing-",
          "under_score",
        ]) {
          await rejectsWithCode(backend.createBucket(name), "InvalidBucketName");
        }
      });

      it("answers NoSuchBucket for a missing bucket", async () => {
        const missing = `fg-missing-${randomUUID().slice(0, 8)}`;
        await rejectsWithCode(backend.headBucket(missing), "NoSuchBucket");
        await rejectsWithCode(backend.deleteBucket(missing), "NoSuchBucket");
        await rejectsWithCode(
          backend.putObject(
            { bucket: missing, key: "k", body: verifiedBody("x"), metadata: metadataOf() },
            fencedCommit(null),
          ),
          "NoSuchBucket",
        );
        await rejectsWithCode(
          backend.deleteObject({ bucket: missing, key: "k" }, fencedCommit(1)),
          "NoSuchBucket",
        );
        await rejectsWithCode(backend.writeState(missing, "k"), "NoSuchBucket");
        await rejectsWithCode(backend.headObject(missing, "k"), "NoSuchBucket");
        await rejectsWithCode(backend.getObject(missing, "k"), "NoSuchBucket");
        await rejectsWithCode(backend.listObjects({ bucket: missing, maxKeys: 10 }), "NoSuchBucket");
      });

      it("refuses to delete a non-empty bucket, and deletes it once empty (tombstones do not count)", async () => {
        await put("a", "1", 5);
        await rejectsWithCode(backend.deleteBucket(bucket), "BucketNotEmpty");
        await del("a", 5);
        await backend.deleteBucket(bucket);
        await rejectsWithCode(backend.headBucket(bucket), "NoSuchBucket");
        expect((await backend.listBuckets()).map((b) => b.name)).not.toContain(bucket);
      });
    });

    describe("objects", () => {
      it("puts, heads, gets and deletes an object", async () => {
        const result = await put("dir/file.txt", "hello world");
        expect(result.etag).toBe(md5Etag("hello world"));
        expect(result.size).toBe(11);
        expect(result.lastModified).toBeInstanceOf(Date);
        expect(result.highestToken).toBeNull();

        const head = await backend.headObject(bucket, "dir/file.txt");
        expect(head).toMatchObject({ key: "dir/file.txt", size: 11, etag: md5Etag("hello world") });
        expect(Math.abs(head.lastModified.getTime() - result.lastModified.getTime())).toBeLessThan(1000);

        const got = await backend.getObject(bucket, "dir/file.txt");
        expect(got.range).toBeUndefined();
        expect(got.info.etag).toBe(result.etag);
        expect((await readAll(got.body)).toString()).toBe("hello world");

        expect(await del("dir/file.txt")).toEqual({ existed: true, highestToken: null });
        await rejectsWithCode(backend.headObject(bucket, "dir/file.txt"), "NoSuchKey");
        await rejectsWithCode(backend.getObject(bucket, "dir/file.txt"), "NoSuchKey");
        expect(await del("dir/file.txt")).toEqual({ existed: false, highestToken: null });
      });

      it("answers NoSuchKey for a missing key", async () => {
        await rejectsWithCode(backend.headObject(bucket, "nope"), "NoSuchKey");
        await rejectsWithCode(backend.getObject(bucket, "nope"), "NoSuchKey");
      });

      it("round-trips headers, user metadata and checksums", async () => {
        const metadata: ObjectMetadata = {
          headers: {
            contentType: "text/plain; charset=utf-8",
            contentEncoding: "identity",
            contentDisposition: 'attachment; filename="a.txt"',
            contentLanguage: "en",
            cacheControl: "max-age=60",
            expires: "Thu, 01 Dec 2033 16:00:00 GMT",
          },
          userMetadata: { owner: "worker-7", "x-note": "ünïcödé" },
        };
        // Checksums come with the verified body, not with the metadata: a backend stores what the
        // body's verification established.
        const checksums = { CRC32: "DUoRhQ==", SHA256: "uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek=" };
        const result = await put("m", "hello world", null, { metadata, checksums });
        expect(result.checksums).toEqual(checksums);
        const head = await backend.headObject(bucket, "m");
        expect(head.headers).toEqual(metadata.headers);
        expect(head.userMetadata).toEqual(metadata.userMetadata);
        expect(head.checksums).toEqual(checksums);
        const got = await backend.getObject(bucket, "m");
        await readAll(got.body);
        expect(got.info.userMetadata).toEqual(metadata.userMetadata);
      });

      it("replaces body and metadata on overwrite", async () => {
        await put("k", "first", null, {
          metadata: metadataOf({ a: "1" }, { headers: { contentType: "text/a" } }),
        });
        await put("k", "second!", null, { metadata: metadataOf({ b: "2" }) });
        const head = await backend.headObject(bucket, "k");
        expect(head.userMetadata).toEqual({ b: "2" });
        expect(head.headers.contentType).toBeUndefined();
        expect(head.size).toBe(7);
        expect(await content("k")).toBe("second!");
      });

      it("stores an empty object", async () => {
        const result = await put("empty", "");
        expect(result).toMatchObject({ size: 0, etag: '"d41d8cd98f00b204e9800998ecf8427e"' });
        expect(await content("empty")).toBe("");
      });

      it("streams a multi-megabyte body in many chunks", async () => {
        const data = Buffer.alloc(3 * 1024 * 1024 + 17);
        for (let i = 0; i < data.length; i++) data[i] = (i * 31) & 0xff;
        const result = await put("big", data);
        expect(result).toMatchObject({ size: data.length, etag: md5Etag(data) });
        const got = await readAll((await backend.getObject(bucket, "big")).body);
        expect(got.equals(data)).toBe(true);
      });

      it("round-trips unusual but valid keys", async () => {
        const keys = [
          "a b",
          "ünïcödé/ключ",
          "emoji 😀",
          "trailing/",
          "a//b",
          "%2F.txt",
          "tab\there",
          "...",
          "a/.../b",
        ];
        for (const key of keys) await put(key, `body of ${key}`);
        for (const key of keys) expect(await content(key)).toBe(`body of ${key}`);
        expect((await list({})).objects.map((o) => o.key).sort()).toEqual([...keys].sort());
      });

      it("accepts a 1024-byte key", async () => {
        // Keys are validated once, where requests enter the gateway (src/core/key-rules.ts, and
        // test/s3-endpoint/bad-input.test.ts for keys that could escape a root); a backend stores any valid key.
        const longest = "é".repeat(512);
        await put(longest, "x");
        expect(await content(longest)).toBe("x");
        expect((await list({})).objects.map((o) => o.key)).toEqual([longest]);
      });
    });

    describe("conditional writes", () => {
      it("If-None-Match: * writes only when the object does not exist", async () => {
        await put("k", "one", null, { conditions: { ifNoneMatch: "*" } });
        const before = await snapshot("k");
        await rejectsWithCode(
          put("k", "two", null, { conditions: { ifNoneMatch: "*" } }),
          "PreconditionFailed",
        );
        expect(await snapshot("k")).toEqual(before);
        await del("k");
        await put("k", "three", null, { conditions: { ifNoneMatch: "*" } });
        expect(await content("k")).toBe("three");
      });

      it("If-Match writes only over the given ETag", async () => {
        // No object at all: S3 answers 404 NoSuchKey rather than 412.
        await rejectsWithCode(put("k", "x", null, { conditions: { ifMatch: md5Etag("x") } }), "NoSuchKey");
        const first = await put("k", "one");
        await rejectsWithCode(
          put("k", "two", null, { conditions: { ifMatch: md5Etag("other") } }),
          "PreconditionFailed",
        );
        expect(await content("k")).toBe("one");
        await put("k", "two", null, { conditions: { ifMatch: first.etag } });
        expect(await content("k")).toBe("two");
        // Unquoted form too.
        await put("k", "three", null, { conditions: { ifMatch: md5Etag("two").slice(1, -1) } });
        expect(await content("k")).toBe("three");
      });
    });

    describe("ranges", () => {
      const data = "0123456789abcdefghij"; // 20 bytes

      const ranged = async (range: { start?: number; end?: number; suffix?: number }) => {
        const got = await backend.getObject(bucket, "r", range);
        return { range: got.range, body: (await readAll(got.body)).toString(), size: got.info.size };
      };

      it("serves start-end, open-ended, clamped and suffix ranges", async () => {
        await put("r", data);
        expect(await ranged({ start: 2, end: 5 })).toEqual({
          range: { start: 2, end: 5 },
          body: "2345",
          size: 20,
        });
        expect(await ranged({ start: 15 })).toEqual({
          range: { start: 15, end: 19 },
          body: "fghij",
          size: 20,
        });
        expect(await ranged({ start: 18, end: 1000 })).toEqual({
          range: { start: 18, end: 19 },
          body: "ij",
          size: 20,
        });
        expect(await ranged({ start: 0, end: 0 })).toEqual({
          range: { start: 0, end: 0 },
          body: "0",
          size: 20,
        });
        expect(await ranged({ start: 19, end: 19 })).toEqual({
          range: { start: 19, end: 19 },
          body: "j",
          size: 20,
        });
        expect(await ranged({ suffix: 3 })).toEqual({ range: { start: 17, end: 19 }, body: "hij", size: 20 });
        expect(await ranged({ suffix: 100 })).toEqual({ range: { start: 0, end: 19 }, body: data, size: 20 });
      });

      it("refuses unsatisfiable ranges with InvalidRange", async () => {
        await put("r", data);
        await rejectsWithCode(backend.getObject(bucket, "r", { start: 20 }), "InvalidRange");
        await rejectsWithCode(backend.getObject(bucket, "r", { start: 25, end: 30 }), "InvalidRange");
        await rejectsWithCode(backend.getObject(bucket, "r", { suffix: 0 }), "InvalidRange");
      });

      it("refuses any range on an empty object", async () => {
        await put("r", "");
        await rejectsWithCode(backend.getObject(bucket, "r", { start: 0 }), "InvalidRange");
        await rejectsWithCode(backend.getObject(bucket, "r", { start: 0, end: 10 }), "InvalidRange");
        await rejectsWithCode(backend.getObject(bucket, "r", { suffix: 5 }), "InvalidRange");
      });
    });

    describe("listing", () => {
      const keys = [
        "a.txt",
        "b/1.txt",
        "b/2.txt",
        "b/c/3.txt",
        "b/c/4.txt",
        "b/d/5.txt",
        "b0.txt",
        "c/x/y/z.txt",
        "d.txt",
        "e/",
        "e/f.txt",
      ];
      const putAll = async (names: string[]) => {
        for (const key of names) await put(key, key);
      };

      it("lists every key in UTF-8 byte order with size, etag and lastModified", async () => {
        // UTF-8 order puts U+E000 before U+1F600; UTF-16 code unit order would not.
        const unicode = ["\u{1F600}", "\uE000", "z", "Z", "a", "é"];
        await putAll(unicode);
        const result = await list({});
        expect(result.objects.map((o) => o.key)).toEqual(["Z", "a", "z", "é", "\uE000", "\u{1F600}"]);
        expect(result.isTruncated).toBe(false);
        expect(result.commonPrefixes).toEqual([]);
        expect(result.objects[1]).toMatchObject({ key: "a", size: 1, etag: md5Etag("a") });
        expect(result.objects[1]!.lastModified).toBeInstanceOf(Date);
      });

      it("filters by prefix", async () => {
        await putAll(keys);
        expect((await list({ prefix: "b/c/" })).objects.map((o) => o.key)).toEqual([
          "b/c/3.txt",
          "b/c/4.txt",
        ]);
        expect((await list({ prefix: "b" })).objects.map((o) => o.key)).toEqual([
          "b/1.txt",
          "b/2.txt",
          "b/c/3.txt",
          "b/c/4.txt",
          "b/d/5.txt",
          "b0.txt",
        ]);
        expect((await list({ prefix: "zzz" })).objects).toEqual([]);
      });

      it("groups by delimiter into common prefixes", async () => {
        await putAll(keys);
        const top = await list({ delimiter: "/" });
        expect(top.objects.map((o) => o.key)).toEqual(["a.txt", "b0.txt", "d.txt"]);
        expect(top.commonPrefixes).toEqual(["b/", "c/", "e/"]);
        const inB = await list({ prefix: "b/", delimiter: "/" });
        expect(inB.objects.map((o) => o.key)).toEqual(["b/1.txt", "b/2.txt"]);
        expect(inB.commonPrefixes).toEqual(["b/c/", "b/d/"]);
        const inE = await list({ prefix: "e/", delimiter: "/" });
        expect(inE.objects.map((o) => o.key)).toEqual(["e/", "e/f.txt"]);
        expect(inE.commonPrefixes).toEqual([]);
        const multi = await list({ delimiter: ".t" });
        expect(multi.objects.map((o) => o.key)).toEqual(["e/"]);
        expect(multi.commonPrefixes).toEqual([
          "a.t",
          "b/1.t",
          "b/2.t",
          "b/c/3.t",
          "b/c/4.t",
          "b/d/5.t",
          "b0.t",
          "c/x/y/z.t",
          "d.t",
          "e/f.t",
        ]);
      });

      it("returns an empty, untruncated page for maxKeys 0", async () => {
        await putAll(keys);
        expect(await list({ maxKeys: 0 })).toMatchObject({
          objects: [],
          commonPrefixes: [],
          isTruncated: false,
        });
      });

      it("starts strictly after startAfter", async () => {
        await putAll(keys);
        expect((await list({ startAfter: "b/c/4.txt" })).objects.map((o) => o.key)).toEqual([
          "b/d/5.txt",
          "b0.txt",
          "c/x/y/z.txt",
          "d.txt",
          "e/",
          "e/f.txt",
        ]);
        expect((await list({ startAfter: "b/c/3" })).objects[0]!.key).toBe("b/c/3.txt");
        expect((await list({ prefix: "c/", startAfter: "a" })).objects.map((o) => o.key)).toEqual([
          "c/x/y/z.txt",
        ]);
        expect((await list({ startAfter: "zzz" })).objects).toEqual([]);
      });

      it("paginates without duplicates or gaps, with and without a delimiter", async () => {
        const many = [...keys];
        for (let i = 0; i < 12; i++) many.push(`p/${String(i).padStart(2, "0")}.txt`, `q/${i}/x`);
        await putAll(many);
        for (const query of [{}, { delimiter: "/" }, { prefix: "b/", delimiter: "/" }, { prefix: "q/" }]) {
          const full = await list(query);
          const expected = [...full.objects.map((o) => o.key), ...full.commonPrefixes].sort();
          for (const pageSize of [1, 2, 3, 7]) {
            const seen: string[] = [];
            let startAfter: string | undefined;
            for (let pages = 0; ; pages++) {
              expect(pages).toBeLessThan(100);
              const page = await list({ ...query, maxKeys: pageSize, ...(startAfter ? { startAfter } : {}) });
              const entries = [...page.objects.map((o) => o.key), ...page.commonPrefixes];
              expect(entries.length).toBeLessThanOrEqual(pageSize);
              seen.push(...entries);
              if (!page.isTruncated) break;
              expect(entries.length).toBe(pageSize);
              expect(page.nextStartAfter).toBeDefined();
              startAfter = page.nextStartAfter;
            }
            expect(seen.sort()).toEqual(expected);
          }
        }
      });

      it("counts a common prefix toward maxKeys and reports truncation exactly", async () => {
        await putAll(keys);
        const page = await list({ delimiter: "/", maxKeys: 2 });
        expect(page.objects.map((o) => o.key)).toEqual(["a.txt"]);
        expect(page.commonPrefixes).toEqual(["b/"]);
        expect(page.isTruncated).toBe(true);
        expect(page.nextStartAfter).toBe("b/");
        const rest = await list({ delimiter: "/", maxKeys: 5, startAfter: "b/" });
        expect(rest.objects.map((o) => o.key)).toEqual(["b0.txt", "d.txt"]);
        expect(rest.commonPrefixes).toEqual(["c/", "e/"]);
        expect(rest.isTruncated).toBe(false);
      });

      it("does not list deleted objects", async () => {
        await putAll(["x1", "x2", "x3"]);
        await del("x2", 3);
        await del("x3");
        await del("never", 4);
        expect((await list({})).objects.map((o) => o.key)).toEqual(["x1"]);
      });
    });

    describe("fencing: highest committed token", () => {
      it("has no HCT until a fenced write reaches the object", async () => {
        expect(await backend.highestToken(bucket, "k")).toBeNull();
        await put("k", "unfenced");
        expect(await backend.highestToken(bucket, "k")).toBeNull();
        expect((await put("k", "fenced", 7)).highestToken).toBe(7);
        expect(await backend.highestToken(bucket, "k")).toBe(7);
      });

      it("refuses a lower token with StaleTokenError, accepts an equal or higher one", async () => {
        await put("k", "v10", 10);
        const refused = put("k", "v9", 9);
        await expect(refused).rejects.toBeInstanceOf(StaleTokenError);
        await expect(refused).rejects.toMatchObject({ code: "StaleFencingToken", highestToken: 10 });
        expect((await put("k", "v10 again", 10)).highestToken).toBe(10);
        expect(await content("k")).toBe("v10 again");
        expect((await put("k", "v11", 11)).highestToken).toBe(11);
        expect(await backend.highestToken(bucket, "k")).toBe(11);
        await rejectsWithCode(put("k", "v10", 10), "StaleFencingToken");
      });

      it("keeps HCTs per object", async () => {
        await put("a", "a", 100);
        await put("b", "b", 1);
        expect(await backend.highestToken(bucket, "a")).toBe(100);
        expect(await backend.highestToken(bucket, "b")).toBe(1);
      });

      it("changes nothing when it refuses a write (body, etag, metadata, HCT)", async () => {
        await put("k", "original", 5, {
          metadata: metadataOf({ v: "1" }, { headers: { contentType: "text/a" } }),
        });
        const before = await snapshot("k");
        await rejectsWithCode(
          put("k", "replacement that must not land", 4, {
            metadata: metadataOf({ v: "2" }, { headers: { contentType: "text/b" } }),
          }),
          "StaleFencingToken",
        );
        await rejectsWithCode(del("k", 4), "StaleFencingToken");
        expect(await snapshot("k")).toEqual(before);
        await expectNoLeftovers();
      });

      it("lets an unfenced write through without lowering the HCT", async () => {
        await put("k", "fenced", 8);
        expect((await put("k", "unfenced")).highestToken).toBe(8);
        expect(await backend.highestToken(bucket, "k")).toBe(8);
        await rejectsWithCode(put("k", "stale", 7), "StaleFencingToken");
      });

      it("keeps the HCT across a fenced delete", async () => {
        await put("k", "v", 5);
        await rejectsWithCode(del("k", 4), "StaleFencingToken");
        expect(await content("k")).toBe("v");
        expect(await del("k", 6)).toEqual({ existed: true, highestToken: 6 });
        expect(await backend.highestToken(bucket, "k")).toBe(6);
        await rejectsWithCode(put("k", "stale", 5), "StaleFencingToken");
        await rejectsWithCode(backend.headObject(bucket, "k"), "NoSuchKey");
        await put("k", "equal", 6);
        expect(await content("k")).toBe("equal");
      });

      it("records the token of a fenced delete of a key that never existed", async () => {
        expect(await del("ghost", 9)).toEqual({ existed: false, highestToken: 9 });
        expect(await backend.highestToken(bucket, "ghost")).toBe(9);
        await rejectsWithCode(put("ghost", "stale", 8), "StaleFencingToken");
        await rejectsWithCode(backend.headObject(bucket, "ghost"), "NoSuchKey");
      });

      it("keeps the HCT across an unfenced delete", async () => {
        await put("k", "v", 5);
        expect(await del("k")).toEqual({ existed: true, highestToken: 5 });
        expect(await backend.highestToken(bucket, "k")).toBe(5);
        await rejectsWithCode(put("k", "stale", 4), "StaleFencingToken");
      });

      it("keeps the HCT across deletion and re-creation of the bucket", async () => {
        await put("k", "v", 12);
        await del("k", 12);
        await backend.deleteBucket(bucket);
        await backend.createBucket(bucket);
        expect(await backend.highestToken(bucket, "k")).toBe(12);
        await rejectsWithCode(put("k", "stale", 11), "StaleFencingToken");
        await put("k", "fresh", 13);
        expect(await content("k")).toBe("fresh");
      });

      it("keeps objects and HCTs (live and deleted) across a restart", async (ctx) => {
        // A fixture that cannot open its backend again on the same state (routed) has no reopen.
        if (!fixture.reopen) return ctx.skip();
        const metadata = metadataOf({ who: "before restart" }, { headers: { contentType: "text/plain" } });
        const written = await put("live", "still here", 20, { metadata });
        await put("gone", "x", 30);
        await del("gone", 31);
        await reopen();
        expect(await backend.highestToken(bucket, "live")).toBe(20);
        expect(await backend.highestToken(bucket, "gone")).toBe(31);
        const head = await backend.headObject(bucket, "live");
        expect(head).toMatchObject({
          etag: written.etag,
          size: written.size,
          userMetadata: { who: "before restart" },
        });
        expect(head.headers.contentType).toBe("text/plain");
        expect(await content("live")).toBe("still here");
        await rejectsWithCode(put("live", "stale", 19), "StaleFencingToken");
        await rejectsWithCode(put("gone", "stale", 30), "StaleFencingToken");
      });

      it("refuses a stale fenced delete with the HCT in the error", async () => {
        await put("k", "v", 50);
        const refused = del("k", 40);
        await expect(refused).rejects.toBeInstanceOf(StaleTokenError);
        await expect(refused).rejects.toMatchObject({ highestToken: 50 });
      });
    });

    describe("failed writes leave nothing behind", () => {
      it("keeps the old object when the body errors midway", async () => {
        await put("k", "old body", 3, { metadata: metadataOf({ v: "old" }) });
        const before = await snapshot("k");
        await expect(
          backend.putObject(
            {
              bucket,
              key: "k",
              body: failingVerifiedBody("new bytes that must not land"),
              metadata: metadataOf({ v: "new" }),
            },
            fencedCommit(4),
          ),
        ).rejects.toThrow();
        expect(await snapshot("k")).toEqual(before);
        await expectNoLeftovers();
      });

      it("creates nothing when the body of a new object errors", async () => {
        await expect(
          backend.putObject(
            { bucket, key: "new", body: failingVerifiedBody("x"), metadata: metadataOf() },
            fencedCommit(4),
          ),
        ).rejects.toThrow();
        await rejectsWithCode(backend.headObject(bucket, "new"), "NoSuchKey");
        expect(await backend.highestToken(bucket, "new")).toBeNull();
        expect((await list({})).objects).toEqual([]);
        await expectNoLeftovers();
      });

      it("calls prepare after the whole body is received and verified, and changes nothing when it throws", async () => {
        await put("k", "old", 1);
        const before = await snapshot("k");
        const refusal = new DomainError("LeaseExpired", "lease expired");
        let bodyDone = false;
        const body = bodyOf("new body");
        body.on("end", () => {
          bodyDone = true;
        });
        let sawBodyDone: boolean | undefined;
        const write = backend.putObject(
          {
            bucket,
            key: "k",
            body: { stream: body, digest: Promise.resolve({ size: 8, checksums: {} }) },
            metadata: metadataOf(),
          },
          fencedCommit(2, {
            prepare: async () => {
              sawBodyDone = bodyDone;
              throw refusal;
            },
          }),
        );
        await expect(write).rejects.toBe(refusal);
        expect(sawBodyDone).toBe(true);
        expect(await snapshot("k")).toEqual(before);
        await rejectsWithCode(
          put("new", "x", 2, {
            commit: {
              prepare: async () => {
                throw refusal;
              },
            },
          }),
          "LeaseExpired",
        );
        await rejectsWithCode(backend.headObject(bucket, "new"), "NoSuchKey");
        expect(await backend.highestToken(bucket, "new")).toBeNull();
        await expectNoLeftovers();
      });

      it("changes nothing when prepare refuses a delete", async () => {
        await put("k", "v", 1);
        const before = await snapshot("k");
        await rejectsWithCode(
          del("k", 2, {
            prepare: async () => {
              throw new DomainError("LeaseExpired", "lease expired");
            },
          }),
          "LeaseExpired",
        );
        expect(await snapshot("k")).toEqual(before);
      });
    });

    describe("concurrency", () => {
      it("commits racing writes atomically: the highest token wins, lower ones are refused", async () => {
        const tokens = shuffled(Array.from({ length: 1000 }, (_, i) => i + 1)).slice(0, 50);
        const bodies = tokens.map((token, i) => `writer ${i} token ${token} ${"x".repeat(1000 + i * 997)}`);
        const outcomes = await Promise.allSettled(
          tokens.map((token, i) =>
            backend.putObject(
              {
                bucket,
                key: "contested",
                body: verifiedBody(bodies[i]!, {}, 512),
                metadata: metadataOf({ writer: String(i) }),
              },
              fencedCommit(token, { prepare: () => sleep(Math.random() * 5) }),
            ),
          ),
        );

        const accepted: number[] = [];
        outcomes.forEach((outcome, i) => {
          const token = tokens[i]!;
          if (outcome.status === "fulfilled") {
            expect(outcome.value.highestToken).toBe(token);
            expect(outcome.value.etag).toBe(md5Etag(bodies[i]!));
            accepted.push(token);
          }
        });
        const maxAccepted = Math.max(...accepted);
        expect(maxAccepted).toBe(Math.max(...tokens)); // nobody can outbid the highest token
        outcomes.forEach((outcome, i) => {
          if (outcome.status === "rejected") {
            // Refused only because a higher token had already been committed.
            const error = outcome.reason as StaleTokenError;
            expect(error).toBeInstanceOf(StaleTokenError);
            expect(error.highestToken).toBeGreaterThan(tokens[i]!);
            expect(accepted).toContain(error.highestToken);
          }
        });

        const winner = tokens.indexOf(maxAccepted);
        expect(await content("contested")).toBe(bodies[winner]);
        const head = await backend.headObject(bucket, "contested");
        expect(head.userMetadata).toEqual({ writer: String(winner) });
        expect(head.etag).toBe(md5Etag(bodies[winner]!));
        expect(await backend.highestToken(bucket, "contested")).toBe(maxAccepted);
        await expectNoLeftovers();
      });

      it("serves a complete old or new body to a GET racing an overwrite, never a mix", async () => {
        const size = 200 * 1024;
        const versions = Array.from({ length: 12 }, (_, i) => Buffer.alloc(size, 0x41 + i));
        const etags = versions.map((v) => md5Etag(v));
        await put("hot", versions[0]!, 1);
        let writing = true;
        const writer = (async () => {
          try {
            for (let i = 1; i < versions.length; i++) await put("hot", versions[i]!, i + 1);
          } finally {
            writing = false;
          }
        })();
        let reads = 0;
        const seen = new Set<number>();
        const readers = Array.from({ length: 3 }, async () => {
          while (writing) {
            const got = await backend.getObject(bucket, "hot");
            const body = await readAll(got.body);
            expect(body.length).toBe(size);
            const version = body[0]! - 0x41;
            expect(body.equals(versions[version]!)).toBe(true);
            expect(got.info.etag).toBe(etags[version]);
            seen.add(version);
            reads++;
          }
        });
        await Promise.all([writer, ...readers]);
        expect(reads).toBeGreaterThan(0);
        expect(await content("hot")).toBe(versions.at(-1)!.toString());
      });

      it("keeps the HCT at the maximum when fenced writes and deletes race", async () => {
        const ops = shuffled(Array.from({ length: 30 }, (_, i) => i + 1)).map((token) =>
          token % 3 === 0 ? del("mixed", token) : put("mixed", `token ${token}`, token),
        );
        const outcomes = await Promise.allSettled(ops);
        for (const outcome of outcomes) {
          if (outcome.status === "rejected") expect(outcome.reason).toBeInstanceOf(StaleTokenError);
        }
        expect(await backend.highestToken(bucket, "mixed")).toBe(30);
        // Token 30 is a delete: whatever raced, the object ends deleted.
        await rejectsWithCode(backend.headObject(bucket, "mixed"), "NoSuchKey");
        await expectNoLeftovers();
      });
    });

    describe("the commit contract", () => {
      it("reports the write state: HCT (live or deleted) and the live ETag", async () => {
        const state = async (key: string) => {
          const { highestToken, etag } = await backend.writeState(bucket, key);
          return { highestToken, etag };
        };
        expect(await state("k")).toEqual({ highestToken: null, etag: null });
        await put("k", "v1", 4);
        expect(await state("k")).toEqual({ highestToken: 4, etag: md5Etag("v1") });
        await del("k", 6);
        expect(await state("k")).toEqual({ highestToken: 6, etag: null });
        await put("u", "unfenced");
        expect(await state("u")).toEqual({ highestToken: null, etag: md5Etag("unfenced") });
      });

      it("takes the write state read before the body as its first basis, and reads again when it is stale", async () => {
        await put("k", "v1", 4);
        const early = await backend.writeState(bucket, "k");
        // Written meanwhile: the early look is stale, and the commit must not trust it.
        await put("k", "v2", 6);
        await expect(put("k", "v3", 5, { commit: { early: early.early } })).rejects.toBeInstanceOf(
          StaleTokenError,
        );
        await put("k", "v4", 7, { commit: { early: early.early } });
        expect((await readAll((await backend.getObject(bucket, "k")).body)).toString()).toBe("v4");
        expect(await backend.highestToken(bucket, "k")).toBe(7);
      });

      it("calls atomic inside its step with the HCT the write leaves, or never when it has no domain", async () => {
        const seen: Array<number | null> = [];
        const atomic = (outcome: { highestToken: number | null }) => {
          seen.push(outcome.highestToken);
        };
        await put("k", "v", 3, { commit: { atomic } });
        await put("k", "v2", 5, { commit: { atomic } });
        await del("k", 7, { atomic });
        if (backend.domain) expect(seen).toEqual([3, 5, 7]);
        else expect(seen).toEqual([]);
      });

      it("changes nothing when atomic throws (backends with a domain)", async (ctx) => {
        if (!backend.domain) ctx.skip(); // remote stores run no code inside their conditional write
        await put("k", "old", 1);
        const before = await snapshot("k");
        const refusal = new DomainError("StaleFencingToken", "superseded inside the step");
        const atomic = () => {
          throw refusal;
        };
        await expect(put("k", "new", 2, { commit: { atomic } })).rejects.toBe(refusal);
        await expect(del("k", 2, { atomic })).rejects.toBe(refusal);
        expect(await snapshot("k")).toEqual(before);
        await expect(put("fresh", "x", 2, { commit: { atomic } })).rejects.toBe(refusal);
        await rejectsWithCode(backend.headObject(bucket, "fresh"), "NoSuchKey");
        expect(await backend.highestToken(bucket, "fresh")).toBeNull();
        await expectNoLeftovers();
      });

      it("applies the write conditions in the commit, with the HCT rule", async () => {
        await put("k", "v1", 1);
        await rejectsWithCode(put("k", "v2", 2, { conditions: { ifNoneMatch: "*" } }), "PreconditionFailed");
        await rejectsWithCode(
          put("k", "v2", 2, { conditions: { ifMatch: md5Etag("other") } }),
          "PreconditionFailed",
        );
        expect(await backend.highestToken(bucket, "k")).toBe(1);
        await put("k", "v2", 2, { conditions: { ifMatch: md5Etag("v1") } });
        expect(await content("k")).toBe("v2");
        // A conditional delete: refused on another ETag (the object and HCT stay), done on its own.
        await rejectsWithCode(del("k", 3, { conditions: { ifMatch: md5Etag("v1") } }), "PreconditionFailed");
        expect(await content("k")).toBe("v2");
        expect(await backend.highestToken(bucket, "k")).toBe(2);
        await del("k", 3, { conditions: { ifMatch: md5Etag("v2") } });
        await rejectsWithCode(backend.getObject(bucket, "k"), "NoSuchKey");
        await rejectsWithCode(del("k", 3, { conditions: { ifMatch: md5Etag("v2") } }), "NoSuchKey");
      });

      it("commits nothing when the body's verification fails after its bytes arrived", async () => {
        await put("k", "old", 1);
        const before = await snapshot("k");
        const digest = Promise.reject(new DomainError("BadDigest", "checksum mismatch"));
        digest.catch(() => undefined);
        await rejectsWithCode(
          backend.putObject(
            { bucket, key: "k", body: { stream: bodyOf("new bytes"), digest }, metadata: metadataOf() },
            fencedCommit(2),
          ),
          "BadDigest",
        );
        expect(await snapshot("k")).toEqual(before);
        await expectNoLeftovers();
      });

      it("commits nothing once the request was aborted", async () => {
        await put("k", "old", 1);
        const before = await snapshot("k");
        const controller = new AbortController();
        controller.abort();
        await expect(put("k", "new", 2, { commit: { signal: controller.signal } })).rejects.toThrow();
        await expect(del("k", 2, { signal: controller.signal })).rejects.toThrow();
        expect(await snapshot("k")).toEqual(before);
        await expectNoLeftovers();
      });

      it("raises the HCT without touching the object, and never lowers it", async () => {
        await put("k", "kept", 3, { metadata: metadataOf({ a: "1" }) });
        const before = await snapshot("k");
        expect(await backend.raiseHighestToken(bucket, "k", 9)).toBe(9);
        const after = await snapshot("k");
        expect(after.body).toBe(before.body);
        expect(after.info.etag).toBe(before.info.etag);
        expect(after.info.userMetadata).toEqual({ a: "1" });
        expect(after.hct).toBe(9);
        expect(await backend.raiseHighestToken(bucket, "k", 5)).toBe(9);
        await rejectsWithCode(put("k", "stale", 8), "StaleFencingToken");
        expect(await content("k")).toBe("kept");
        await put("k", "fresh", 9);
        expect(await content("k")).toBe("fresh");
      });

      it("raises the HCT of a missing object as a tombstone that a stale create cannot miss", async () => {
        expect(await backend.raiseHighestToken(bucket, "never", 12)).toBe(12);
        await rejectsWithCode(backend.headObject(bucket, "never"), "NoSuchKey");
        expect((await list({})).objects).toEqual([]);
        await rejectsWithCode(
          put("never", "late", 11, { conditions: { ifNoneMatch: "*" } }),
          "StaleFencingToken",
        );
        await rejectsWithCode(backend.headObject(bucket, "never"), "NoSuchKey");
        await put("never", "now", 12);
        expect(await content("never")).toBe("now");
      });

      it("raises the HCT in a bucket that is gone or not created yet; the bucket created later keeps it", async () => {
        // A bucket whose objects never had an HCT is deleted outright, also from a remote store.
        await put("k", "v", null);
        await del("k", null);
        await backend.deleteBucket(bucket);
        const later = `fg-later-${randomUUID().slice(0, 8)}`;
        for (const b of [bucket, later]) {
          expect(await backend.raiseHighestToken(b, "k", 7)).toBe(7);
          expect(await backend.raiseHighestToken(b, "k", 3)).toBe(7);
          await rejectsWithCode(backend.headBucket(b), "NoSuchBucket");
          expect((await backend.listBuckets()).map((x) => x.name)).not.toContain(b);
          await backend.createBucket(b);
          expect((await backend.listObjects({ bucket: b, maxKeys: 10 })).objects).toEqual([]);
          await rejectsWithCode(
            backend.putObject(
              { bucket: b, key: "k", body: verifiedBody("stale"), metadata: metadataOf() },
              fencedCommit(6, { conditions: { ifNoneMatch: "*" } }),
            ),
            "StaleFencingToken",
          );
          expect(await backend.highestToken(b, "k")).toBe(7);
        }
      });

      it("commits an unfenced write under a ceiling only while the HCT is at or below it", async () => {
        await put("k", "v1", 5);
        const ceiling = (value: number) => ({ fence: { ceiling: value } });
        const ok = await put("k", "under the ceiling", null, { commit: ceiling(5) });
        expect(ok.highestToken).toBe(5);
        expect(await content("k")).toBe("under the ceiling");
        await backend.raiseHighestToken(bucket, "k", 8);
        await rejectsWithCode(
          put("k", "a lease came since", null, { commit: ceiling(7) }),
          "FencingTokenRequired",
        );
        await rejectsWithCode(del("k", null, ceiling(7)), "FencingTokenRequired");
        expect(await content("k")).toBe("under the ceiling");
        expect(await backend.highestToken(bucket, "k")).toBe(8);
      });

      it("refuses invalid tokens and maxKeys with InvalidArgument", async () => {
        for (const token of [-1, 1.5, Number.NaN, 2 ** 60]) {
          await rejectsWithCode(put("k", "v", token), "InvalidArgument");
        }
        await rejectsWithCode(backend.headObject(bucket, "k"), "NoSuchKey");
        expect(await backend.highestToken(bucket, "k")).toBeNull();
        await rejectsWithCode(list({ maxKeys: -1 }), "InvalidArgument");
      });
    });
  });
}
