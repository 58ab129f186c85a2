import { readdirSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Lease } from "../../src/client/lease-client.js";
import { digest, md5Hex, sha256Hex } from "../support/digest.js";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import {
  expectS3Error,
  objectPath,
  presign,
  type RawResponse,
  rawRequest,
  signedRequest,
  signRequest,
} from "../support/signed-http.js";

/**
 * Raw HTTP requests signed with @smithy/signature-v4: signed payloads, UNSIGNED-PAYLOAD,
 * presigned URLs carrying the fencing token, hand-built aws-chunked bodies and digests.
 */

let gw: TestGateway;
let lease: Lease;
const bucket = "raw";

beforeAll(async () => {
  gw = await startTestGateway();
  const created = await signedRequest(gw.url, { method: "PUT", path: `/${bucket}` });
  expect(created.status).toBe(200);
  lease = await gw.leases.acquire({ bucket, prefix: "", ttlMs: 60_000, owner: "raw-test" });
});

afterAll(async () => {
  await gw?.stop();
});

const md5B64 = (b: Buffer | string) => digest("md5", b, "base64");

async function getObject(key: string): Promise<RawResponse> {
  return signedRequest(gw.url, { method: "GET", path: objectPath(bucket, key) });
}

async function putWithToken(
  key: string,
  body: string | Buffer,
  extra: Partial<Parameters<typeof signedRequest>[1]> = {},
): Promise<RawResponse> {
  return signedRequest(gw.url, {
    method: "PUT",
    path: objectPath(bucket, key),
    body,
    ...extra,
    headers: { "x-fence-token": lease.fencingToken, ...extra.headers },
  });
}

/** Number of blob files in the fs backend (committed objects, plus anything leaked). */
function blobFiles(): number {
  const root = join(gw.dataDir, "blobs");
  let n = 0;
  // Every shard directory, and tmp/ (a refused write must not leave a temp file either).
  for (const dir of readdirSync(root)) n += readdirSync(join(root, dir)).length;
  return n;
}

describe("signed payloads", () => {
  it("accepts a PUT whose hex x-amz-content-sha256 matches the body", async () => {
    const res = await putWithToken("signed.txt", "signed body");
    expect(res.status).toBe(200);
    expect(res.headers.etag).toBe(`"${md5Hex("signed body")}"`);
    expect(res.headers["x-fence-token-accepted"]).toBe(String(lease.token));
    expect(res.headers["x-amz-request-id"]).toMatch(/\S/);
    const got = await getObject("signed.txt");
    expect(got.status).toBe(200);
    expect(got.text).toBe("signed body");
  });

  it("refuses a payload hash mismatch with XAmzContentSHA256Mismatch and leaves the object unchanged", async () => {
    const blobs = blobFiles();
    const res = await putWithToken("signed.txt", "tampered body", { payloadHash: sha256Hex("other body") });
    expectS3Error(res, "XAmzContentSHA256Mismatch", 400);
    const got = await getObject("signed.txt");
    expect(got.text).toBe("signed body");
    expect(got.headers.etag).toBe(`"${md5Hex("signed body")}"`);
    expect(blobFiles()).toBe(blobs);
    // Nor is a new object created by a mismatching first write.
    const fresh = await putWithToken("mismatch-new.txt", "abc", { payloadHash: sha256Hex("abd") });
    expectS3Error(fresh, "XAmzContentSHA256Mismatch", 400);
    expectS3Error(await getObject("mismatch-new.txt"), "NoSuchKey", 404);
  });

  it("accepts UNSIGNED-PAYLOAD", async () => {
    const res = await putWithToken("unsigned.txt", "unsigned body", { payloadHash: "UNSIGNED-PAYLOAD" });
    expect(res.status).toBe(200);
    expect(res.headers["x-fence-token-accepted"]).toBe(String(lease.token));
    expect((await getObject("unsigned.txt")).text).toBe("unsigned body");
  });

  it("refuses a wrong Content-MD5 with BadDigest and stores nothing", async () => {
    const blobs = blobFiles();
    const res = await putWithToken("md5.txt", "md5 body", { headers: { "content-md5": md5B64("other") } });
    expectS3Error(res, "BadDigest", 400);
    expectS3Error(await getObject("md5.txt"), "NoSuchKey", 404);
    expect(blobFiles()).toBe(blobs);
    const ok = await putWithToken("md5.txt", "md5 body", { headers: { "content-md5": md5B64("md5 body") } });
    expect(ok.status).toBe(200);
    expect((await getObject("md5.txt")).text).toBe("md5 body");
  });

  it("refuses a malformed Content-MD5 with InvalidDigest", async () => {
    const res = await putWithToken("md5-bad.txt", "x", { headers: { "content-md5": "not-base64-md5" } });
    expectS3Error(res, "InvalidDigest", 400);
    expectS3Error(await getObject("md5-bad.txt"), "NoSuchKey", 404);
  });

  it("refuses an empty body whose header claims the hash of another body", async () => {
    const res = await putWithToken("hash-empty.txt", "", { payloadHash: sha256Hex("not empty") });
    expectS3Error(res, "XAmzContentSHA256Mismatch", 400);
  });

  it("answers a DeleteObject 204 without Content-Length (a 204 carries none), a PutObject with 0", async () => {
    const put = await putWithToken("bodiless.txt", "x");
    expect(put.headers["content-length"]).toBe("0");
    const res = await signedRequest(gw.url, {
      method: "DELETE",
      path: objectPath(bucket, "bodiless.txt"),
      headers: { "x-fence-token": lease.fencingToken },
    });
    expect(res.status).toBe(204);
    expect(res.headers["content-length"]).toBeUndefined();
    expect(res.headers["transfer-encoding"]).toBeUndefined();
  });

  it("accepts a signed header sent twice: its canonical value joins the two with a bare comma", async () => {
    // SigV4 signs a repeated header as its values joined by "," (no space); the signer here signs
    // the joined value, and the request carries the header twice, as a client with a list sends it.
    const signed = await signRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "repeated-header.txt"),
      body: "twice",
      headers: { "x-fence-token": lease.fencingToken, "x-amz-meta-tag": "one,two" },
    });
    const headers: Record<string, string | string[]> = {
      ...signed.headers,
      "x-amz-meta-tag": ["one", "two"],
    };
    const res = await rawRequest(gw.url, { ...signed, headers });
    expect({ status: res.status, body: res.text.slice(0, 300) }).toMatchObject({ status: 200 });
    const got = await getObject("repeated-header.txt");
    expect(got.text).toBe("twice");
  });
});

describe("presigned URLs", () => {
  it("accepts a presigned PUT with x-fence-token in the signed query", async () => {
    const path = await presign(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "presigned.txt"),
      query: { "x-fence-token": lease.fencingToken },
    });
    expect(path).toContain("x-fence-token=");
    expect(path).toContain("X-Amz-Signature=");
    const res = await rawRequest(gw.url, {
      method: "PUT",
      path,
      headers: { "content-length": "15" },
      body: "presigned body!",
    });
    expect({ status: res.status, body: res.text }).toEqual({ status: 200, body: "" });
    expect(res.headers["x-fence-token-accepted"]).toBe(String(lease.token));
    expect((await getObject("presigned.txt")).text).toBe("presigned body!");
  });

  it("refuses a presigned PUT whose x-fence-token was added after signing", async () => {
    const path = await presign(gw.url, { method: "PUT", path: objectPath(bucket, "presigned-added.txt") });
    const res = await rawRequest(gw.url, {
      method: "PUT",
      path: `${path}&x-fence-token=${encodeURIComponent(lease.fencingToken)}`,
      headers: { "content-length": "1" },
      body: "x",
    });
    expectS3Error(res, "SignatureDoesNotMatch", 403);
    expectS3Error(await getObject("presigned-added.txt"), "NoSuchKey", 404);
  });

  it("refuses a presigned PUT without a token: FencingTokenRequired", async () => {
    const path = await presign(gw.url, { method: "PUT", path: objectPath(bucket, "presigned-none.txt") });
    const res = await rawRequest(gw.url, {
      method: "PUT",
      path,
      headers: { "content-length": "1" },
      body: "x",
    });
    expectS3Error(res, "FencingTokenRequired", 428);
  });

  it("accepts the SDK's empty-body CRC32 in a presigned PUT's query", async () => {
    const path = await presign(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "presigned-crc.txt"),
      query: { "x-fence-token": lease.fencingToken, "x-amz-checksum-crc32": "AAAAAA==" },
    });
    const res = await rawRequest(gw.url, {
      method: "PUT",
      path,
      headers: { "content-length": "5" },
      body: "hello",
    });
    expect(res.status).toBe(200);
    expect((await getObject("presigned-crc.txt")).text).toBe("hello");
  });

  it("serves a presigned GET", async () => {
    const path = await presign(gw.url, { method: "GET", path: objectPath(bucket, "signed.txt") });
    const res = await rawRequest(gw.url, { method: "GET", path });
    expect(res.status).toBe(200);
    expect(res.text).toBe("signed body");
    // The same URL with a different key in the path no longer matches its signature.
    const other = await rawRequest(gw.url, {
      method: "GET",
      path: path.replace("signed.txt", "unsigned.txt"),
    });
    expectS3Error(other, "SignatureDoesNotMatch", 403);
  });
});

/** Builds an aws-chunked body: the chunks, then a final 0-size chunk and the trailers. */
function awsChunked(chunks: string[], trailers: Record<string, string>): Buffer {
  let out = "";
  for (const c of chunks) out += `${Buffer.byteLength(c).toString(16)}\r\n${c}\r\n`;
  out += "0\r\n";
  for (const [k, v] of Object.entries(trailers)) out += `${k}:${v}\r\n`;
  out += "\r\n";
  return Buffer.from(out);
}

describe("aws-chunked STREAMING-UNSIGNED-PAYLOAD-TRAILER", () => {
  const chunkedHeaders = (decodedLength: number, bodyLength: number) => ({
    "content-encoding": "aws-chunked",
    "x-amz-decoded-content-length": String(decodedLength),
    "x-amz-trailer": "x-amz-checksum-crc32",
    "content-length": String(bodyLength),
    "x-fence-token": lease.fencingToken,
  });

  it("stores exactly the decoded payload when the CRC32 trailer matches", async () => {
    // CRC32("hello world") = DUoRhQ== (field notes).
    const body = awsChunked(["hello ", "world"], { "x-amz-checksum-crc32": "DUoRhQ==" });
    const res = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "chunked-ok.txt"),
      body,
      payloadHash: "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
      headers: chunkedHeaders(11, body.length),
    });
    expect({ status: res.status, body: res.text }).toEqual({ status: 200, body: "" });
    const got = await getObject("chunked-ok.txt");
    expect(got.body.toString("latin1")).toBe("hello world");
    expect(got.headers["content-length"]).toBe("11");
    expect(got.headers["content-encoding"]).toBeUndefined();
  });

  it("refuses a wrong CRC32 trailer with BadDigest and stores nothing", async () => {
    const blobs = blobFiles();
    const body = awsChunked(["hello ", "world"], { "x-amz-checksum-crc32": "AAAAAA==" });
    const res = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "chunked-bad.txt"),
      body,
      payloadHash: "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
      headers: chunkedHeaders(11, body.length),
    });
    expectS3Error(res, "BadDigest", 400);
    expectS3Error(await getObject("chunked-bad.txt"), "NoSuchKey", 404);
    expect(blobFiles()).toBe(blobs);
  });

  it("refuses a wrong CRC32 trailer over an existing object and keeps the old version", async () => {
    const body = awsChunked(["new ", "version"], { "x-amz-checksum-crc32": "AAAAAA==" });
    const res = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "chunked-ok.txt"),
      body,
      payloadHash: "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
      headers: chunkedHeaders(11, body.length),
    });
    expectS3Error(res, "BadDigest", 400);
    expect((await getObject("chunked-ok.txt")).text).toBe("hello world");
  });

  it("refuses a decoded length that disagrees with the chunks", async () => {
    const body = awsChunked(["hello ", "world"], { "x-amz-checksum-crc32": "DUoRhQ==" });
    const res = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "chunked-len.txt"),
      body,
      payloadHash: "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
      headers: chunkedHeaders(12, body.length),
    });
    expectS3Error(res, "IncompleteBody", 400);
    expectS3Error(await getObject("chunked-len.txt"), "NoSuchKey", 404);
  });

  it("refuses a body whose CRC32 header (not trailer) is wrong", async () => {
    const res = await putWithToken("crc-header.txt", "hello world", {
      headers: { "x-amz-checksum-crc32": "AAAAAA==", "x-amz-sdk-checksum-algorithm": "CRC32" },
    });
    expectS3Error(res, "BadDigest", 400);
    expectS3Error(await getObject("crc-header.txt"), "NoSuchKey", 404);
    const ok = await putWithToken("crc-header.txt", "hello world", {
      headers: { "x-amz-checksum-crc32": "DUoRhQ==", "x-amz-sdk-checksum-algorithm": "CRC32" },
    });
    expect(ok.status).toBe(200);
  });
});
