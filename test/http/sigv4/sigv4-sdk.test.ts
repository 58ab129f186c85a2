import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Readable } from "node:stream";
import {
  CreateMultipartUploadCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  type S3ClientConfig,
  UploadPartCommand,
} from "@aws-sdk/client-s3";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { authenticateRequest } from "../../../src/http/sigv4/sigv4.js";
import type { BodyDigestResult } from "../../../src/s3-endpoint/body/body-digest.js";
import { decodeRequestBody } from "../../../src/s3-endpoint/body/decode-request-body.js";

/**
 * The real @aws-sdk/client-s3 against a tiny server that runs the gateway's authentication
 * and body decoding on exactly what arrives on the socket.
 */
type Seen = {
  method: string;
  url: string;
  headers: IncomingMessage["headers"];
  payloadHash?: string;
  body?: string;
  digest?: BodyDigestResult;
  error?: { code: string; message: string };
};

const AKID = "AKIDSDKTEST";
const SECRET = "sdk/secret+with=odd~chars";
const UPLOAD_ID = "up+load/id=1 x";
let server: Server;
let endpoint: string;
let seen: Seen[] = [];

function respond(
  method: string,
  url: string,
): { status: number; body: string; headers?: Record<string, string> } {
  const query = url.split("?")[1] ?? "";
  if (method === "GET" && query.includes("list-type=2")) {
    return {
      status: 200,
      body: '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bucket</Name><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>',
    };
  }
  if (method === "POST" && query.startsWith("delete")) {
    return { status: 200, body: '<?xml version="1.0" encoding="UTF-8"?><DeleteResult></DeleteResult>' };
  }
  if (method === "POST" && query.startsWith("uploads")) {
    return {
      status: 200,
      body: `<?xml version="1.0" encoding="UTF-8"?><InitiateMultipartUploadResult><Bucket>bucket</Bucket><Key>k</Key><UploadId>${UPLOAD_ID}</UploadId></InitiateMultipartUploadResult>`,
    };
  }
  if (method === "GET")
    return { status: 200, body: "hello world", headers: { "content-type": "text/plain" } };
  return { status: 200, body: "", headers: { etag: '"5eb63bbbe01eeed093cb22bb8f5acdc3"' } };
}

beforeAll(async () => {
  server = createServer(async (req, res) => {
    const url = req.url ?? "/";
    const q = url.indexOf("?");
    const record: Seen = { method: req.method ?? "", url, headers: req.headers };
    seen.push(record);
    try {
      const auth = authenticateRequest(
        {
          method: record.method,
          rawPath: q < 0 ? url : url.slice(0, q),
          rawQuery: q < 0 ? "" : url.slice(q + 1),
          headers: req.headers,
          now: Date.now(),
        },
        (id) => (id === AKID ? SECRET : undefined),
      );
      record.payloadHash = auth.payloadHash;
      const { stream, digest: done } = decodeRequestBody({ body: req, headers: req.headers, auth });
      const chunks: Buffer[] = [];
      for await (const c of stream) chunks.push(c as Buffer);
      record.body = Buffer.concat(chunks).toString();
      record.digest = await done;
      const r = respond(record.method, url);
      res.writeHead(r.status, { "content-length": Buffer.byteLength(r.body), ...r.headers });
      res.end(r.body);
    } catch (e) {
      const err = e as { code?: string; status?: number; message: string };
      record.error = { code: err.code ?? "InternalError", message: err.message };
      const xml = `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${record.error.code}</Code><Message>${record.error.message}</Message></Error>`;
      res.writeHead(err.status ?? 500, {
        "content-type": "application/xml",
        "content-length": Buffer.byteLength(xml),
      });
      res.end(xml);
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});

beforeEach(() => {
  seen = [];
});

const client = (extra: Partial<S3ClientConfig> = {}) =>
  new S3Client({
    endpoint,
    region: "us-east-1",
    forcePathStyle: true,
    credentials: { accessKeyId: AKID, secretAccessKey: SECRET },
    maxAttempts: 1,
    ...extra,
  });

const KEY = "dir/with space+plus=eq~tilde/ünï😀 (1)!*'&$@:;,#?%";

describe("requests of @aws-sdk/client-s3", () => {
  it("PutObject with a string body: signed payload hash and a CRC32 header", async () => {
    await client().send(new PutObjectCommand({ Bucket: "bucket", Key: KEY, Body: "hello world" }));
    const [put] = seen;
    expect(put?.error).toBeUndefined();
    expect(put?.payloadHash).toMatch(/^[0-9a-f]{64}$/);
    expect(put?.headers["x-amz-checksum-crc32"]).toBe("DUoRhQ==");
    expect(put?.body).toBe("hello world");
    expect(put?.digest).toEqual({ size: 11, checksums: { CRC32: "DUoRhQ==" } });
  });

  it("PutObject with a stream body: STREAMING-UNSIGNED-PAYLOAD-TRAILER with a CRC32 trailer", async () => {
    await client().send(
      new PutObjectCommand({
        Bucket: "bucket",
        Key: KEY,
        Body: Readable.from([Buffer.from("hello "), Buffer.from("world")]),
        ContentLength: 11,
      }),
    );
    const [put] = seen;
    expect(put?.error).toBeUndefined();
    expect(put?.payloadHash).toBe("STREAMING-UNSIGNED-PAYLOAD-TRAILER");
    expect(put?.headers["x-amz-trailer"]).toBe("x-amz-checksum-crc32");
    expect(put?.body).toBe("hello world");
    expect(put?.digest?.checksums).toEqual({ CRC32: "DUoRhQ==" });
  });

  it("PutObject with requestChecksumCalculation WHEN_REQUIRED: UNSIGNED-PAYLOAD", async () => {
    await client({ requestChecksumCalculation: "WHEN_REQUIRED" }).send(
      new PutObjectCommand({
        Bucket: "bucket",
        Key: KEY,
        Body: Readable.from([Buffer.from("hello world")]),
        ContentLength: 11,
      }),
    );
    const [put] = seen;
    expect(put?.error).toBeUndefined();
    expect(put?.payloadHash).toBe("UNSIGNED-PAYLOAD");
    expect(put?.body).toBe("hello world");
  });

  it("ListObjectsV2 with a prefix holding spaces, plus signs and unicode", async () => {
    await client().send(
      new ListObjectsV2Command({
        Bucket: "bucket",
        Prefix: "a b+c/ü=&",
        Delimiter: "/",
        StartAfter: "~x*(y)",
      }),
    );
    expect(seen[0]?.error).toBeUndefined();
    expect(seen[0]?.url).toContain("prefix=a%20b%2Bc%2F%C3%BC%3D%26");
  });

  it("GetObject with checksum mode and a range", async () => {
    const out = await client().send(
      new GetObjectCommand({ Bucket: "bucket", Key: KEY, Range: "bytes=0-4", ChecksumMode: "ENABLED" }),
    );
    expect(await out.Body?.transformToString()).toBe("hello world");
    expect(seen[0]?.error).toBeUndefined();
    expect(seen[0]?.headers["x-amz-checksum-mode"]).toBe("ENABLED");
  });

  it("DeleteObjects: an XML body with a CRC32 header", async () => {
    await client().send(
      new DeleteObjectsCommand({ Bucket: "bucket", Delete: { Objects: [{ Key: KEY }, { Key: "b" }] } }),
    );
    expect(seen[0]?.error).toBeUndefined();
    expect(seen[0]?.body).toContain("<Delete");
    expect(seen[0]?.digest?.checksums.CRC32).toBe(seen[0]?.headers["x-amz-checksum-crc32"]);
  });

  it("multipart: an upload id that needs encoding in the query", async () => {
    const c = client();
    const created = await c.send(new CreateMultipartUploadCommand({ Bucket: "bucket", Key: KEY }));
    expect(created.UploadId).toBe(UPLOAD_ID);
    await c.send(
      new UploadPartCommand({
        Bucket: "bucket",
        Key: KEY,
        UploadId: UPLOAD_ID,
        PartNumber: 1,
        Body: "part one",
      }),
    );
    expect(seen.map((s) => s.error)).toEqual([undefined, undefined]);
    expect(seen[1]?.body).toBe("part one");
  });

  it("a wrong secret is refused with SignatureDoesNotMatch", async () => {
    const bad = client({ credentials: { accessKeyId: AKID, secretAccessKey: "wrong" } });
    await expect(bad.send(new ListObjectsV2Command({ Bucket: "bucket" }))).rejects.toMatchObject({
      name: "SignatureDoesNotMatch",
    });
    expect(seen[0]?.error?.code).toBe("SignatureDoesNotMatch");
  });

  it("a tampered streaming body is refused with BadDigest", async () => {
    const c = client();
    // Corrupt the trailer value on the way out: the SDK computes it over the real bytes.
    c.middlewareStack.add(
      (next) => async (args) => {
        const request = args.request as { body?: Readable };
        const body = request.body;
        if (body && typeof body.pipe === "function") {
          request.body = body.map((chunk: Buffer) =>
            Buffer.from(Buffer.from(chunk).toString("latin1").replace("DUoRhQ==", "AAAAAA=="), "latin1"),
          );
        }
        return next(args);
      },
      { step: "finalizeRequest", priority: "low" },
    );
    await expect(
      c.send(
        new PutObjectCommand({
          Bucket: "bucket",
          Key: "k",
          Body: Readable.from([Buffer.from("hello world")]),
          ContentLength: 11,
        }),
      ),
    ).rejects.toMatchObject({ name: "BadDigest" });
    expect(seen[0]?.error?.code).toBe("BadDigest");
  });
});
