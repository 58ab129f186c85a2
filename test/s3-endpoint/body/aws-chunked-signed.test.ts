import { Readable } from "node:stream";
import { describe, expect, it } from "vitest";
import { DomainError } from "../../../src/core/errors.js";
import type { RequestHeaders } from "../../../src/http/sigv4/request-headers.js";
import { authenticateRequest, type SigV4Request } from "../../../src/http/sigv4/sigv4.js";
import { type BodyAuth, decodeRequestBody } from "../../../src/s3-endpoint/body/decode-request-body.js";
import {
  type ChunkSigner,
  signedChunkedBody,
  signingKey,
  sigV4Signer,
  splitEvery,
} from "../../support/signed-http.js";

// The independent chunk signer (written from the AWS documentation) is test/support's.

/** `payload` in chunks of `chunkSize` bytes, signed, with the signed trailer when given. */
const chunkedBody = (
  payload: Buffer,
  chunkSize: number,
  s: ChunkSigner,
  trailer?: { name: string; value: string },
) => signedChunkedBody(splitEvery(payload, chunkSize), s, { trailer });

// ---- helpers ----

const source = (pieces: Buffer[]) => Readable.from(pieces, { objectMode: false });

async function decode(pieces: Buffer[], headers: RequestHeaders, auth: BodyAuth) {
  const { stream, digest: done } = decodeRequestBody({ body: source(pieces), headers, auth });
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(c as Buffer);
  return { data: Buffer.concat(chunks), digest: await done };
}

async function expectDecodeError(pieces: Buffer[], headers: RequestHeaders, auth: BodyAuth, code: string) {
  const { stream, digest: done } = decodeRequestBody({ body: source(pieces), headers, auth });
  stream.on("error", () => {});
  stream.resume();
  const err = await done.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, `expected ${code}`).toBeInstanceOf(DomainError);
  expect((err as DomainError).code).toBe(code);
}

const AKID = "AKIDEXAMPLE";
const SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const T0 = Date.UTC(2026, 10, 22, 12, 0, 0);
const AMZ_DATE = "20261122T120000Z";
const SCOPE = "20261122/us-east-1/s3/aws4_request";
const KEY = signingKey(SECRET, "20261122");
const SEED = "a".repeat(64);
const SIGNER: ChunkSigner = { key: KEY, amzDate: AMZ_DATE, scope: SCOPE, seed: SEED };

const authFor = (payloadHash: string, seed = SEED): BodyAuth => ({
  payloadHash,
  signingKey: KEY,
  scope: { date: "20261122", region: "us-east-1", service: "s3" },
  seedSignature: seed,
  amzDate: AMZ_DATE,
  presigned: false,
});

const SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
const SIGNED_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER";
const HELLO = Buffer.from("hello world");
const CRC32_HELLO = "DUoRhQ==";

describe("signed aws-chunked bodies", () => {
  describe("the example of the S3 documentation", () => {
    const docSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const docKey = signingKey(docSecret, "20130524");
    const payload = Buffer.alloc(66560, "a");
    const docChunk = (data: Buffer, sig: string) => [
      Buffer.from(`${data.length.toString(16)};chunk-signature=${sig}\r\n`),
      data,
      Buffer.from("\r\n"),
    ];

    it("authenticates the request and verifies its chunk signatures", async () => {
      const body = Buffer.concat([
        ...docChunk(
          payload.subarray(0, 65536),
          "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
        ),
        ...docChunk(
          payload.subarray(65536),
          "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
        ),
        Buffer.from(
          "0;chunk-signature=b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9\r\n\r\n",
        ),
      ]);
      const headers = {
        host: "s3.amazonaws.com",
        "x-amz-date": "20130524T000000Z",
        "x-amz-storage-class": "REDUCED_REDUNDANCY",
        "x-amz-content-sha256": SIGNED,
        "content-encoding": "aws-chunked",
        "x-amz-decoded-content-length": "66560",
        "content-length": String(body.length),
        authorization:
          "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request," +
          "SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class," +
          "Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
      };
      expect(body.length).toBe(66824);
      const req: SigV4Request = {
        method: "PUT",
        rawPath: "/examplebucket/chunkObject.txt",
        rawQuery: "",
        headers,
        now: Date.UTC(2013, 4, 24, 0, 1),
      };
      const auth = authenticateRequest(req, () => docSecret);
      expect(auth.signingKey.equals(docKey)).toBe(true);
      const { data, digest } = await decode([body], headers, auth);
      expect(data.equals(payload)).toBe(true);
      expect(digest.size).toBe(66560);
      // Tampering with one byte of the second chunk breaks its signature.
      const bad = Buffer.from(body);
      bad[body.length - 200] = 0x62;
      await expectDecodeError([bad], headers, auth, "SignatureDoesNotMatch");
    });

    it("verifies the signed-trailer example", async () => {
      const body = Buffer.concat([
        ...docChunk(
          payload.subarray(0, 65536),
          "b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2",
        ),
        ...docChunk(
          payload.subarray(65536),
          "1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7",
        ),
        Buffer.from(
          "0;chunk-signature=2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992\r\n" +
            "x-amz-checksum-crc32c:sOO8/Q==\r\n" +
            "x-amz-trailer-signature:d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435\r\n\r\n",
        ),
      ]);
      const headers = {
        "x-amz-content-sha256": SIGNED_TRAILER,
        "x-amz-trailer": "x-amz-checksum-crc32c",
        "x-amz-decoded-content-length": "66560",
      };
      const auth: BodyAuth = {
        payloadHash: SIGNED_TRAILER,
        signingKey: docKey,
        scope: { date: "20130524", region: "us-east-1", service: "s3" },
        seedSignature: "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e",
        amzDate: "20130524T000000Z",
        presigned: false,
      };
      const { digest } = await decode([body], headers, auth);
      expect(digest.checksums.CRC32C).toBe("sOO8/Q==");
    });
  });

  it("verifies a body signed after an SDK-signed request", async () => {
    const payload = Buffer.from("x".repeat(300));
    const signer = sigV4Signer({
      region: "eu-west-3",
      credentials: { accessKeyId: AKID, secretAccessKey: SECRET },
    });
    const signed = await signer.sign(
      {
        method: "PUT",
        protocol: "http:",
        hostname: "localhost",
        path: "/bucket/chunked",
        query: {},
        headers: {
          host: "localhost",
          "x-amz-content-sha256": SIGNED,
          "content-encoding": "aws-chunked",
          "x-amz-decoded-content-length": "300",
        },
      },
      { signingDate: new Date(T0) },
    );
    const headers = signed.headers as Record<string, string>;
    const auth = authenticateRequest(
      { method: "PUT", rawPath: "/bucket/chunked", rawQuery: "", headers, now: T0 },
      () => SECRET,
    );
    const seed = /Signature=([0-9a-f]{64})/.exec(headers.authorization!)![1]!;
    const { body } = chunkedBody(payload, 128, {
      key: signingKey(SECRET, "20261122", "eu-west-3"),
      amzDate: AMZ_DATE,
      scope: "20261122/eu-west-3/s3/aws4_request",
      seed,
    });
    const { data } = await decode([body], headers, auth);
    expect(data.equals(payload)).toBe(true);
  });

  it("decodes a signed body with a signed trailer split at every byte boundary", async () => {
    const { body } = chunkedBody(HELLO, 6, SIGNER, {
      name: "x-amz-checksum-crc32",
      value: CRC32_HELLO,
    });
    const headers = {
      "x-amz-content-sha256": SIGNED_TRAILER,
      "x-amz-trailer": "x-amz-checksum-crc32",
      "x-amz-decoded-content-length": "11",
    };
    const splits: Buffer[][] = [[...body].map((b) => Buffer.from([b]))];
    for (let i = 0; i <= body.length; i++) splits.push([body.subarray(0, i), body.subarray(i)]);
    for (const pieces of splits) {
      const { data, digest } = await decode(pieces, headers, authFor(SIGNED_TRAILER));
      expect(data.toString()).toBe("hello world");
      expect(digest.checksums.CRC32).toBe(CRC32_HELLO);
    }
  });

  describe("tampering", () => {
    const headers = { "x-amz-content-sha256": SIGNED, "x-amz-decoded-content-length": "11" };
    const auth = authFor(SIGNED);
    const { body, signatures } = chunkedBody(HELLO, 4, SIGNER);
    const text = body.toString("latin1");

    it("accepts the untampered body", async () => {
      expect((await decode([body], headers, auth)).data.toString()).toBe("hello world");
    });

    it("rejects changed chunk data", async () => {
      const bad = Buffer.from(text.replace("o wo", "o Wo"), "latin1");
      await expectDecodeError([bad], headers, auth, "SignatureDoesNotMatch");
    });

    it("rejects a changed chunk signature", async () => {
      const bad = Buffer.from(
        text.replace(
          signatures[1]!,
          signatures[1]!.replace(/^./, (c) => (c === "0" ? "1" : "0")),
        ),
      );
      await expectDecodeError([bad], headers, auth, "SignatureDoesNotMatch");
    });

    it("rejects reordered chunks", async () => {
      const [a, b] = [
        `4;chunk-signature=${signatures[0]}\r\nhell\r\n`,
        `4;chunk-signature=${signatures[1]}\r\no wo\r\n`,
      ];
      const bad = Buffer.from(text.replace(a + b, b + a), "latin1");
      await expectDecodeError([bad], headers, auth, "SignatureDoesNotMatch");
    });

    it("rejects a dropped chunk", async () => {
      const bad = Buffer.from(text.replace(`4;chunk-signature=${signatures[1]}\r\no wo\r\n`, ""), "latin1");
      await expectDecodeError(
        [bad],
        { ...headers, "x-amz-decoded-content-length": "7" },
        auth,
        "SignatureDoesNotMatch",
      );
    });

    it("rejects a chunk without a signature", async () => {
      const bad = Buffer.from(text.replace(`;chunk-signature=${signatures[2]}`, ""), "latin1");
      await expectDecodeError([bad], headers, auth, "SignatureDoesNotMatch");
    });

    it("rejects a body signed from another request's seed", async () => {
      await expectDecodeError([body], headers, authFor(SIGNED, "b".repeat(64)), "SignatureDoesNotMatch");
    });

    it("rejects trailers on STREAMING-AWS4-HMAC-SHA256-PAYLOAD", async () => {
      const withTrailer = Buffer.from(
        text.replace(/\r\n\r\n$/, "\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n"),
        "latin1",
      );
      await expectDecodeError([withTrailer], headers, auth, "InvalidRequest");
    });
  });

  describe("signed trailers", () => {
    const headers = {
      "x-amz-content-sha256": SIGNED_TRAILER,
      "x-amz-trailer": "x-amz-checksum-crc32",
      "x-amz-decoded-content-length": "11",
    };
    const auth = authFor(SIGNED_TRAILER);

    it("rejects a trailer changed after signing", async () => {
      const { body } = chunkedBody(HELLO, 6, SIGNER, {
        name: "x-amz-checksum-crc32",
        value: CRC32_HELLO,
      });
      const bad = Buffer.from(body.toString("latin1").replace(CRC32_HELLO, "AAAAAA=="), "latin1");
      await expectDecodeError([bad], headers, auth, "SignatureDoesNotMatch");
    });

    it("rejects a correctly signed but wrong checksum with BadDigest", async () => {
      const { body } = chunkedBody(HELLO, 6, SIGNER, {
        name: "x-amz-checksum-crc32",
        value: "AAAAAA==",
      });
      await expectDecodeError([body], headers, auth, "BadDigest");
    });

    it("rejects a trailer without its signature", async () => {
      const { body } = chunkedBody(HELLO, 6, SIGNER, {
        name: "x-amz-checksum-crc32",
        value: CRC32_HELLO,
      });
      const bad = Buffer.from(
        body.toString("latin1").replace(/x-amz-trailer-signature:[0-9a-f]+\r\n/, ""),
        "latin1",
      );
      await expectDecodeError([bad], headers, auth, "SignatureDoesNotMatch");
    });
  });

  describe("preconditions", () => {
    it("requires header authentication", () => {
      const body = source([]);
      const headers = { "x-amz-content-sha256": SIGNED };
      expect(() => decodeRequestBody({ body, headers })).toThrow(
        expect.objectContaining({ code: "InvalidRequest" }),
      );
      expect(() =>
        decodeRequestBody({ body, headers, auth: { ...authFor(SIGNED), presigned: true } }),
      ).toThrow(expect.objectContaining({ code: "InvalidRequest" }));
    });
  });
});
