import { PassThrough, Readable } from "node:stream";
import {
  CompleteMultipartUploadCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  type S3Client,
  type S3ClientConfig,
  UploadPartCommand,
} from "@aws-sdk/client-s3";
import { Upload } from "@aws-sdk/lib-storage";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";
import { beforeAll, describe, expect, it } from "vitest";
import type { Lease } from "../../src/client/lease-client.js";
import { md5Hex } from "../support/digest.js";
import {
  auditRecords,
  bucketLease,
  bucketWithStaleToken,
  clientSuite,
  expectAccepted,
  expectStaleRejections,
  MiB,
  randomData,
  takeOver,
  waitForAudit,
} from "./helpers.js";

/**
 * The AWS SDK for JavaScript v3 as applications use it: @aws-sdk/client-s3 at its default
 * settings and with requestChecksumCalculation WHEN_REQUIRED, @aws-sdk/lib-storage's Upload
 * (multipart and single PUT) and @aws-sdk/s3-request-presigner's presigned URLs.
 *
 * The token travels as `Metadata: {"fence-token": …}` wherever a command takes metadata
 * (PutObject, CopyObject, CreateMultipartUpload, hence lib-storage's Upload): the gateway binds
 * a multipart upload to the lease of the token given at CreateMultipartUpload, and fences its
 * parts and its completion with that lease. DeleteObject and DeleteObjects take no metadata:
 * they get the `x-fence-token` header from a build-step middleware (fencedClient).
 */

const suite = clientSuite();

type Sent = { command: string; headers: Record<string, string> };

/**
 * A client whose every request carries `x-fence-token` while `token()` returns one (added at
 * the build step, so it is signed), and which records each request as it goes on the wire.
 * This is how an application gives DeleteObject and DeleteObjects a token: they have no
 * Metadata field. (Multipart uploads do not need it: Metadata on Create is enough.)
 */
function fencedClient(extra: Partial<S3ClientConfig>, token: () => string | undefined) {
  const client = suite.gw.s3(extra);
  const sent: Sent[] = [];
  client.middlewareStack.add(
    (next) => async (args) => {
      const t = token();
      if (t !== undefined) (args.request as { headers: Record<string, string> }).headers["x-fence-token"] = t;
      return next(args);
    },
    { step: "build", name: "fenceTokenHeader" },
  );
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const headers = { ...(args.request as { headers: Record<string, string> }).headers };
      sent.push({ command: context.commandName ?? "?", headers });
      return next(args);
    },
    // Inside the deserializer: the signed request as sent.
    { step: "deserialize", priority: "low", name: "requestRecorder" },
  );
  return { client, sent };
}

/** Adds x-fence-token to a presigned URL's query: at the build step, so the signature covers it. */
function withTokenQuery<C extends { middlewareStack: { add: (...a: never[]) => void } }>(
  command: C,
  token: string,
): C {
  (command.middlewareStack as unknown as S3Client["middlewareStack"]).add(
    (next) => async (args) => {
      (args.request as { query: Record<string, string> }).query["x-fence-token"] = token;
      return next(args);
    },
    { step: "build", name: "fenceTokenQuery" },
  );
  return command;
}

type SdkError = Error & { name: string; $metadata: { httpStatusCode?: number }; $response?: unknown };

async function rejection(p: Promise<unknown>): Promise<SdkError> {
  try {
    await p;
  } catch (e) {
    return e as SdkError;
  }
  throw new Error("expected the request to be refused; it succeeded");
}

async function expectRefusal(p: Promise<unknown>, code: string, status: number): Promise<SdkError> {
  const err = await rejection(p);
  expect({ name: err.name, status: err.$metadata.httpStatusCode, message: err.message }).toMatchObject({
    name: code,
    status,
  });
  return err;
}

/** CreateBucket through `s3`. */
async function createBucket(s3: S3Client, bucket: string): Promise<void> {
  await s3.send(new CreateBucketCommand({ Bucket: bucket }));
}

async function bytesOf(s3: S3Client, bucket: string, key: string): Promise<Buffer> {
  const out = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
  return Buffer.from(await out.Body!.transformToByteArray());
}

function streamOf(data: Buffer, chunk = 64 * 1024): Readable {
  const parts: Buffer[] = [];
  for (let i = 0; i < data.length; i += chunk) parts.push(data.subarray(i, i + chunk));
  return Readable.from(parts, { objectMode: false });
}

const CONFIGS: [string, Partial<S3ClientConfig>, string][] = [
  ["default settings", {}, "sdk-client-default"],
  [
    "requestChecksumCalculation WHEN_REQUIRED",
    { requestChecksumCalculation: "WHEN_REQUIRED" },
    "sdk-client-required",
  ],
];

describe.each(CONFIGS)("@aws-sdk/client-s3 and lib-storage (%s)", (_label, extra, bucket) => {
  let s3: S3Client;
  let lease: Lease;
  let headerToken: string | undefined;
  let sent: Sent[];

  beforeAll(async () => {
    ({ client: s3, sent } = fencedClient(extra, () => headerToken));
    await createBucket(s3, bucket);
    lease = await bucketLease(suite.gw, bucket);
  });

  it("PutObject with the token in Metadata (Buffer and stream bodies), GetObject, HeadObject, ListObjectsV2", async () => {
    headerToken = undefined;
    const small = Buffer.from("hello from the sdk\n");
    const put = await s3.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: "docs/small.txt",
        Body: small,
        ContentType: "text/plain",
        Metadata: { "fence-token": lease.fencingToken, team: "blue" },
      }),
    );
    expect(put.ETag).toBe(`"${md5Hex(small)}"`);

    // A stream: aws-chunked with a CRC32 trailer by default, UNSIGNED-PAYLOAD with WHEN_REQUIRED.
    const streamed = randomData(300 * 1024 + 7);
    sent.length = 0;
    await s3.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: "docs/streamed.bin",
        Body: streamOf(streamed),
        ContentLength: streamed.length,
        Metadata: { "fence-token": lease.fencingToken },
      }),
    );

    expect(sent.at(-1)?.headers["x-amz-content-sha256"]).toBe(
      extra.requestChecksumCalculation === "WHEN_REQUIRED"
        ? "UNSIGNED-PAYLOAD"
        : "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
    );

    expect((await bytesOf(s3, bucket, "docs/small.txt")).equals(small)).toBe(true);
    expect(md5Hex(await bytesOf(s3, bucket, "docs/streamed.bin"))).toBe(md5Hex(streamed));
    const head = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: "docs/small.txt" }));
    expect(head).toMatchObject({
      ContentLength: small.length,
      ContentType: "text/plain",
      Metadata: { team: "blue" },
    });
    expect(head.Metadata).not.toHaveProperty("fence-token");

    const list = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: "docs/" }));
    expect(list.Contents?.map((o) => [o.Key, o.Size])).toEqual([
      ["docs/small.txt", small.length],
      ["docs/streamed.bin", streamed.length],
    ]);
    expect(list.KeyCount).toBe(2);
  });

  it("lib-storage Upload of a 12 MiB stream with the token in Metadata alone: parts and completion are fenced with the upload's lease", async () => {
    const data = randomData(12 * MiB);
    headerToken = undefined;
    sent.length = 0;
    const upload = new Upload({
      client: s3,
      params: {
        Bucket: bucket,
        Key: "big/12mib.bin",
        Body: streamOf(data),
        Metadata: { "fence-token": lease.fencingToken },
      },
      partSize: 5 * MiB,
      queueSize: 2,
    });
    const out = await upload.done();
    expect(out.ETag).toMatch(/^"[0-9a-f]{32}-3"$/);

    // Metadata reaches CreateMultipartUpload only; the parts and the completion carry no token.
    const create = sent.filter((s) => s.command === "CreateMultipartUploadCommand");
    expect(create.map((s) => s.headers["x-amz-meta-fence-token"])).toEqual([lease.fencingToken]);
    const rest = sent.filter((s) => s.command !== "CreateMultipartUploadCommand");
    expect(rest.map((s) => s.command).sort()).toEqual([
      "CompleteMultipartUploadCommand",
      "UploadPartCommand",
      "UploadPartCommand",
      "UploadPartCommand",
    ]);
    for (const r of rest) {
      expect(r.headers).not.toHaveProperty("x-fence-token");
      expect(r.headers).not.toHaveProperty("x-amz-meta-fence-token");
    }

    expect(md5Hex(await bytesOf(s3, bucket, "big/12mib.bin"))).toBe(md5Hex(data));
    const head = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: "big/12mib.bin" }));
    expect(head.ContentLength).toBe(12 * MiB);
    expect(head.ETag).toBe(out.ETag);
    expect(head.Metadata).toEqual({});
    await expectAccepted(suite.gw, { bucket, key: "big/12mib.bin", op: "UploadPart" }, lease.token, 3);
    await expectAccepted(
      suite.gw,
      { bucket, key: "big/12mib.bin", op: "CompleteMultipartUpload" },
      lease.token,
    );
  });

  it("lib-storage Upload of a small body takes the single PutObject path with Metadata alone", async () => {
    headerToken = undefined;
    sent.length = 0;
    const data = randomData(1024 * 1024);
    const out = await new Upload({
      client: s3,
      params: {
        Bucket: bucket,
        Key: "big/one-part.bin",
        Body: data,
        Metadata: { "fence-token": lease.fencingToken },
      },
      partSize: 5 * MiB,
    }).done();
    expect(sent.map((s) => s.command)).toEqual(["PutObjectCommand"]);
    expect(out.ETag).toBe(`"${md5Hex(data)}"`);
    expect(md5Hex(await bytesOf(s3, bucket, "big/one-part.bin"))).toBe(md5Hex(data));
  });

  it("DeleteObject and DeleteObjects with the x-fence-token header; refused without it", async () => {
    headerToken = undefined;
    await expectRefusal(
      s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: "docs/small.txt" })),
      "FencingTokenRequired",
      428,
    );
    headerToken = lease.fencingToken;
    await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: "docs/small.txt" }));
    const multi = await s3.send(
      new DeleteObjectsCommand({
        Bucket: bucket,
        Delete: { Objects: [{ Key: "docs/streamed.bin" }, { Key: "big/one-part.bin" }] },
      }),
    );
    expect(multi.Errors ?? []).toEqual([]);
    expect(multi.Deleted?.map((d) => d.Key).sort()).toEqual(["big/one-part.bin", "docs/streamed.bin"]);
    const list = await s3.send(new ListObjectsV2Command({ Bucket: bucket }));
    expect(list.Contents?.map((o) => o.Key)).toEqual(["big/12mib.bin"]);
  });

  it("a stale token is refused with 409 StaleFencingToken on PutObject, Upload and DeleteObject", async () => {
    const staleBucket = `${bucket}-stale`;
    const { stale, fresh } = await bucketWithStaleToken(suite.gw, staleBucket, (b) => createBucket(s3, b));
    headerToken = undefined;
    const put = (body: string, token: string) =>
      s3.send(
        new PutObjectCommand({
          Bucket: staleBucket,
          Key: "k",
          Body: body,
          Metadata: { "fence-token": token },
        }),
      );
    await put("fresh", fresh.fencingToken);
    const err = await expectRefusal(put("stale", stale.fencingToken), "StaleFencingToken", 409);
    expect((err.$response as { headers: Record<string, string> }).headers["x-fence-highest-token"]).toBe(
      String(fresh.token),
    );
    // A multipart Upload with the stale token in Metadata is refused at CreateMultipartUpload.
    sent.length = 0;
    await expectRefusal(
      new Upload({
        client: s3,
        params: {
          Bucket: staleBucket,
          Key: "k",
          Body: streamOf(randomData(11 * MiB)),
          Metadata: { "fence-token": stale.fencingToken },
        },
        partSize: 5 * MiB,
      }).done(),
      "StaleFencingToken",
      409,
    );
    expect(sent.map((s) => s.command)).toEqual(["CreateMultipartUploadCommand"]);
    headerToken = stale.fencingToken;
    await expectRefusal(
      s3.send(new DeleteObjectCommand({ Bucket: staleBucket, Key: "k" })),
      "StaleFencingToken",
      409,
    );
    await expectStaleRejections(suite.gw, staleBucket, stale.token, [
      "PutObject",
      "CreateMultipartUpload",
      "DeleteObject",
    ]);
    headerToken = undefined;
    expect((await bytesOf(s3, staleBucket, "k")).toString()).toBe("fresh");
  });

  it("lease lost while lib-storage uploads (Metadata alone): the next part is refused with 409, the newer write stays", async () => {
    const lostBucket = `${bucket}-lost`;
    await createBucket(s3, lostBucket);
    const old = await bucketLease(suite.gw, lostBucket);
    headerToken = undefined;
    const body = new PassThrough();
    const upload = new Upload({
      client: s3,
      params: { Bucket: lostBucket, Key: "k", Body: body, Metadata: { "fence-token": old.fencingToken } },
      partSize: 5 * MiB,
      queueSize: 1,
    });
    const done = rejection(upload.done());
    body.write(randomData(6 * MiB));
    // Part 1 went through under the old lease; the rest of the body is still to come.
    await waitForAudit(suite.gw, { bucket: lostBucket, key: "k", op: "UploadPart" }, (r) => r.length > 0);
    const fresh = await takeOver(suite.gw, old, "k", "fresh");
    body.end(randomData(6 * MiB));
    const err = await done;
    expect({ name: err.name, status: err.$metadata.httpStatusCode }).toEqual({
      name: "StaleFencingToken",
      status: 409,
    });

    expect((await bytesOf(s3, lostBucket, "k")).toString()).toBe("fresh");
    const records = await auditRecords(suite.gw, { bucket: lostBucket, key: "k" });
    expect(records.filter((r) => r.op === "CompleteMultipartUpload" && r.decision === "accepted")).toEqual(
      [],
    );
    expect(records.map((r) => [r.op, r.decision, r.reason, r.token])).toContainEqual([
      "UploadPart",
      "rejected",
      "StaleFencingToken",
      old.token,
    ]);
    await suite.gw.leases.release(fresh.leaseId);
  });

  it("lease lost just before CompleteMultipartUpload: the completion is refused with 409, nothing becomes visible", async () => {
    const lostBucket = `${bucket}-lost-complete`;
    await createBucket(s3, lostBucket);
    const old = await suite.gw.leases.acquire({ bucket: lostBucket, key: "k", ttlMs: 600_000 });
    headerToken = undefined;
    let fresh: Lease | undefined;
    // Takes the lease over once every part is in, when lib-storage is about to complete.
    const client = suite.gw.s3(extra);
    client.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === "CompleteMultipartUploadCommand") {
          fresh = await takeOver(suite.gw, old, "k", "fresh");
        }
        return next(args);
      },
      { step: "initialize", name: "takeOverBeforeComplete" },
    );
    const data = randomData(11 * MiB);
    await expectRefusal(
      new Upload({
        client,
        params: {
          Bucket: lostBucket,
          Key: "k",
          Body: streamOf(data),
          Metadata: { "fence-token": old.fencingToken },
        },
        partSize: 5 * MiB,
      }).done(),
      "StaleFencingToken",
      409,
    );
    expect(fresh).toBeDefined();
    expect((await bytesOf(s3, lostBucket, "k")).toString()).toBe("fresh");
    const records = (await auditRecords(suite.gw, { bucket: lostBucket, key: "k" })).filter(
      (r) => !r.op.startsWith("Lease"),
    );
    expect(records.map((r) => [r.op, r.decision, r.reason, r.token])).toEqual([
      ["CreateMultipartUpload", "accepted", null, old.token],
      ["UploadPart", "accepted", null, old.token],
      ["UploadPart", "accepted", null, old.token],
      ["UploadPart", "accepted", null, old.token],
      ["PutObject", "accepted", null, fresh!.token],
      ["CompleteMultipartUpload", "rejected", "StaleFencingToken", old.token],
    ]);
    client.destroy();
  });

  it("a part or completion that does send a token must send the upload's own (403 FencingTokenScopeMismatch)", async () => {
    const b = `${bucket}-foreign`;
    await createBucket(s3, b);
    const old = await suite.gw.leases.acquire({ bucket: b, key: "k", ttlMs: 600_000 });
    headerToken = undefined;
    const { UploadId } = await s3.send(
      new CreateMultipartUploadCommand({
        Bucket: b,
        Key: "k",
        Metadata: { "fence-token": old.fencingToken },
      }),
    );
    const part = await s3.send(
      new UploadPartCommand({ Bucket: b, Key: "k", UploadId, PartNumber: 1, Body: Buffer.from("old part") }),
    );
    // The new holder's token is current, but this upload belongs to the old lease.
    const fresh = await takeOver(suite.gw, old, "k", "fresh");
    const complete = () =>
      s3.send(
        new CompleteMultipartUploadCommand({
          Bucket: b,
          Key: "k",
          UploadId,
          MultipartUpload: { Parts: [{ PartNumber: 1, ETag: part.ETag }] },
        }),
      );
    headerToken = fresh.fencingToken;
    await expectRefusal(
      s3.send(
        new UploadPartCommand({ Bucket: b, Key: "k", UploadId, PartNumber: 2, Body: Buffer.from("x") }),
      ),
      "FencingTokenScopeMismatch",
      403,
    );
    await expectRefusal(complete(), "FencingTokenScopeMismatch", 403);
    // Without a token the completion is fenced with the old lease: superseded.
    headerToken = undefined;
    await expectRefusal(complete(), "StaleFencingToken", 409);
    expect((await bytesOf(s3, b, "k")).toString()).toBe("fresh");
  });
});

describe("@aws-sdk/s3-request-presigner", () => {
  const bucket = "sdk-presigned";
  let s3: S3Client;
  let lease: Lease;

  beforeAll(async () => {
    s3 = suite.gw.s3();
    await createBucket(s3, bucket);
    lease = await bucketLease(suite.gw, bucket);
  });

  it("PUT with x-fence-token in the signed query, then GET and HEAD", async () => {
    const body = randomData(100 * 1024);
    const putUrl = await getSignedUrl(
      s3,
      withTokenQuery(new PutObjectCommand({ Bucket: bucket, Key: "dir/file name.bin" }), lease.fencingToken),
      { expiresIn: 300 },
    );
    expect(new URL(putUrl).searchParams.get("x-fence-token")).toBe(lease.fencingToken);
    expect(new URL(putUrl).searchParams.get("X-Amz-SignedHeaders")).toBe("host");
    const put = await fetch(putUrl, { method: "PUT", body });
    expect(put.status, await put.clone().text()).toBe(200);
    expect(put.headers.get("etag")).toBe(`"${md5Hex(body)}"`);
    expect(put.headers.get("x-fence-token-accepted")).toBe(String(lease.token));

    const getUrl = await getSignedUrl(s3, new GetObjectCommand({ Bucket: bucket, Key: "dir/file name.bin" }));
    const get = await fetch(getUrl);
    expect(get.status).toBe(200);
    expect(md5Hex(Buffer.from(await get.arrayBuffer()))).toBe(md5Hex(body));

    const headUrl = await getSignedUrl(
      s3,
      new HeadObjectCommand({ Bucket: bucket, Key: "dir/file name.bin" }),
    );
    const head = await fetch(headUrl, { method: "HEAD" });
    expect(head.status).toBe(200);
    expect(head.headers.get("content-length")).toBe(String(body.length));
    expect(head.headers.get("etag")).toBe(`"${md5Hex(body)}"`);
  });

  it("PUT without a token is refused with 428; a token added after signing breaks the signature", async () => {
    const url = await getSignedUrl(s3, new PutObjectCommand({ Bucket: bucket, Key: "unfenced" }));
    const res = await fetch(url, { method: "PUT", body: "x" });
    expect(res.status).toBe(428);
    expect(await res.text()).toContain("<Code>FencingTokenRequired</Code>");

    const tampered = new URL(url);
    tampered.searchParams.set("x-fence-token", lease.fencingToken);
    const res2 = await fetch(tampered, { method: "PUT", body: "x" });
    expect(res2.status).toBe(403);
    expect(await res2.text()).toContain("<Code>SignatureDoesNotMatch</Code>");
    await expectRefusal(s3.send(new HeadObjectCommand({ Bucket: bucket, Key: "unfenced" })), "NotFound", 404);
  });

  it("DELETE with x-fence-token in the signed query", async () => {
    const unsigned = await getSignedUrl(
      s3,
      new DeleteObjectCommand({ Bucket: bucket, Key: "dir/file name.bin" }),
    );
    expect((await fetch(unsigned, { method: "DELETE" })).status).toBe(428);

    const url = await getSignedUrl(
      s3,
      withTokenQuery(
        new DeleteObjectCommand({ Bucket: bucket, Key: "dir/file name.bin" }),
        lease.fencingToken,
      ),
    );
    const res = await fetch(url, { method: "DELETE" });
    expect(res.status).toBe(204);
    await expectRefusal(
      s3.send(new HeadObjectCommand({ Bucket: bucket, Key: "dir/file name.bin" })),
      "NotFound",
      404,
    );
  });

  it("a presigned PUT with a stale token is refused with 409 StaleFencingToken", async () => {
    const b = "sdk-presigned-stale";
    const { stale, fresh } = await bucketWithStaleToken(suite.gw, b, (name) => createBucket(s3, name));
    const freshUrl = await getSignedUrl(
      s3,
      withTokenQuery(new PutObjectCommand({ Bucket: b, Key: "k" }), fresh.fencingToken),
    );
    expect((await fetch(freshUrl, { method: "PUT", body: "fresh" })).status).toBe(200);
    const staleUrl = await getSignedUrl(
      s3,
      withTokenQuery(new PutObjectCommand({ Bucket: b, Key: "k" }), stale.fencingToken),
    );
    const res = await fetch(staleUrl, { method: "PUT", body: "stale" });
    expect(res.status).toBe(409);
    expect(await res.text()).toContain("<Code>StaleFencingToken</Code>");
    expect((await bytesOf(s3, b, "k")).toString()).toBe("fresh");
  });
});
