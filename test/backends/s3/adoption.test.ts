import { randomUUID } from "node:crypto";
import { CreateBucketCommand, GetObjectCommand, PutObjectCommand } from "@aws-sdk/client-s3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { S3Backend } from "../../../src/backends/s3/index.js";
import { StaleTokenError } from "../../../src/core/errors.js";
import { fencedCommit } from "../../../src/fence/commit.js";
import { md5Etag, metadataOf, readAll, verifiedBody } from "../../support/bodies.js";
import { type S3Fixture, s3Fixture } from "./s3-fixture.js";

/**
 * Objects put into the store bucket directly, before fencegate (or beside it): readable, listable
 * and conditionally writable through the backend with the store's ETag, fenced from their first
 * fenced write, hidden (never deleted) by a delete. fencegate never deletes bytes it did not write.
 */
describe("adopting objects that were in the store before fencegate", () => {
  let fx: S3Fixture;
  let backend: S3Backend;
  let bucket: string;

  const rawPut = async (key: string, body: string, extra: Record<string, unknown> = {}) =>
    (
      await fx.raw.send(
        new PutObjectCommand({
          Bucket: bucket,
          Key: key,
          Body: Buffer.from(body),
          ContentLength: body.length,
          ...extra,
        }),
      )
    ).ETag!;
  const rawGet = async (key: string) =>
    await fx.raw
      .send(new GetObjectCommand({ Bucket: bucket, Key: key }))
      .then((o) => o.Body!.transformToString());
  const put = (key: string, data: string, token: number | null, conditions = {}) =>
    backend.putObject(
      { bucket, key, body: verifiedBody(data), metadata: metadataOf() },
      fencedCommit(token, { conditions }),
    );
  const content = async (key: string) =>
    (await readAll((await backend.getObject(bucket, key)).body)).toString();
  const keys = async () => (await backend.listObjects({ bucket, maxKeys: 100 })).objects.map((o) => o.key);

  beforeEach(async () => {
    fx = await s3Fixture();
    backend = fx.current();
    bucket = `fg-adopt-${randomUUID().slice(0, 8)}`;
    await fx.raw.send(new CreateBucketCommand({ Bucket: bucket })); // created outside fencegate
    await rawPut("a.txt", "plain a", { ContentType: "text/plain", Metadata: { origin: "before" } });
    await rawPut("dir/b.txt", "plain b");
    await rawPut("z", "plain z");
  });

  afterEach(async () => {
    await fx.cleanup();
  });

  it("lists and reads them with the store's ETag, headers and metadata", async () => {
    const listed = await backend.listObjects({ bucket, maxKeys: 100 });
    expect(listed.objects.map((o) => [o.key, o.etag, o.size])).toEqual([
      ["a.txt", md5Etag("plain a"), 7],
      ["dir/b.txt", md5Etag("plain b"), 7],
      ["z", md5Etag("plain z"), 7],
    ]);
    expect((await backend.listObjects({ bucket, maxKeys: 100, delimiter: "/" })).commonPrefixes).toEqual([
      "dir/",
    ]);
    const head = await backend.headObject(bucket, "a.txt");
    expect(head).toMatchObject({ etag: md5Etag("plain a"), size: 7, userMetadata: { origin: "before" } });
    expect(head.headers.contentType).toBe("text/plain");
    expect(await content("a.txt")).toBe("plain a");
    const ranged = await backend.getObject(bucket, "a.txt", { start: 6 });
    expect(ranged.range).toEqual({ start: 6, end: 6 });
    expect((await readAll(ranged.body)).toString()).toBe("a");
    // The write's early look leaves the plain object out (no HEAD before a write): it says so,
    // and a commit that needs its ETag (write conditions, a delete) looks it up.
    expect(await backend.writeState(bucket, "a.txt")).toMatchObject({
      highestToken: null,
      etag: null,
      early: { observed: { etagUnknown: true } },
    });
    expect((await backend.headObject(bucket, "a.txt")).etag).toBe(md5Etag("plain a"));
    expect(await backend.highestToken(bucket, "a.txt")).toBeNull();
  });

  it("applies write conditions to them", async () => {
    await expect(put("a.txt", "x", null, { ifNoneMatch: "*" })).rejects.toMatchObject({
      code: "PreconditionFailed",
    });
    await expect(put("a.txt", "x", null, { ifMatch: md5Etag("other") })).rejects.toMatchObject({
      code: "PreconditionFailed",
    });
    await put("a.txt", "replaced over its ETag", null, { ifMatch: md5Etag("plain a") });
    expect(await content("a.txt")).toBe("replaced over its ETag");
    expect(await rawGet("a.txt")).toBe("plain a"); // shadowed by the record, not overwritten
  });

  it("fences them from the first fenced write on, without touching their bytes", async () => {
    expect((await put("a.txt", "fenced", 5)).highestToken).toBe(5);
    expect(await content("a.txt")).toBe("fenced");
    await expect(put("a.txt", "stale", 4)).rejects.toBeInstanceOf(StaleTokenError);
    expect(await backend.writeState(bucket, "a.txt")).toMatchObject({
      highestToken: 5,
      etag: md5Etag("fenced"),
    });
    expect(await keys()).toEqual(["a.txt", "dir/b.txt", "z"]); // listed once, as the record says
    expect((await backend.listObjects({ bucket, maxKeys: 1 })).objects[0]!.etag).toBe(md5Etag("fenced"));
    expect(await rawGet("a.txt")).toBe("plain a");
  });

  it("hides them on delete and never deletes them", async () => {
    expect(await backend.deleteObject({ bucket, key: "dir/b.txt" }, fencedCommit(null))).toEqual({
      existed: true,
      highestToken: null,
    });
    await expect(backend.headObject(bucket, "dir/b.txt")).rejects.toMatchObject({ code: "NoSuchKey" });
    expect(await keys()).toEqual(["a.txt", "z"]);
    expect(await rawGet("dir/b.txt")).toBe("plain b");

    expect(await backend.deleteObject({ bucket, key: "z" }, fencedCommit(3))).toEqual({
      existed: true,
      highestToken: 3,
    });
    await expect(put("z", "stale", 2)).rejects.toBeInstanceOf(StaleTokenError);
    await put("z", "back", 3);
    expect(await content("z")).toBe("back");
    expect(await rawGet("z")).toBe("plain z");
  });

  it("raises the HCT of a plain object without hiding it", async () => {
    expect(await backend.raiseHighestToken(bucket, "z", 7)).toBe(7);
    expect(await content("z")).toBe("plain z");
    expect(await backend.writeState(bucket, "z")).toMatchObject({
      highestToken: 7,
      etag: null,
      early: { observed: { etagUnknown: true } },
    });
    expect((await backend.headObject(bucket, "z")).etag).toBe(md5Etag("plain z"));
    expect(await keys()).toEqual(["a.txt", "dir/b.txt", "z"]);
    await expect(put("z", "stale", 6)).rejects.toBeInstanceOf(StaleTokenError);
    // Its bytes are still the store's to change, outside fencegate; fencegate serves what is there.
    await rawPut("z", "changed outside");
    expect(await content("z")).toBe("changed outside");
    expect(await backend.highestToken(bucket, "z")).toBe(7);
    await put("z", "fenced now", 8);
    expect(await content("z")).toBe("fenced now");
  });

  it("keeps a bucket whose plain objects are only hidden (no HCT) in the store when deleting it", async () => {
    for (const key of ["a.txt", "dir/b.txt", "z"])
      await backend.deleteObject({ bucket, key }, fencedCommit(null));
    await backend.deleteBucket(bucket);
    await expect(backend.headBucket(bucket)).rejects.toMatchObject({ code: "NoSuchBucket" });
    expect(await rawGet("dir/b.txt")).toBe("plain b");
    await backend.createBucket(bucket);
    expect(await keys()).toEqual([]); // still hidden: the tombstones were kept
  });

  it("counts them when deleting the bucket, and leaves them in the store", async () => {
    await expect(backend.deleteBucket(bucket)).rejects.toMatchObject({ code: "BucketNotEmpty" });
    for (const key of ["a.txt", "dir/b.txt", "z"])
      await backend.deleteObject({ bucket, key }, fencedCommit(9));
    await backend.deleteBucket(bucket); // deleted for fencegate: its records keep HCT 9
    await expect(backend.headBucket(bucket)).rejects.toMatchObject({ code: "NoSuchBucket" });
    expect(await rawGet("a.txt")).toBe("plain a");
    await backend.createBucket(bucket);
    expect(await backend.highestToken(bucket, "a.txt")).toBe(9);
    expect(await keys()).toEqual([]);
  });
});
