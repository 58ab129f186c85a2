import {
  CopyObjectCommand,
  CreateBucketCommand,
  DeleteObjectsCommand,
  GetBucketAclCommand,
  GetBucketLoggingCommand,
  GetBucketPolicyCommand,
  GetBucketRequestPaymentCommand,
  GetBucketVersioningCommand,
  GetObjectCommand,
  GetPublicAccessBlockCommand,
  HeadObjectCommand,
  ListObjectVersionsCommand,
  PutObjectCommand,
  type S3Client,
} from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Lease } from "../../src/client/lease-client.js";
import { startTestGateway, type TestGateway } from "../support/gateway.js";

let gw: TestGateway;
let s3: S3Client;
let prefixLease: Lease;
const bucket = "objects";

const fenced = (extra: Record<string, string> = {}) => ({
  "fence-token": prefixLease.fencingToken,
  ...extra,
});

async function put(key: string, body: string, metadata: Record<string, string> = {}) {
  return s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body, Metadata: fenced(metadata) }));
}

async function statusOf(p: Promise<unknown>): Promise<{ status: number; code?: string }> {
  try {
    await p;
    return { status: 200 };
  } catch (e) {
    const err = e as { $metadata?: { httpStatusCode?: number }; name?: string; Code?: string };
    return { status: err.$metadata?.httpStatusCode ?? 0, code: err.Code ?? err.name };
  }
}

beforeAll(async () => {
  gw = await startTestGateway();
  s3 = gw.s3();
  await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  prefixLease = await gw.leases.acquire({ bucket, prefix: "", ttlMs: 600_000 });
});

afterAll(async () => {
  await gw?.stop();
});

describe("CopyObject", () => {
  it("copies bytes and metadata (COPY) and is fenced on the destination", async () => {
    await put("src.txt", "copy me", { colour: "blue" });
    const res = await s3.send(
      new CopyObjectCommand({
        Bucket: bucket,
        Key: "dst.txt",
        CopySource: `${bucket}/src.txt`,
        Metadata: fenced(),
      }),
    );
    expect(res.CopyObjectResult?.ETag).toMatch(/^"[0-9a-f]{32}"$/);
    const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: "dst.txt" }));
    expect(await got.Body!.transformToString()).toBe("copy me");
    expect(got.Metadata).toEqual({ colour: "blue" });
  });

  it("replaces metadata with REPLACE, also onto itself, and refuses a self-copy with COPY", async () => {
    await put("self.txt", "same bytes", { a: "1" });
    const self = await statusOf(
      s3.send(
        new CopyObjectCommand({
          Bucket: bucket,
          Key: "self.txt",
          CopySource: `${bucket}/self.txt`,
          Metadata: fenced(),
        }),
      ),
    );
    expect(self).toEqual({ status: 400, code: "InvalidRequest" });
    await s3.send(
      new CopyObjectCommand({
        Bucket: bucket,
        Key: "self.txt",
        CopySource: `${bucket}/self.txt`,
        MetadataDirective: "REPLACE",
        Metadata: fenced({ b: "2" }),
        ContentType: "text/plain",
      }),
    );
    const head = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: "self.txt" }));
    expect(head.Metadata).toEqual({ b: "2" });
    expect(head.ContentType).toBe("text/plain");
  });

  it("honours copy-source conditions and refuses a copy without a token", async () => {
    const { ETag } = await put("cond.txt", "conditional");
    const failed = await statusOf(
      s3.send(
        new CopyObjectCommand({
          Bucket: bucket,
          Key: "cond-copy.txt",
          CopySource: `${bucket}/cond.txt`,
          CopySourceIfMatch: '"00000000000000000000000000000000"',
          Metadata: fenced(),
        }),
      ),
    );
    expect(failed).toEqual({ status: 412, code: "PreconditionFailed" });
    const ok = await statusOf(
      s3.send(
        new CopyObjectCommand({
          Bucket: bucket,
          Key: "cond-copy.txt",
          CopySource: `${bucket}/cond.txt`,
          CopySourceIfMatch: ETag!.replace(/"/g, ""),
          Metadata: fenced(),
        }),
      ),
    );
    expect(ok.status).toBe(200);
    const unfenced = await statusOf(
      s3.send(
        new CopyObjectCommand({ Bucket: bucket, Key: "cond-copy2.txt", CopySource: `${bucket}/cond.txt` }),
      ),
    );
    expect(unfenced).toEqual({ status: 428, code: "FencingTokenRequired" });
  });
});

describe("DeleteObjects", () => {
  it("deletes each key with a result per key, quiet and verbose", async () => {
    await put("d/1", "1");
    await put("d/2", "2");
    const res = await s3.send(
      new DeleteObjectsCommand({
        Bucket: bucket,
        Delete: { Objects: [{ Key: "d/1" }, { Key: "d/2" }, { Key: "d/missing" }] },
      }),
    );
    // Without a token every key is refused individually.
    expect(res.Errors?.map((e) => e.Code)).toEqual([
      "FencingTokenRequired",
      "FencingTokenRequired",
      "FencingTokenRequired",
    ]);
    const withToken = gw.s3();
    withToken.middlewareStack.add(
      (next) => async (args) => {
        (args.request as { headers: Record<string, string> }).headers["x-fence-token"] =
          prefixLease.fencingToken;
        return next(args);
      },
      { step: "build" },
    );
    const ok = await withToken.send(
      new DeleteObjectsCommand({
        Bucket: bucket,
        Delete: { Objects: [{ Key: "d/1" }, { Key: "d/2" }, { Key: "d/missing" }] },
      }),
    );
    expect(ok.Deleted?.map((d) => d.Key)).toEqual(["d/1", "d/2", "d/missing"]);
    expect(ok.Errors ?? []).toEqual([]);
    await put("d/3", "3");
    const quiet = await withToken.send(
      new DeleteObjectsCommand({ Bucket: bucket, Delete: { Quiet: true, Objects: [{ Key: "d/3" }] } }),
    );
    expect(quiet.Deleted ?? []).toEqual([]);
    expect(await statusOf(s3.send(new HeadObjectCommand({ Bucket: bucket, Key: "d/3" })))).toMatchObject({
      status: 404,
    });
  });
});

describe("conditional reads", () => {
  it("answers If-None-Match with 304 and If-Match mismatch with 412", async () => {
    const { ETag } = await put("c.txt", "conditional read");
    expect(
      await statusOf(s3.send(new GetObjectCommand({ Bucket: bucket, Key: "c.txt", IfNoneMatch: ETag }))),
    ).toMatchObject({
      status: 304,
    });
    expect(
      await statusOf(s3.send(new GetObjectCommand({ Bucket: bucket, Key: "c.txt", IfMatch: '"abc"' }))),
    ).toMatchObject({ status: 412 });
    const ok = await s3.send(
      new GetObjectCommand({ Bucket: bucket, Key: "c.txt", IfMatch: ETag!.slice(1, -1) }),
    );
    expect(await ok.Body!.transformToString()).toBe("conditional read");
    expect(
      await statusOf(
        s3.send(
          new HeadObjectCommand({
            Bucket: bucket,
            Key: "c.txt",
            IfModifiedSince: new Date(Date.now() + 60_000),
          }),
        ),
      ),
    ).toMatchObject({ status: 304 });
    expect(
      await statusOf(
        s3.send(
          new HeadObjectCommand({
            Bucket: bucket,
            Key: "c.txt",
            IfUnmodifiedSince: new Date(Date.now() - 3600_000),
          }),
        ),
      ),
    ).toMatchObject({ status: 412 });
  });

  it("refuses If-None-Match: * on an existing key and If-Match mismatch on a write, with the token valid", async () => {
    await put("w.txt", "first");
    const exists = await statusOf(
      s3.send(
        new PutObjectCommand({
          Bucket: bucket,
          Key: "w.txt",
          Body: "second",
          IfNoneMatch: "*",
          Metadata: fenced(),
        }),
      ),
    );
    expect(exists).toMatchObject({ status: 412 });
    const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: "w.txt" }));
    expect(await got.Body!.transformToString()).toBe("first");
  });
});

describe("checksums and versions", () => {
  it("stores the CRC32 the SDK sends and returns it with x-amz-checksum-mode: ENABLED", async () => {
    const res = await s3.send(
      new PutObjectCommand({ Bucket: bucket, Key: "sum.txt", Body: "hello world", Metadata: fenced() }),
    );
    expect(res.ChecksumCRC32).toBe("DUoRhQ==");
    const got = await s3.send(
      new GetObjectCommand({ Bucket: bucket, Key: "sum.txt", ChecksumMode: "ENABLED" }),
    );
    expect(got.ChecksumCRC32).toBe("DUoRhQ==");
    expect(await got.Body!.transformToString()).toBe("hello world");
  });

  it("lists one null version per key", async () => {
    await put("v/a", "a");
    await put("v/b", "b");
    const res = await s3.send(new ListObjectVersionsCommand({ Bucket: bucket, Prefix: "v/" }));
    expect(res.Versions?.map((v) => [v.Key, v.VersionId, v.IsLatest])).toEqual([
      ["v/a", "null", true],
      ["v/b", "null", true],
    ]);
  });
});

describe("bucket settings fencegate does not manage", () => {
  it("answers reads with S3's defaults for a bucket where nothing was configured", async () => {
    expect((await s3.send(new GetBucketVersioningCommand({ Bucket: bucket }))).Status).toBeUndefined();
    expect((await s3.send(new GetBucketRequestPaymentCommand({ Bucket: bucket }))).Payer).toBe("BucketOwner");
    expect((await s3.send(new GetBucketLoggingCommand({ Bucket: bucket }))).LoggingEnabled).toBeUndefined();
    const acl = await s3.send(new GetBucketAclCommand({ Bucket: bucket }));
    expect(acl.Grants?.[0]).toMatchObject({ Permission: "FULL_CONTROL", Grantee: { Type: "CanonicalUser" } });
    expect(await statusOf(s3.send(new GetBucketPolicyCommand({ Bucket: bucket })))).toEqual({
      status: 404,
      code: "NoSuchBucketPolicy",
    });
    expect(await statusOf(s3.send(new GetPublicAccessBlockCommand({ Bucket: bucket })))).toEqual({
      status: 404,
      code: "NoSuchPublicAccessBlockConfiguration",
    });
    expect(
      await statusOf(s3.send(new GetBucketVersioningCommand({ Bucket: "no-such-bucket" }))),
    ).toMatchObject({
      status: 404,
      code: "NoSuchBucket",
    });
  });
});
