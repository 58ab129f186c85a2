import { randomUUID } from "node:crypto";
import { CreateBucketCommand } from "@aws-sdk/client-s3";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { S3Backend } from "../../../src/backends/s3/index.js";
import type { ObjectMetadata } from "../../../src/backends/storage-backend.js";
import { StaleTokenError } from "../../../src/core/errors.js";
import { fencedCommit } from "../../../src/fence/commit.js";
import { md5Etag, metadataOf, readAll, verifiedBody } from "../../support/bodies.js";
import { holdingHooks } from "./hold.js";
import { NaiveEtagFencing } from "./naive-etag-fencing.js";
import { type S3Fixture, s3Fixture } from "./s3-fixture.js";

/**
 * ABA: a commit with token T reads the object's state and is held just before its conditional
 * write; meanwhile T+1 and then T+2 commit, T+2 putting back exactly the bytes T saw (and, in the
 * second case, the bytes stay equal throughout and only the metadata changes). On S3 the data
 * object's ETag is the MD5 of its bytes, so it is the same as when T read it.
 *
 * - Against the S3 backend, T's conditional write names the RECORD's ETag, which is unique per
 *   write (a fresh nonce in every record): it fails, T reads again, finds HCT T+2 and is refused.
 * - Against NaiveEtagFencing (conditioning on the data object's ETag), T's If-Match still holds:
 *   T overwrites T+2's commit and the HCT goes down from T+2 to T. The last test shows it.
 *
 * Sabotage check (done by hand in record-store.ts, then reverted): making the record PUT
 * unconditional, or conditioning it on the live version's data ETag instead of the record's own
 * ETag, turns the first three tests red, and race.test.ts too (an HCT dip).
 */

const KEY = "contested/object";
const T = 100;

describe("ABA on the commit point", () => {
  let fx: S3Fixture;
  let bucket: string;
  let writer: S3Backend;
  let held: ReturnType<typeof holdingHooks>;

  beforeEach(async () => {
    fx = await s3Fixture();
    held = holdingHooks();
    writer = fx.another({ hooks: held.hooks });
    bucket = `fg-aba-${randomUUID().slice(0, 8)}`;
    await fx.backend.createBucket(bucket);
  });

  afterEach(async () => {
    await fx.cleanup();
  });

  const put = (backend: S3Backend, data: string, token: number, metadata: ObjectMetadata = metadataOf()) =>
    backend.putObject({ bucket, key: KEY, body: verifiedBody(data), metadata }, fencedCommit(token));

  const state = async () => {
    const got = await fx.backend.getObject(bucket, KEY);
    return {
      body: (await readAll(got.body)).toString(),
      etag: got.info.etag,
      userMetadata: got.info.userMetadata,
      hct: await fx.backend.highestToken(bucket, KEY),
    };
  };

  it("refuses T after T+1 and T+2 put back the bytes T saw", async () => {
    await put(fx.current(), "A", T - 1);
    const hold = held.hold(KEY, "before-record-put");
    const stale = put(writer, "T's bytes", T);
    stale.catch(() => undefined);
    await hold.reached; // T has read the record (HCT T-1, ETag of "A") and passed the HCT rule

    await put(fx.current(), "B", T + 1);
    await put(fx.current(), "A", T + 2); // exactly the bytes T saw: the same data ETag
    expect((await state()).etag).toBe(md5Etag("A"));

    hold.release();
    const refused = await stale.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(StaleTokenError);
    expect(refused).toMatchObject({ highestToken: T + 2 });
    expect(await state()).toEqual({ body: "A", etag: md5Etag("A"), userMetadata: {}, hct: T + 2 });
    expect(await fx.leftovers()).toEqual([]);
  });

  it("refuses T when only the metadata changed meanwhile (the bytes, hence the data ETag, never did)", async () => {
    await put(fx.current(), "same bytes", T - 1, metadataOf({ version: "1" }));
    const hold = held.hold(KEY, "before-record-put");
    const stale = writer.putObject(
      { bucket, key: KEY, body: verifiedBody("same bytes"), metadata: metadataOf({ version: "T" }) },
      // With If-Match on the ETag it read: on the data object's ETag this would pass again.
      fencedCommit(T, { conditions: { ifMatch: md5Etag("same bytes") } }),
    );
    stale.catch(() => undefined);
    await hold.reached;

    await put(fx.current(), "same bytes", T + 1, metadataOf({ version: "2" }));
    await put(fx.current(), "same bytes", T + 2, metadataOf({ version: "3" }));

    hold.release();
    await expect(stale).rejects.toBeInstanceOf(StaleTokenError);
    expect(await state()).toEqual({
      body: "same bytes",
      etag: md5Etag("same bytes"),
      userMetadata: { version: "3" },
      hct: T + 2,
    });
    expect(await fx.leftovers()).toEqual([]);
  });

  it("refuses a stale delete held the same way", async () => {
    await put(fx.current(), "A", T - 1);
    const hold = held.hold(KEY, "before-record-put");
    const stale = writer.deleteObject({ bucket, key: KEY }, fencedCommit(T));
    stale.catch(() => undefined);
    await hold.reached;
    await put(fx.current(), "B", T + 1);
    await put(fx.current(), "A", T + 2);
    hold.release();
    await expect(stale).rejects.toBeInstanceOf(StaleTokenError);
    expect((await state()).hct).toBe(T + 2);
  });

  it("the broken design (If-Match on the data object's ETag) lets T overwrite T+2: the HCT goes down", async () => {
    const naiveBucket = `fg-naive-${randomUUID().slice(0, 8)}`;
    await fx.raw.send(new CreateBucketCommand({ Bucket: naiveBucket }));
    let reached!: () => void;
    const atPause = new Promise<void>((r) => {
      reached = r;
    });
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const naive = new NaiveEtagFencing(fx.raw, naiveBucket, async (token) => {
      if (token === T) {
        reached();
        await gate;
      }
    });
    const other = new NaiveEtagFencing(fx.raw, naiveBucket);

    await other.put(KEY, Buffer.from("A"), T - 1);
    const stale = naive.put(KEY, Buffer.from("T's bytes"), T);
    await atPause;
    await other.put(KEY, Buffer.from("B"), T + 1);
    await other.put(KEY, Buffer.from("A"), T + 2, { version: "3" });
    release();
    await stale; // accepted: its If-Match on md5("A") still held

    const after = await naive.state(KEY);
    // The violation the record design prevents: T overwrote T+2, and the HCT went from T+2 to T.
    expect(after.hct).toBe(T);
    expect(after.etag).toBe(md5Etag("T's bytes"));
  });
});
