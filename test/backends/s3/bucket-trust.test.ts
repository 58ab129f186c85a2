import { randomUUID } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { S3Backend } from "../../../src/backends/s3/index.js";
import { fencedCommit } from "../../../src/fence/commit.js";
import { metadataOf, verifiedBody } from "../../support/bodies.js";
import { type S3Fixture, s3Fixture } from "./s3-fixture.js";

/**
 * A replica trusts a read that found its bucket live for a second (BUCKET_STATE_TRUST_MS) instead
 * of reading the bucket's marker before each write. That is safe only because a deletion waits
 * longer than that after marking the bucket: a deletion acknowledged by another replica must
 * never be followed by a write that still trusted its older read.
 */
describe("the trust in a bucket found live, against a deletion by another replica", () => {
  let fx: S3Fixture;
  let writer: S3Backend;
  let deleter: S3Backend;
  let bucket: string;

  beforeEach(async () => {
    fx = await s3Fixture();
    writer = fx.current();
    deleter = fx.another();
    bucket = `fg-trust-${randomUUID().slice(0, 8)}`;
    await writer.createBucket(bucket);
  }, 30_000);

  afterEach(async () => {
    await fx.cleanup();
  });

  it("a write after the deletion was acknowledged is refused, although its replica found the bucket live moments before", async () => {
    // Both replicas warmed up (the store's capabilities learnt), so the deletion below is quick.
    const scratch = `${bucket}-scratch`;
    await writer.createBucket(scratch);
    await writer.putObject(
      { bucket: scratch, key: "warm", body: verifiedBody("warm"), metadata: metadataOf() },
      fencedCommit(null),
    );
    await deleter.putObject(
      { bucket, key: "gone", body: verifiedBody("gone"), metadata: metadataOf() },
      fencedCommit(null),
    );
    await deleter.deleteObject({ bucket, key: "gone" }, fencedCommit(null));
    // The writer finds the bucket live (and trusts it from now on, for a while).
    await expect(writer.headObject(bucket, "nothing")).rejects.toMatchObject({ code: "NoSuchKey" });
    const started = performance.now();
    await deleter.deleteBucket(bucket);
    const tookMs = performance.now() - started;
    // The write comes after the deletion's answer: it must see the bucket gone.
    const write = writer.putObject(
      { bucket, key: "late", body: verifiedBody("late"), metadata: metadataOf() },
      fencedCommit(null),
    );
    await expect(write, `the deletion took ${tookMs.toFixed(0)} ms`).rejects.toMatchObject({
      code: "NoSuchBucket",
    });
    await expect(deleter.headObject(bucket, "late")).rejects.toMatchObject({ code: "NoSuchBucket" });
  });
});
