import { randomUUID } from "node:crypto";
import { DeleteObjectCommand, HeadObjectCommand, PutObjectCommand } from "@aws-sdk/client-s3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { S3Backend } from "../../../src/backends/s3/index.js";
import { fakeClock } from "../../../src/core/clock.js";
import { fencedCommit } from "../../../src/fence/commit.js";
import { metadataOf, readAll, verifiedBody } from "../../support/bodies.js";
import { META, type S3Fixture, s3Fixture, storeBuckets } from "./s3-fixture.js";

/** collectGarbage: what it removes, what it must leave alone. */
describe("garbage collection", () => {
  let fx: S3Fixture;
  let backend: S3Backend;
  let bucket: string;
  const clock = fakeClock();

  const rawPut = (key: string, body: string, metadata?: Record<string, string>) =>
    fx.raw.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: key,
        Body: Buffer.from(body),
        ContentLength: body.length,
        ...(metadata ? { Metadata: metadata } : {}),
      }),
    );
  const exists = (key: string) =>
    fx.raw.send(new HeadObjectCommand({ Bucket: bucket, Key: key })).then(
      () => true,
      () => false,
    );
  const orphanBlob = async (key = "k") => {
    const name = `${META}d/${randomUUID().replaceAll("-", "")}`;
    await rawPut(name, "orphan", { "fg-key": Buffer.from(key).toString("base64url"), "fg-kind": "object" });
    return name;
  };

  beforeEach(async () => {
    fx = await s3Fixture({ clock });
    backend = fx.current();
    bucket = `fg-gc-${randomUUID().slice(0, 8)}`;
    await backend.createBucket(bucket);
  });

  afterEach(async () => {
    await fx.cleanup();
  });

  it("leaves blobs younger than the grace period alone, and removes them once it has passed", async () => {
    const orphan = await orphanBlob();
    expect(await backend.collectGarbage()).toMatchObject({ blobs: 0 }); // default grace: 1 h
    expect(await exists(orphan)).toBe(true);
    expect(await backend.collectGarbage({ graceMs: 0 })).toMatchObject({ blobs: 1 });
    expect(await exists(orphan)).toBe(false);
  });

  it("keeps every referenced blob: live versions and the parts of live uploads", async () => {
    await backend.putObject(
      { bucket, key: "k", body: verifiedBody("live"), metadata: metadataOf() },
      fencedCommit(1),
    );
    const { uploadId } = await backend.multipart.createUpload(
      { bucket, key: "m", metadata: metadataOf(), token: null, leaseId: null, initiator: null },
      fencedCommit(null),
    );
    const part = await backend.multipart.uploadPart(
      { bucket, key: "m", uploadId, partNumber: 1, body: verifiedBody("part one") },
      fencedCommit(null),
    );
    await orphanBlob("k");
    expect(await backend.collectGarbage({ graceMs: 0 })).toEqual({
      blobs: 1,
      parts: 0,
      uploads: 0,
      storeUploads: 0,
    });
    expect((await readAll((await backend.getObject(bucket, "k")).body)).toString()).toBe("live");
    await backend.multipart.completeUpload(
      { bucket, key: "m", uploadId, parts: [{ partNumber: 1, etag: part.etag }] },
      fencedCommit(null),
    );
    expect((await readAll((await backend.getObject(bucket, "m")).body)).toString()).toBe("part one");
    expect(await fx.leftovers()).toEqual([]);
  });

  it("leaves a blob without fencegate's metadata in place", async () => {
    const foreign = `${META}d/not-ours`;
    await rawPut(foreign, "who wrote this?");
    await backend.collectGarbage({ graceMs: 0 });
    expect(await exists(foreign)).toBe(true);
  });

  it("removes part manifests whose upload is gone, and their blobs", async () => {
    const { uploadId } = await backend.multipart.createUpload(
      { bucket, key: "m", metadata: metadataOf(), token: null, leaseId: null, initiator: null },
      fencedCommit(null),
    );
    await backend.multipart.uploadPart(
      { bucket, key: "m", uploadId, partNumber: 3, body: verifiedBody("orphaned part") },
      fencedCommit(null),
    );
    // As when a part is recorded while its upload is aborted: the manifest goes, the part stays.
    await fx.raw.send(new DeleteObjectCommand({ Bucket: bucket, Key: `${META}u/${uploadId}` }));
    expect(await fx.storedParts()).toBe(1);
    expect(await backend.collectGarbage({ graceMs: 0 })).toMatchObject({ parts: 1, blobs: 1 });
    expect(await fx.storedParts()).toBe(0);
    expect(await fx.leftovers()).toEqual([]);
  });

  it("aborts uploads older than multipartMaxAgeMs", async () => {
    await backend.multipart.createUpload(
      { bucket, key: "old", metadata: metadataOf(), token: null, leaseId: null, initiator: null },
      fencedCommit(null),
    );
    clock.advance(61_000); // the fixture's multipartMaxAgeMs is 60 s
    expect(await backend.collectGarbage()).toMatchObject({ uploads: 1 });
    expect((await backend.multipart.listUploads({ bucket, maxUploads: 10 })).uploads).toEqual([]);
  });

  it("never deletes a store bucket: a bucket deleted through the gateway stays in the store, marked", async () => {
    await backend.putObject(
      { bucket, key: "k", body: verifiedBody("v"), metadata: metadataOf() },
      fencedCommit(null),
    );
    await backend.deleteObject({ bucket, key: "k" }, fencedCommit(null)); // a tombstone without HCT
    await orphanBlob();
    await backend.deleteBucket(bucket);
    // A commit paused before the deletion can never land in a bucket that lost its records.
    expect(await storeBuckets(fx.raw)).toContain(bucket);
    expect((await backend.listBuckets()).map((b) => b.name)).not.toContain(bucket);
    await expect(backend.headBucket(bucket)).rejects.toMatchObject({ code: "NoSuchBucket" });
    await backend.createBucket(bucket);
    expect(await backend.highestToken(bucket, "k")).toBeNull();
    await expect(backend.headObject(bucket, "k")).rejects.toMatchObject({ code: "NoSuchKey" });
  });

  it("collects the blobs of a bucket deleted for fencegate (kept for its HCTs)", async () => {
    await backend.putObject(
      { bucket, key: "k", body: verifiedBody("v"), metadata: metadataOf() },
      fencedCommit(4),
    );
    await backend.deleteObject({ bucket, key: "k" }, fencedCommit(5));
    await orphanBlob();
    await backend.deleteBucket(bucket);
    await backend.collectGarbage({ graceMs: 0 });
    expect(await fx.leftovers()).toEqual([]);
    await backend.createBucket(bucket);
    expect(await backend.highestToken(bucket, "k")).toBe(5);
  });
});
