import { readdirSync } from "node:fs";
import { Agent, request as httpRequest } from "node:http";
import { connect } from "node:net";
import {
  CopyObjectCommand,
  CreateBucketCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from "@aws-sdk/client-s3";
import { NodeHttpHandler } from "@smithy/node-http-handler";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Lease } from "../../src/client/lease-client.js";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../support/gateway.js";
import {
  chunkSignerOf,
  expectS3Error,
  objectPath,
  rawRequest,
  signedChunkedBody,
  signRequest,
} from "../support/signed-http.js";

let gw: TestGateway;
let lease: Lease;
const bucket = "proto";

beforeAll(async () => {
  gw = await startTestGateway({
    env: { FENCEGATE_DOMAIN: "s3.test" },
    overrides: {
      credentials: [CREDENTIALS, { accessKeyId: "team-b", secretAccessKey: "team-b-secret-key" }],
    },
  });
  await gw.s3().send(new CreateBucketCommand({ Bucket: bucket }));
  lease = await gw.leases.acquire({ bucket, prefix: "", ttlMs: 600_000 });
});

afterAll(async () => {
  await gw?.stop();
});

/** A STREAMING-AWS4-HMAC-SHA256-PAYLOAD upload, as minio-go sends it: every chunk signed. */
async function signedChunkedPut(key: string, chunks: Buffer[], tamper = false) {
  const decodedLength = chunks.reduce((n, c) => n + c.length, 0);
  const framedLength = (data: Buffer) =>
    `${data.length.toString(16)};chunk-signature=${"0".repeat(64)}\r\n`.length + data.length + 2;
  const contentLength = [...chunks, Buffer.alloc(0)].reduce((n, c) => n + framedLength(c), 0);
  const req = await signRequest(gw.url, {
    method: "PUT",
    path: objectPath(bucket, key),
    payloadHash: "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
    headers: {
      "x-amz-decoded-content-length": String(decodedLength),
      "content-length": String(contentLength),
      "x-fence-token": lease.fencingToken,
    },
  });
  const { body } = signedChunkedBody(chunks, chunkSignerOf(req.headers ?? {}), {
    tamper: tamper ? (data) => Buffer.from(data.toString().toUpperCase()) : undefined,
  });
  return rawRequest(gw.url, { ...req, body });
}

describe("signed streaming payloads", () => {
  it("accepts an upload whose every chunk signature verifies and stores the decoded bytes", async () => {
    const res = await signedChunkedPut("chunked.txt", [
      Buffer.from("hello "),
      Buffer.from("signed "),
      Buffer.from("chunks"),
    ]);
    expect(res.status).toBe(200);
    expect(res.headers["x-fence-token-accepted"]).toBe(String(lease.token));
    const got = await gw.s3().send(new GetObjectCommand({ Bucket: bucket, Key: "chunked.txt" }));
    expect(await got.Body!.transformToString()).toBe("hello signed chunks");
  });

  it("refuses a tampered chunk with SignatureDoesNotMatch and stores nothing", async () => {
    const res = await signedChunkedPut("tampered.txt", [Buffer.from("abc"), Buffer.from("def")], true);
    expectS3Error(res, "SignatureDoesNotMatch", 403);
    const head = await gw
      .s3()
      .send(new HeadObjectCommand({ Bucket: bucket, Key: "tampered.txt" }))
      .catch((e) => e);
    expect(head.$metadata.httpStatusCode).toBe(404);
  });
});

describe("addressing and credentials", () => {
  it("serves virtual-hosted-style requests on the configured domain", async () => {
    const port = new URL(gw.url).port;
    const agent = new Agent({
      lookup: (_host, _opts, cb) =>
        cb(null, [{ address: "127.0.0.1", family: 4 }] as never, undefined as never),
    });
    const vh = new S3Client({
      endpoint: `http://s3.test:${port}`,
      region: "us-east-1",
      forcePathStyle: false,
      credentials: CREDENTIALS,
      maxAttempts: 1,
      requestHandler: new NodeHttpHandler({ httpAgent: agent }),
    });
    await vh.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: "vh/a.txt",
        Body: "virtual",
        Metadata: { "fence-token": lease.fencingToken },
      }),
    );
    const got = await vh.send(new GetObjectCommand({ Bucket: bucket, Key: "vh/a.txt" }));
    expect(await got.Body!.transformToString()).toBe("virtual");
    const list = await vh.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: "vh/" }));
    expect(list.Contents?.map((c) => c.Key)).toEqual(["vh/a.txt"]);
    // The lease API is not served on a bucket host: there the path is an object key.
    const res = await rawRequest(gw.url, {
      ...(await signRequest(gw.url, {
        method: "GET",
        path: "/_fence/v1/health",
        headers: { host: `${bucket}.s3.test:${port}` },
      })),
    });
    expect(res.status).toBe(404);
    expect(res.text).toContain("<Code>NoSuchKey</Code>");
    vh.destroy();
  });

  it("accepts every configured access key and audits the principal", async () => {
    const other = gw.s3({ credentials: { accessKeyId: "team-b", secretAccessKey: "team-b-secret-key" } });
    const res = await other.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: "by-team-b",
        Body: "b",
        Metadata: { "fence-token": lease.fencingToken },
      }),
    );
    const records = (await gw.leases.audit({ bucket, key: "by-team-b" })).records as Array<
      Record<string, unknown>
    >;
    expect(records.map((r) => r.principal)).toEqual(["team-b"]);
    expect(res.ETag).toBeDefined();
    const wrong = await gw
      .s3({ credentials: { accessKeyId: "team-b", secretAccessKey: "not-the-secret" } })
      .send(new HeadObjectCommand({ Bucket: bucket, Key: "by-team-b" }))
      .catch((e) => e);
    expect(wrong.$metadata.httpStatusCode).toBe(403);
  });
});

describe("metadata and listings", () => {
  it("stores non-ASCII user metadata as the bytes sent and returns them as they are", async () => {
    const s3 = gw.s3();
    await s3.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: "meta.txt",
        Body: "m",
        Metadata: { "fence-token": lease.fencingToken, city: "Zürich", note: "ça va" },
        ContentDisposition: 'attachment; filename="a.txt"',
        CacheControl: "no-cache",
        ContentLanguage: "de",
      }),
    );
    const head = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: "meta.txt" }));
    // The SDK sends the values' UTF-8 bytes and reads response headers as latin-1: the bytes it
    // reads back are the bytes it sent.
    const bytesOf = (v: string | undefined) => Buffer.from(v ?? "", "latin1").toString("utf8");
    expect(Object.keys(head.Metadata ?? {}).sort()).toEqual(["city", "note"]);
    expect(bytesOf(head.Metadata?.city)).toBe("Zürich");
    expect(bytesOf(head.Metadata?.note)).toBe("ça va");
    expect(head.ContentDisposition).toBe('attachment; filename="a.txt"');
    expect(head.CacheControl).toBe("no-cache");
    expect(head.ContentLanguage).toBe("de");
    const overridden = await s3.send(
      new GetObjectCommand({
        Bucket: bucket,
        Key: "meta.txt",
        ResponseContentType: "text/x-test",
        ResponseCacheControl: "max-age=5",
      }),
    );
    expect(overridden.ContentType).toBe("text/x-test");
    expect(overridden.CacheControl).toBe("max-age=5");
  });

  it("lists with start-after, fetch-owner, url encoding and a KeyCount that counts common prefixes", async () => {
    const s3 = gw.s3();
    for (const key of ["l/a b.txt", "l/dir1/x", "l/dir1/y", "l/dir2/z", "l/z.txt"]) {
      await s3.send(
        new PutObjectCommand({
          Bucket: bucket,
          Key: key,
          Body: key,
          Metadata: { "fence-token": lease.fencingToken },
        }),
      );
    }
    const grouped = await s3.send(
      new ListObjectsV2Command({ Bucket: bucket, Prefix: "l/", Delimiter: "/", FetchOwner: true }),
    );
    expect(grouped.Contents?.map((c) => c.Key)).toEqual(["l/a b.txt", "l/z.txt"]);
    expect(grouped.CommonPrefixes?.map((p) => p.Prefix)).toEqual(["l/dir1/", "l/dir2/"]);
    expect(grouped.KeyCount).toBe(4);
    expect(grouped.Contents?.[0]?.Owner?.DisplayName).toBe("fencegate");
    const after = await s3.send(
      new ListObjectsV2Command({ Bucket: bucket, Prefix: "l/", StartAfter: "l/dir1/y" }),
    );
    expect(after.Contents?.map((c) => c.Key)).toEqual(["l/dir2/z", "l/z.txt"]);
    const raw = await rawRequest(
      gw.url,
      await signRequest(gw.url, {
        method: "GET",
        path: `/${bucket}`,
        query: { "list-type": "2", prefix: "l/a", "encoding-type": "url" },
      }),
    );
    expect(raw.text).toContain("<Key>l/a%20b.txt</Key>");
    expect(raw.text).toContain("<EncodingType>url</EncodingType>");
    const v1 = await s3.send(
      new ListObjectsCommand({ Bucket: bucket, Prefix: "l/", Delimiter: "/", MaxKeys: 2 }),
    );
    expect(v1.IsTruncated).toBe(true);
    expect(v1.NextMarker).toBe("l/dir1/");
    const v1next = await s3.send(
      new ListObjectsCommand({ Bucket: bucket, Prefix: "l/", Delimiter: "/", Marker: v1.NextMarker }),
    );
    expect(v1next.CommonPrefixes?.map((p) => p.Prefix)).toEqual(["l/dir2/"]);
    expect(v1next.Contents?.map((c) => c.Key)).toEqual(["l/z.txt"]);
  });

  it("answers HEAD errors without a body", async () => {
    const res = await rawRequest(
      gw.url,
      await signRequest(gw.url, { method: "HEAD", path: objectPath(bucket, "missing") }),
    );
    expect(res.status).toBe(404);
    expect(res.body.length).toBe(0);
    expect(res.headers["x-amz-request-id"]).toMatch(/^[0-9A-F]{16}$/);
  });
});

describe("Expect: 100-continue", () => {
  /** Sends the headers, and the body only once the gateway answers 100 Continue. */
  async function expectContinuePut(
    key: string,
    body: string,
    token: string | null,
    extra: Record<string, string> = {},
  ) {
    const signed = await signRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, key),
      body,
      headers: { expect: "100-continue", ...(token ? { "x-fence-token": token } : {}), ...extra },
    });
    const url = new URL(gw.url);
    return new Promise<{ status: number; continued: boolean; text: string }>((resolve, reject) => {
      let continued = false;
      const req = httpRequest(
        {
          host: url.hostname,
          port: Number(url.port),
          method: "PUT",
          path: signed.path,
          headers: signed.headers,
          agent: false,
        },
        (res) => {
          let text = "";
          res.on("data", (d) => {
            text += d;
          });
          res.on("end", () => resolve({ status: res.statusCode ?? 0, continued, text }));
        },
      );
      req.on("continue", () => {
        continued = true;
        req.end(body);
      });
      req.on("error", reject);
      req.flushHeaders();
    });
  }

  it("refuses a write without asking for its body, and asks for the body of an accepted one", async () => {
    const refused = await expectContinuePut("expect.txt", "never sent", null);
    expect(refused).toMatchObject({ status: 428, continued: false });
    expect(refused.text).toContain("<Code>FencingTokenRequired</Code>");
    const accepted = await expectContinuePut("expect.txt", "sent after 100", lease.fencingToken);
    expect(accepted).toMatchObject({ status: 200, continued: true });
    const got = await gw.s3().send(new GetObjectCommand({ Bucket: bucket, Key: "expect.txt" }));
    expect(await got.Body!.transformToString()).toBe("sent after 100");
  });

  it("refuses a conditional write that cannot succeed without asking for its body", async () => {
    const refused = await expectContinuePut("expect.txt", "never sent", lease.fencingToken, {
      "if-none-match": "*",
    });
    expect(refused).toMatchObject({ status: 412, continued: false });
    const got = await gw.s3().send(new GetObjectCommand({ Bucket: bucket, Key: "expect.txt" }));
    expect(await got.Body!.transformToString()).toBe("sent after 100");
  });
});

describe("declared lengths", () => {
  it("refuses an object upload without Content-Length or chunked encoding with 411 MissingContentLength", async () => {
    const signed = await signRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "no-length.txt"),
      headers: { "x-fence-token": lease.fencingToken },
    });
    const url = new URL(gw.url);
    const head = [`PUT ${signed.path} HTTP/1.1`];
    for (const [k, v] of Object.entries(signed.headers as Record<string, string>)) {
      if (k.toLowerCase() !== "content-length") head.push(`${k}: ${v}`);
    }
    const response = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(url.port), url.hostname, () => {
        socket.write(`${head.join("\r\n")}\r\nconnection: close\r\n\r\n`);
      });
      let text = "";
      socket.on("data", (d) => {
        text += d;
      });
      socket.on("end", () => resolve(text));
      socket.on("error", reject);
    });
    expect(response).toMatch(/^HTTP\/1\.1 411 /);
    expect(response).toContain("<Code>MissingContentLength</Code>");
  });
});

describe("refusals that must not leak or fail", () => {
  it("answers bad response-* overrides with 400, not 500", async () => {
    await gw.s3().send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: "override.txt",
        Body: "o",
        Metadata: { "fence-token": lease.fencingToken },
      }),
    );
    const res = await rawRequest(
      gw.url,
      await signRequest(gw.url, {
        method: "GET",
        path: objectPath(bucket, "override.txt"),
        query: { "response-content-disposition": "a\nb" },
      }),
    );
    expectS3Error(res, "InvalidArgument", 400);
  });

  it("closes the source of every refused copy", async () => {
    const s3 = gw.s3();
    await s3.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: "copy-src.txt",
        Body: "src",
        Metadata: { "fence-token": lease.fencingToken },
      }),
    );
    await s3.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: "copy-dst.txt",
        Body: "dst",
        Metadata: { "fence-token": lease.fencingToken },
      }),
    );
    const openFds = () => readdirSync("/proc/self/fd").length;
    const before = openFds();
    for (let i = 0; i < 20; i++) {
      const refused = await s3
        .send(
          new CopyObjectCommand({
            Bucket: bucket,
            Key: "copy-dst.txt",
            CopySource: `${bucket}/copy-src.txt`,
            IfMatch: '"not-the-etag"',
            Metadata: { "fence-token": lease.fencingToken },
          }),
        )
        .catch((e) => e);
      expect(refused.$metadata.httpStatusCode).toBe(412);
    }
    expect(openFds() - before).toBeLessThan(5);
  });
});
