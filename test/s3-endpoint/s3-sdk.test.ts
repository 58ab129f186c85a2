import { randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import {
  CreateBucketCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListBucketsCommand,
  ListObjectsV2Command,
  type ListObjectsV2CommandOutput,
  PutObjectCommand,
  S3Client,
  type S3ClientConfig,
} from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AuditRecord } from "../../src/audit/audit-log.js";
import type { Lease } from "../../src/client/lease-client.js";
import { signFencingToken } from "../../src/fence/tokens.js";
import { md5Hex } from "../support/digest.js";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../support/gateway.js";
import { parseS3Error } from "../support/signed-http.js";
import { sleep } from "../support/wait.js";

/**
 * The real @aws-sdk/client-s3 against an in-process gateway, at the SDK's default settings and
 * with requestChecksumCalculation WHEN_REQUIRED. Every response is recorded raw (status,
 * headers, error bodies) so that the wire format can be checked too.
 */

type Seen = {
  method: string;
  path: string;
  requestHeaders: Record<string, string>;
  status: number;
  headers: Record<string, string>;
  body?: string;
};

type Recorded = { client: S3Client; seen: Seen[]; last(): Seen };

/** A client with only endpoint, region, path style and credentials set (plus `extra`). */
function sdkClient(endpoint: string, extra: Partial<S3ClientConfig> = {}): Recorded {
  const client = new S3Client({
    endpoint,
    region: "us-east-1",
    forcePathStyle: true,
    credentials: CREDENTIALS,
    ...extra,
  });
  const seen: Seen[] = [];
  client.middlewareStack.add(
    (next) => async (args) => {
      const request = args.request as { method: string; path: string; headers: Record<string, string> };
      const requestHeaders = { ...request.headers };
      const out = await next(args);
      const res = out.response as { statusCode: number; headers: Record<string, string>; body?: unknown };
      const entry: Seen = {
        method: request.method,
        path: request.path,
        requestHeaders,
        status: res.statusCode,
        headers: { ...res.headers },
      };
      if (res.statusCode >= 300 && res.body) {
        // Error bodies are small: read them here and hand the SDK an equivalent stream.
        const chunks: Buffer[] = [];
        for await (const c of res.body as AsyncIterable<Uint8Array>) chunks.push(Buffer.from(c));
        const buf = Buffer.concat(chunks);
        entry.body = buf.toString("utf8");
        res.body = Readable.from([buf]);
      }
      seen.push(entry);
      return out;
    },
    // Inside the deserializer (lower priority runs closer to the wire): the raw response.
    { step: "deserialize", priority: "low", name: "rawRecorder" },
  );
  return {
    client,
    seen,
    last: () => {
      const s = seen.at(-1);
      if (!s) throw new Error("no response recorded");
      return s;
    },
  };
}

/** Adds the x-fence-token header to one command (before signing, so it is signed too). */
function withFenceHeader<T extends { middlewareStack: { add: (...a: never[]) => void } }>(
  command: T,
  token: string,
): T {
  (command.middlewareStack as unknown as S3Client["middlewareStack"]).add(
    (next) => async (args) => {
      (args.request as { headers: Record<string, string> }).headers["x-fence-token"] = token;
      return next(args);
    },
    { step: "build", name: "fenceTokenHeader" },
  );
  return command;
}

type SdkError = Error & { name: string; $metadata: { httpStatusCode?: number; requestId?: string } };

async function failure(p: Promise<unknown>): Promise<SdkError> {
  const outcome = await p.then(
    (v) => ({ ok: true as const, v }),
    (e: unknown) => ({ ok: false as const, e }),
  );
  if (outcome.ok) throw new Error(`expected the request to fail, it succeeded: ${JSON.stringify(outcome.v)}`);
  return outcome.e as SdkError;
}

/**
 * The request failed with this S3 code and status; the raw body is S3 XML with Code, Message,
 * Resource and RequestId, and the RequestId is the x-amz-request-id header.
 */
async function expectS3Failure(
  rec: Recorded,
  p: Promise<unknown>,
  code: string,
  status: number,
): Promise<{ err: SdkError; raw: Seen; body: Record<string, unknown> }> {
  const err = await failure(p);
  const raw = rec.last();
  expect({ name: err.name, status: err.$metadata.httpStatusCode }).toEqual({ name: code, status });
  expect(raw.status).toBe(status);
  expect(raw.headers["content-type"]).toMatch(/xml/);
  const body = parseS3Error(raw.body ?? "");
  expect(body.Code).toBe(code);
  expect(String(body.Message).length).toBeGreaterThan(0);
  expect(body).toHaveProperty("Resource");
  expect(raw.headers["x-amz-request-id"]).toMatch(/\S/);
  expect(body.RequestId).toBe(raw.headers["x-amz-request-id"]);
  expect(err.$metadata.requestId).toBe(raw.headers["x-amz-request-id"]);
  return { err, raw, body };
}

async function bodyOf(out: { Body?: unknown }): Promise<Buffer> {
  const body = out.Body as { transformToByteArray(): Promise<Uint8Array> } | undefined;
  if (!body) throw new Error("no body");
  return Buffer.from(await body.transformToByteArray());
}

function chunkedStream(data: Buffer, chunkSize: number): Readable {
  const chunks: Buffer[] = [];
  for (let i = 0; i < data.length; i += chunkSize) chunks.push(data.subarray(i, i + chunkSize));
  return Readable.from(chunks, { objectMode: false });
}

let gw: TestGateway;

beforeAll(async () => {
  gw = await startTestGateway();
});

afterAll(async () => {
  await gw?.stop();
});

async function lease(bucket: string, resource: { key: string } | { prefix: string }, ttlMs = 30_000) {
  return gw.leases.acquire({ bucket, ...resource, ttlMs, owner: "sdk-test" });
}

const CONFIGS: [string, Partial<S3ClientConfig>, string][] = [
  ["default settings", {}, "sdk-default"],
  [
    "requestChecksumCalculation WHEN_REQUIRED",
    { requestChecksumCalculation: "WHEN_REQUIRED" },
    "sdk-required",
  ],
];

describe.each(CONFIGS)("S3 operations through @aws-sdk/client-s3 (%s)", (label, extra, bucket) => {
  let rec: Recorded;
  let s3: S3Client;
  let all: Lease; // a prefix lease covering the whole bucket

  beforeAll(async () => {
    rec = sdkClient(gw.url, extra);
    s3 = rec.client;
  });

  it("creates, heads and lists the bucket", async () => {
    const created = await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    expect(created.$metadata.httpStatusCode).toBe(200);
    const head = await s3.send(new HeadBucketCommand({ Bucket: bucket }));
    expect(head.$metadata.httpStatusCode).toBe(200);
    const list = await s3.send(new ListBucketsCommand({}));
    expect(list.Buckets?.map((b) => b.Name)).toContain(bucket);
    expect(list.Buckets?.find((b) => b.Name === bucket)?.CreationDate).toBeInstanceOf(Date);
    // Created again in us-east-1 (the gateway's region): 200 with nothing changed, as S3 answers.
    const again = await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    expect(again.$metadata.httpStatusCode).toBe(200);
    all = await lease(bucket, { prefix: "" });
  });

  it("PutObject with a string body, token in Metadata; fence-token metadata is not returned", async () => {
    const out = await s3.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: "docs/string.txt",
        Body: "hello string",
        ContentType: "text/plain",
        Metadata: { "fence-token": all.fencingToken, color: "blue" },
      }),
    );
    expect(out.ETag).toBe(`"${md5Hex("hello string")}"`);
    expect(rec.last().headers["x-fence-token-accepted"]).toBe(String(all.token));

    const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: "docs/string.txt" }));
    expect((await bodyOf(got)).toString()).toBe("hello string");
    expect(got.ContentType).toBe("text/plain");
    expect(got.Metadata).toEqual({ color: "blue" });
    expect(rec.last().headers["x-amz-meta-fence-token"]).toBeUndefined();
    const head = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: "docs/string.txt" }));
    expect(head.Metadata).toEqual({ color: "blue" });
    expect(head.ContentLength).toBe("hello string".length);
    expect(head.ETag).toBe(`"${md5Hex("hello string")}"`);
    expect(rec.last().headers["x-amz-meta-fence-token"]).toBeUndefined();
  });

  it("PutObject with a Buffer body, token in the x-fence-token header (middleware)", async () => {
    const data = randomBytes(4096);
    const out = await s3.send(
      withFenceHeader(
        new PutObjectCommand({ Bucket: bucket, Key: "bin/buffer.bin", Body: data }),
        all.fencingToken,
      ),
    );
    expect(out.ETag).toBe(`"${md5Hex(data)}"`);
    expect(rec.last().requestHeaders["x-fence-token"]).toBe(all.fencingToken);
    expect(rec.last().headers["x-fence-token-accepted"]).toBe(String(all.token));
    const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: "bin/buffer.bin" }));
    expect((await bodyOf(got)).equals(data)).toBe(true);
    expect(got.ContentLength).toBe(4096);
  });

  it("PutObject with a stream body stores exactly the payload, never the chunk framing", async () => {
    const payload = Buffer.from("hello world");
    await s3.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: "stream/small.txt",
        Body: Readable.from([Buffer.from("hello "), Buffer.from("world")]),
        ContentLength: payload.length,
        Metadata: { "fence-token": all.fencingToken },
      }),
    );
    const sent = rec.last().requestHeaders;
    if (label === "default settings") {
      // What the field notes say the SDK sends for a stream: the aws-chunked trailer form.
      expect(sent["x-amz-content-sha256"]).toBe("STREAMING-UNSIGNED-PAYLOAD-TRAILER");
      expect(sent["x-amz-trailer"]).toBe("x-amz-checksum-crc32");
      expect(sent["x-amz-decoded-content-length"]).toBe(String(payload.length));
    } else {
      expect(sent["x-amz-content-sha256"]).toBe("UNSIGNED-PAYLOAD");
      expect(sent["x-amz-trailer"]).toBeUndefined();
    }
    expect(rec.last().headers["x-fence-token-accepted"]).toBe(String(all.token));
    const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: "stream/small.txt" }));
    const stored = await bodyOf(got);
    expect(stored.toString("latin1")).toBe("hello world");
    expect(got.ContentLength).toBe(11);
    expect(got.ETag).toBe(`"${md5Hex(payload)}"`);
    expect(got.ContentEncoding).toBeUndefined();
  });

  it("PutObject with a ~5 MiB stream body", async () => {
    const data = randomBytes(5 * 1024 * 1024 + 123);
    await s3.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: "stream/big.bin",
        Body: chunkedStream(data, 64 * 1024 + 7),
        ContentLength: data.length,
        Metadata: { "fence-token": all.fencingToken },
      }),
    );
    const head = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: "stream/big.bin" }));
    expect(head.ContentLength).toBe(data.length);
    expect(head.ETag).toBe(`"${md5Hex(data)}"`);
    const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: "stream/big.bin" }));
    const stored = await bodyOf(got);
    expect(stored.length).toBe(data.length);
    expect(md5Hex(stored)).toBe(md5Hex(data));
  });

  it("GetObject with ranges", async () => {
    await s3.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: "range.txt",
        Body: "0123456789",
        Metadata: { "fence-token": all.fencingToken },
      }),
    );
    const first = await s3.send(
      new GetObjectCommand({ Bucket: bucket, Key: "range.txt", Range: "bytes=0-4" }),
    );
    expect(first.$metadata.httpStatusCode).toBe(206);
    expect((await bodyOf(first)).toString()).toBe("01234");
    expect(first.ContentRange).toBe("bytes 0-4/10");
    expect(first.ContentLength).toBe(5);

    const suffix = await s3.send(
      new GetObjectCommand({ Bucket: bucket, Key: "range.txt", Range: "bytes=-3" }),
    );
    expect(suffix.$metadata.httpStatusCode).toBe(206);
    expect((await bodyOf(suffix)).toString()).toBe("789");
    expect(suffix.ContentRange).toBe("bytes 7-9/10");

    const open = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: "range.txt", Range: "bytes=5-" }));
    expect(open.$metadata.httpStatusCode).toBe(206);
    expect((await bodyOf(open)).toString()).toBe("56789");
    expect(open.ContentRange).toBe("bytes 5-9/10");

    const whole = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: "range.txt" }));
    expect(whole.$metadata.httpStatusCode).toBe(200);
    expect((await bodyOf(whole)).toString()).toBe("0123456789");
    expect(whole.AcceptRanges).toBe("bytes");

    await expectS3Failure(
      rec,
      s3.send(new GetObjectCommand({ Bucket: bucket, Key: "range.txt", Range: "bytes=20-30" })),
      "InvalidRange",
      416,
    );
  });

  it("ListObjectsV2 with prefix, delimiter, max-keys and continuation", async () => {
    const keys = ["list/a/1", "list/a/2", "list/a/3", "list/b/1", "list/c", "list/d", "list/e"];
    for (const Key of keys) {
      await s3.send(
        new PutObjectCommand({
          Bucket: bucket,
          Key,
          Body: Key,
          Metadata: { "fence-token": all.fencingToken },
        }),
      );
    }
    const byPrefix = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: "list/a/" }));
    expect(byPrefix.Contents?.map((o) => o.Key)).toEqual(["list/a/1", "list/a/2", "list/a/3"]);
    expect(byPrefix.KeyCount).toBe(3);
    expect(byPrefix.IsTruncated).toBe(false);
    expect(byPrefix.Contents?.[0]?.Size).toBe("list/a/1".length);
    expect(byPrefix.Contents?.[0]?.ETag).toBe(`"${md5Hex("list/a/1")}"`);

    const delimited = await s3.send(
      new ListObjectsV2Command({ Bucket: bucket, Prefix: "list/", Delimiter: "/" }),
    );
    expect(delimited.Contents?.map((o) => o.Key)).toEqual(["list/c", "list/d", "list/e"]);
    expect(delimited.CommonPrefixes?.map((p) => p.Prefix)).toEqual(["list/a/", "list/b/"]);

    const pages: ListObjectsV2CommandOutput[] = [];
    let token: string | undefined;
    do {
      const page = await s3.send(
        new ListObjectsV2Command({ Bucket: bucket, Prefix: "list/", MaxKeys: 2, ContinuationToken: token }),
      );
      pages.push(page);
      token = page.NextContinuationToken;
      if (page.IsTruncated) expect(token).toBeTruthy();
      else expect(token).toBeUndefined();
    } while (token && pages.length < 10);
    expect(pages.map((p) => p.Contents?.length ?? 0)).toEqual([2, 2, 2, 1]);
    expect(pages.flatMap((p) => p.Contents?.map((o) => o.Key) ?? [])).toEqual(keys);
    expect(pages[0]?.MaxKeys).toBe(2);

    // Delimiter and max-keys together: common prefixes count towards the page.
    const mixed1 = await s3.send(
      new ListObjectsV2Command({ Bucket: bucket, Prefix: "list/", Delimiter: "/", MaxKeys: 3 }),
    );
    expect(mixed1.CommonPrefixes?.map((p) => p.Prefix)).toEqual(["list/a/", "list/b/"]);
    expect(mixed1.Contents?.map((o) => o.Key)).toEqual(["list/c"]);
    expect(mixed1.IsTruncated).toBe(true);
    const mixed2 = await s3.send(
      new ListObjectsV2Command({
        Bucket: bucket,
        Prefix: "list/",
        Delimiter: "/",
        MaxKeys: 3,
        ContinuationToken: mixed1.NextContinuationToken,
      }),
    );
    expect(mixed2.Contents?.map((o) => o.Key)).toEqual(["list/d", "list/e"]);
    expect(mixed2.CommonPrefixes ?? []).toEqual([]);
    expect(mixed2.IsTruncated).toBe(false);
  });

  it("DeleteObject is fenced", async () => {
    await expectS3Failure(
      rec,
      s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: "range.txt" })),
      "FencingTokenRequired",
      428,
    );
    // The refused delete changed nothing.
    const still = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: "range.txt" }));
    expect((await bodyOf(still)).toString()).toBe("0123456789");

    const del = await s3.send(
      withFenceHeader(new DeleteObjectCommand({ Bucket: bucket, Key: "range.txt" }), all.fencingToken),
    );
    expect(del.$metadata.httpStatusCode).toBe(204);
    expect(rec.last().headers["x-fence-token-accepted"]).toBe(String(all.token));
    await expectS3Failure(
      rec,
      s3.send(new GetObjectCommand({ Bucket: bucket, Key: "range.txt" })),
      "NoSuchKey",
      404,
    );
  });

  it("NoSuchBucket and NoSuchKey", async () => {
    await expectS3Failure(
      rec,
      s3.send(new GetObjectCommand({ Bucket: bucket, Key: "no/such/key" })),
      "NoSuchKey",
      404,
    );
    const headMissing = await failure(s3.send(new HeadObjectCommand({ Bucket: bucket, Key: "no/such/key" })));
    expect(headMissing.$metadata.httpStatusCode).toBe(404);
    expect(rec.last().headers["x-amz-request-id"]).toMatch(/\S/);
    await expectS3Failure(
      rec,
      s3.send(new GetObjectCommand({ Bucket: `${bucket}-missing`, Key: "k" })),
      "NoSuchBucket",
      404,
    );
    await expectS3Failure(
      rec,
      s3.send(new ListObjectsV2Command({ Bucket: `${bucket}-missing` })),
      "NoSuchBucket",
      404,
    );
    const other = await lease(`${bucket}-missing`, { key: "k" });
    await expectS3Failure(
      rec,
      s3.send(
        new PutObjectCommand({
          Bucket: `${bucket}-missing`,
          Key: "k",
          Body: "x",
          Metadata: { "fence-token": other.fencingToken },
        }),
      ),
      "NoSuchBucket",
      404,
    );
    const headBucket = await failure(s3.send(new HeadBucketCommand({ Bucket: `${bucket}-missing` })));
    expect(headBucket.$metadata.httpStatusCode).toBe(404);
    expect(rec.last().headers["x-amz-request-id"]).toMatch(/\S/);
  });

  it("DeleteBucket refuses a non-empty bucket, then deletes it once empty", async () => {
    await expectS3Failure(rec, s3.send(new DeleteBucketCommand({ Bucket: bucket })), "BucketNotEmpty", 409);
    let listed = await s3.send(new ListObjectsV2Command({ Bucket: bucket }));
    expect(listed.KeyCount).toBeGreaterThan(0);
    for (const o of listed.Contents ?? []) {
      await s3.send(
        withFenceHeader(new DeleteObjectCommand({ Bucket: bucket, Key: o.Key }), all.fencingToken),
      );
    }
    listed = await s3.send(new ListObjectsV2Command({ Bucket: bucket }));
    expect(listed.KeyCount).toBe(0);
    const deleted = await s3.send(new DeleteBucketCommand({ Bucket: bucket }));
    expect(deleted.$metadata.httpStatusCode).toBe(204);
    const buckets = await s3.send(new ListBucketsCommand({}));
    expect(buckets.Buckets?.map((b) => b.Name) ?? []).not.toContain(bucket);
    await expectS3Failure(rec, s3.send(new DeleteBucketCommand({ Bucket: bucket })), "NoSuchBucket", 404);
  });

  it("every response carried x-amz-request-id", () => {
    expect(rec.seen.length).toBeGreaterThan(20);
    for (const s of rec.seen) expect(s.headers["x-amz-request-id"], `${s.method} ${s.path}`).toMatch(/\S/);
  });
});

describe("fencing through the SDK (required policy)", () => {
  const bucket = "fenced";
  let rec: Recorded;
  let s3: S3Client;

  beforeAll(async () => {
    rec = sdkClient(gw.url);
    s3 = rec.client;
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    await s3.send(new CreateBucketCommand({ Bucket: "fenced-other" }));
  });

  const put = (Key: string, Body: string, token?: string, b = bucket) =>
    s3.send(
      new PutObjectCommand({
        Bucket: b,
        Key,
        Body,
        ...(token !== undefined ? { Metadata: { "fence-token": token } } : {}),
      }),
    );
  const read = async (Key: string) =>
    (await bodyOf(await s3.send(new GetObjectCommand({ Bucket: bucket, Key })))).toString();

  it("refuses a write without a token: FencingTokenRequired 428", async () => {
    await expectS3Failure(rec, put("nt", "x"), "FencingTokenRequired", 428);
    await expectS3Failure(
      rec,
      s3.send(new GetObjectCommand({ Bucket: bucket, Key: "nt" })),
      "NoSuchKey",
      404,
    );
  });

  it("accepts a write with the lease's token and returns x-fence-token-accepted", async () => {
    const l = await lease(bucket, { key: "acc" });
    await put("acc", "v1", l.fencingToken);
    expect(rec.last().headers["x-fence-token-accepted"]).toBe(String(l.token));
    expect(await read("acc")).toBe("v1");
    await gw.leases.release(l.leaseId);
  });

  it("refuses tampered, forged, truncated and garbage tokens: InvalidFencingToken 403", async () => {
    const l = await lease(bucket, { key: "inv" });
    await put("inv", "original", l.fencingToken);
    const [version, keyId, payload, mac] = l.fencingToken.split(".") as [string, string, string, string];
    // Tampered: the claims say another token number; the MAC no longer matches.
    const claims = JSON.parse(Buffer.from(payload, "base64url").toString()) as Record<string, unknown>;
    const raised = Buffer.from(JSON.stringify({ ...claims, t: l.token + 1000 })).toString("base64url");
    const tampered = [version, keyId, raised, mac].join(".");
    // One character of the MAC changed (not the last: its low bits are padding in base64url).
    const changed = l.fencingToken.at(-2) === "A" ? "B" : "A";
    const flipped = `${l.fencingToken.slice(0, -2)}${changed}${l.fencingToken.slice(-1)}`;
    const forgedSameId = signFencingToken(
      { leaseId: l.leaseId, token: l.token, bucket, key: "inv" },
      { id: keyId, secret: randomBytes(32) },
    );
    const forgedOtherId = signFencingToken(
      { leaseId: l.leaseId, token: l.token, bucket, key: "inv" },
      { id: "attacker", secret: randomBytes(32) },
    );
    const truncated = l.fencingToken.slice(0, l.fencingToken.length - 10);
    const cases = { tampered, flipped, forgedSameId, forgedOtherId, truncated, garbage: "not-a-token" };
    for (const [name, token] of Object.entries(cases)) {
      expect(token, name).not.toBe(l.fencingToken);
      const { raw } = await expectS3Failure(rec, put("inv", `by ${name}`, token), "InvalidFencingToken", 403);
      expect(raw.headers["x-fence-token-accepted"]).toBeUndefined();
      // Through the header too.
      await expectS3Failure(
        rec,
        s3.send(withFenceHeader(new PutObjectCommand({ Bucket: bucket, Key: "inv", Body: "h" }), token)),
        "InvalidFencingToken",
        403,
      );
    }
    expect(await read("inv")).toBe("original");
    await gw.leases.release(l.leaseId);
  });

  it("refuses a token used outside its lease's scope: FencingTokenScopeMismatch 403", async () => {
    const keyLease = await lease(bucket, { key: "scope/one" });
    await expectS3Failure(
      rec,
      put("scope/two", "x", keyLease.fencingToken),
      "FencingTokenScopeMismatch",
      403,
    );
    // Same key name, another bucket.
    await expectS3Failure(
      rec,
      put("scope/one", "x", keyLease.fencingToken, "fenced-other"),
      "FencingTokenScopeMismatch",
      403,
    );
    const prefixLease = await lease(bucket, { prefix: "pre/" });
    await put("pre/inside", "ok", prefixLease.fencingToken);
    expect(rec.last().headers["x-fence-token-accepted"]).toBe(String(prefixLease.token));
    await expectS3Failure(
      rec,
      put("prefixed", "x", prefixLease.fencingToken),
      "FencingTokenScopeMismatch",
      403,
    );
    await expectS3Failure(
      rec,
      put("other/pre/x", "x", prefixLease.fencingToken),
      "FencingTokenScopeMismatch",
      403,
    );
    await expectS3Failure(
      rec,
      s3.send(
        withFenceHeader(
          new DeleteObjectCommand({ Bucket: bucket, Key: "scope/two" }),
          prefixLease.fencingToken,
        ),
      ),
      "FencingTokenScopeMismatch",
      403,
    );
    await expectS3Failure(
      rec,
      s3.send(new GetObjectCommand({ Bucket: bucket, Key: "scope/two" })),
      "NoSuchKey",
      404,
    );
    await gw.leases.release(keyLease.leaseId);
    await gw.leases.release(prefixLease.leaseId);
  });

  it("refuses a superseded lease's token: StaleFencingToken 409 with x-fence-highest-token", async () => {
    const a = await lease(bucket, { key: "stale" });
    await put("stale", "by a", a.fencingToken);
    await gw.leases.release(a.leaseId);
    const b = await lease(bucket, { key: "stale" });
    expect(b.token).toBeGreaterThan(a.token);
    await put("stale", "by b", b.fencingToken);
    const { raw } = await expectS3Failure(
      rec,
      put("stale", "late write by a", a.fencingToken),
      "StaleFencingToken",
      409,
    );
    expect(raw.headers["x-fence-highest-token"]).toBe(String(b.token));
    expect(await read("stale")).toBe("by b");
    // A fenced delete with the old token is refused the same way.
    const del = await expectS3Failure(
      rec,
      s3.send(withFenceHeader(new DeleteObjectCommand({ Bucket: bucket, Key: "stale" }), a.fencingToken)),
      "StaleFencingToken",
      409,
    );
    expect(del.raw.headers["x-fence-highest-token"]).toBe(String(b.token));
    expect(await read("stale")).toBe("by b");
    await gw.leases.release(b.leaseId);
  });

  it("refuses the old token even before the newer lease has written", async () => {
    const a = await lease(bucket, { key: "stale2" });
    await gw.leases.release(a.leaseId);
    const b = await lease(bucket, { key: "stale2" });
    await expectS3Failure(rec, put("stale2", "by a", a.fencingToken), "StaleFencingToken", 409);
    await expectS3Failure(
      rec,
      s3.send(new GetObjectCommand({ Bucket: bucket, Key: "stale2" })),
      "NoSuchKey",
      404,
    );
    await gw.leases.release(b.leaseId);
  });

  it("refuses a write after the lease expired, nobody having taken it since: LeaseExpired 409", async () => {
    const l = await lease(bucket, { key: "expiring" }, 1000);
    await put("expiring", "in time", l.fencingToken);
    await sleep(Math.max(0, Date.parse(l.expiresAt) - Date.now()) + 300);
    const { raw } = await expectS3Failure(
      rec,
      put("expiring", "too late", l.fencingToken),
      "LeaseExpired",
      409,
    );
    expect(raw.headers["x-fence-highest-token"]).toBe(String(l.token));
    expect(await read("expiring")).toBe("in time");
    const listed = await gw.leases.list({ bucket });
    expect(listed.leases.map((x) => x.leaseId)).not.toContain(l.leaseId);
  });

  it("refuses a write with a released lease's token", async () => {
    const l = await lease(bucket, { key: "released" });
    await put("released", "v1", l.fencingToken);
    await gw.leases.release(l.leaseId);
    await expectS3Failure(rec, put("released", "v2", l.fencingToken), "LeaseExpired", 409);
    expect(await read("released")).toBe("v1");
  });

  it("refuses two different tokens on one request", async () => {
    const l1 = await lease(bucket, { key: "two-tokens" });
    const l2 = await lease(bucket, { key: "two-tokens-b" });
    const cmd = withFenceHeader(
      new PutObjectCommand({
        Bucket: bucket,
        Key: "two-tokens",
        Body: "x",
        Metadata: { "fence-token": l2.fencingToken },
      }),
      l1.fencingToken,
    );
    await expectS3Failure(rec, s3.send(cmd), "InvalidFencingToken", 403);
    await gw.leases.release(l1.leaseId);
    await gw.leases.release(l2.leaseId);
  });

  it("records every accepted and refused write in the audit log", async () => {
    const key = "audited";
    const l = await lease(bucket, { key });
    const ids: string[] = [];
    await put(key, "a1", l.fencingToken);
    ids.push(rec.last().headers["x-amz-request-id"]!);
    await expectS3Failure(rec, put(key, "no token"), "FencingTokenRequired", 428);
    ids.push(rec.last().headers["x-amz-request-id"]!);
    await expectS3Failure(rec, put(key, "garbage", "garbage"), "InvalidFencingToken", 403);
    ids.push(rec.last().headers["x-amz-request-id"]!);
    await gw.leases.release(l.leaseId);
    const newer = await lease(bucket, { key });
    await s3.send(withFenceHeader(new DeleteObjectCommand({ Bucket: bucket, Key: key }), newer.fencingToken));
    ids.push(rec.last().headers["x-amz-request-id"]!);
    await expectS3Failure(rec, put(key, "stale", l.fencingToken), "StaleFencingToken", 409);
    ids.push(rec.last().headers["x-amz-request-id"]!);

    const { records } = (await gw.leases.audit({ bucket, key, limit: "1000" })) as { records: AuditRecord[] };
    const writes = records.filter((r) => r.op === "PutObject" || r.op === "DeleteObject");
    expect(writes.map((r) => r.requestId)).toEqual(ids);
    const common = { bucket, key, principal: CREDENTIALS.accessKeyId, gateway: gw.gatewayId };
    expect(writes[0]).toMatchObject({
      ...common,
      op: "PutObject",
      decision: "accepted",
      reason: null,
      token: l.token,
      leaseId: l.leaseId,
      highestToken: l.token,
    });
    expect(writes[1]).toMatchObject({
      ...common,
      op: "PutObject",
      decision: "rejected",
      reason: "FencingTokenRequired",
      token: null,
      leaseId: null,
      highestToken: l.token,
    });
    expect(writes[2]).toMatchObject({
      ...common,
      op: "PutObject",
      decision: "rejected",
      reason: "InvalidFencingToken",
      token: null,
      leaseId: null,
    });
    expect(writes[3]).toMatchObject({
      ...common,
      op: "DeleteObject",
      decision: "accepted",
      reason: null,
      token: newer.token,
      leaseId: newer.leaseId,
      highestToken: newer.token,
    });
    expect(writes[4]).toMatchObject({
      ...common,
      op: "PutObject",
      decision: "rejected",
      reason: "StaleFencingToken",
      token: l.token,
      leaseId: l.leaseId,
      highestToken: newer.token,
    });
    for (const r of writes) {
      expect(typeof r.seq).toBe("number");
      expect(Number.isNaN(Date.parse(r.time))).toBe(false);
    }
    const seqs = writes.map((r) => r.seq);
    expect([...seqs].sort((x, y) => x - y)).toEqual(seqs);
    // Lease events are there too.
    const leaseOps = records.filter((r) => r.leaseId === l.leaseId).map((r) => r.op);
    expect(leaseOps).toEqual(expect.arrayContaining(["LeaseAcquired", "LeaseReleased"]));
    await gw.leases.release(newer.leaseId);
  });
});

describe("fencing policy optional", () => {
  let opt: TestGateway;
  let rec: Recorded;
  const bucket = "optional";

  beforeAll(async () => {
    opt = await startTestGateway({ env: { FENCEGATE_FENCING: "optional" } });
    rec = sdkClient(opt.url);
    await rec.client.send(new CreateBucketCommand({ Bucket: bucket }));
  });

  afterAll(async () => {
    await opt?.stop();
  });

  it("accepts a tokenless write when no lease covers the key", async () => {
    const out = await rec.client.send(new PutObjectCommand({ Bucket: bucket, Key: "free", Body: "free" }));
    expect(out.ETag).toBe(`"${md5Hex("free")}"`);
    expect(rec.last().headers["x-fence-token-accepted"]).toBeUndefined();
    const del = await rec.client.send(new DeleteObjectCommand({ Bucket: bucket, Key: "free" }));
    expect(del.$metadata.httpStatusCode).toBe(204);
  });

  it("refuses a tokenless write when an active lease covers the key: FencingTokenRequired 428", async () => {
    const key = await opt.leases.acquire({ bucket, key: "held", ttlMs: 30_000 });
    await expectS3Failure(
      rec,
      rec.client.send(new PutObjectCommand({ Bucket: bucket, Key: "held", Body: "x" })),
      "FencingTokenRequired",
      428,
    );
    const prefix = await opt.leases.acquire({ bucket, prefix: "dir/", ttlMs: 30_000 });
    await expectS3Failure(
      rec,
      rec.client.send(new PutObjectCommand({ Bucket: bucket, Key: "dir/file", Body: "x" })),
      "FencingTokenRequired",
      428,
    );
    await expectS3Failure(
      rec,
      rec.client.send(new DeleteObjectCommand({ Bucket: bucket, Key: "dir/file" })),
      "FencingTokenRequired",
      428,
    );
    // With the token it goes through.
    await rec.client.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: "held",
        Body: "x",
        Metadata: { "fence-token": key.fencingToken },
      }),
    );
    expect(rec.last().headers["x-fence-token-accepted"]).toBe(String(key.token));
    // Once released, tokenless writes are accepted again.
    await opt.leases.release(prefix.leaseId);
    await rec.client.send(new PutObjectCommand({ Bucket: bucket, Key: "dir/file", Body: "free again" }));
    await opt.leases.release(key.leaseId);
  });

  it("still checks a write that carries a token", async () => {
    await expectS3Failure(
      rec,
      rec.client.send(
        new PutObjectCommand({
          Bucket: bucket,
          Key: "checked",
          Body: "x",
          Metadata: { "fence-token": "garbage" },
        }),
      ),
      "InvalidFencingToken",
      403,
    );
    const l = await opt.leases.acquire({ bucket, key: "checked", ttlMs: 30_000 });
    await expectS3Failure(
      rec,
      rec.client.send(
        new PutObjectCommand({
          Bucket: bucket,
          Key: "elsewhere",
          Body: "x",
          Metadata: { "fence-token": l.fencingToken },
        }),
      ),
      "FencingTokenScopeMismatch",
      403,
    );
    await opt.leases.release(l.leaseId);
    await expectS3Failure(
      rec,
      rec.client.send(
        new PutObjectCommand({
          Bucket: bucket,
          Key: "checked",
          Body: "x",
          Metadata: { "fence-token": l.fencingToken },
        }),
      ),
      "LeaseExpired",
      409,
    );
    await expectS3Failure(
      rec,
      rec.client.send(new GetObjectCommand({ Bucket: bucket, Key: "checked" })),
      "NoSuchKey",
      404,
    );
  });
});
