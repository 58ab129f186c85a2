import { randomBytes } from "node:crypto";
import { Readable } from "node:stream";
import { crc32 } from "node:zlib";
import { describe, expect, it } from "vitest";
import { DomainError } from "../../../src/core/errors.js";
import type { RequestHeaders } from "../../../src/http/sigv4/request-headers.js";
import { createHasher } from "../../../src/s3-endpoint/body/checksum-algorithms.js";
import { crc32c } from "../../../src/s3-endpoint/body/crc32c.js";
import { Crc64Nvme, crc64nvme } from "../../../src/s3-endpoint/body/crc64nvme.js";
import {
  type DecodeRequestBodyOptions,
  decodeRequestBody,
} from "../../../src/s3-endpoint/body/decode-request-body.js";
import { toS3Error } from "../../../src/s3-endpoint/protocol/errors.js";
import { digest, sha256Hex } from "../../support/digest.js";

/** Bit-at-a-time reflected CRC, the textbook definition the table-driven code must agree with. */
function referenceCrc(data: Uint8Array, poly: bigint, width: bigint): bigint {
  const mask = (1n << width) - 1n;
  let crc = mask;
  for (const byte of data) {
    crc ^= BigInt(byte);
    for (let k = 0; k < 8; k++) crc = crc & 1n ? (crc >> 1n) ^ poly : crc >> 1n;
  }
  return crc ^ mask;
}

const b64 = (hex: string) => Buffer.from(hex, "hex").toString("base64");
const HELLO = Buffer.from("hello world");

describe("CRC32C", () => {
  it("matches the check value and RFC 3720 vectors", () => {
    expect(crc32c(Buffer.from("123456789"))).toBe(0xe3069283);
    expect(crc32c(Buffer.alloc(32, 0))).toBe(0x8a9136aa);
    expect(crc32c(Buffer.alloc(32, 0xff))).toBe(0x62a8ab43);
    expect(crc32c(Buffer.from(Array.from({ length: 32 }, (_, i) => i)))).toBe(0x46dd794e);
    expect(crc32c(Buffer.alloc(0))).toBe(0);
  });

  it("agrees with the bitwise definition and continues across pieces", () => {
    for (const n of [1, 7, 8, 9, 15, 16, 17, 1000]) {
      const data = randomBytes(n);
      const expected = Number(referenceCrc(data, 0x82f63b78n, 32n));
      expect(crc32c(data)).toBe(expected);
      const cut = Math.floor(n / 3);
      expect(crc32c(data.subarray(cut), crc32c(data.subarray(0, cut)))).toBe(expected);
    }
  });
});

describe("CRC64NVME", () => {
  it("matches the check value", () => {
    expect(crc64nvme(Buffer.from("123456789"))).toBe(0xae8b14860a799888n);
    expect(crc64nvme(Buffer.alloc(0))).toBe(0n);
  });

  it("agrees with the bitwise definition and continues across pieces", () => {
    for (const n of [1, 7, 8, 9, 15, 16, 17, 1000]) {
      const data = randomBytes(n);
      const expected = referenceCrc(data, 0x9a6c9329ac4bc9b5n, 64n);
      expect(crc64nvme(data)).toBe(expected);
      const h = new Crc64Nvme();
      for (const b of data) h.update(Buffer.from([b]));
      expect(h.digest().readBigUInt64BE(0)).toBe(expected);
    }
  });
});

describe("checksum hashers", () => {
  it("produce S3's big-endian digests", () => {
    const computed = (alg: Parameters<typeof createHasher>[0]) => {
      const h = createHasher(alg);
      h.update(HELLO.subarray(0, 4));
      h.update(HELLO.subarray(4));
      return h.digest().toString("base64");
    };
    expect(computed("CRC32")).toBe("DUoRhQ==");
    expect(computed("CRC32")).toBe(b64((crc32(HELLO) >>> 0).toString(16).padStart(8, "0")));
    expect(computed("CRC32C")).toBe(b64("c99465aa"));
    expect(computed("SHA1")).toBe(digest("sha1", HELLO, "base64"));
    expect(computed("SHA256")).toBe(digest("sha256", HELLO, "base64"));
    expect(computed("CRC64NVME")).toBe(b64(crc64nvme(HELLO).toString(16).padStart(16, "0")));
  });
});

async function decode(
  body: string,
  headers: RequestHeaders,
  options: Partial<DecodeRequestBodyOptions> = {},
) {
  const { stream, digest: done } = decodeRequestBody({
    body: Readable.from([Buffer.from(body)], { objectMode: false }),
    headers,
    ...options,
  });
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(c as Buffer);
  return { data: Buffer.concat(chunks).toString(), digest: await done };
}

async function expectBodyError(body: string, headers: RequestHeaders, code: string): Promise<DomainError> {
  const { stream, digest: done } = decodeRequestBody({
    body: Readable.from([Buffer.from(body)], { objectMode: false }),
    headers,
  });
  stream.on("error", () => {});
  stream.resume();
  const err = await done.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, `expected ${code}`).toBeInstanceOf(DomainError);
  expect((err as DomainError).code).toBe(code);
  return err as DomainError;
}

function expectHeaderError(headers: RequestHeaders, code: string): void {
  expect(() => decodeRequestBody({ body: Readable.from([]), headers })).toThrow(
    expect.objectContaining({ code }),
  );
}

const SUMS: Record<string, string> = {
  crc32: "DUoRhQ==",
  crc32c: "yZRlqg==",
  sha1: "Kq5sNclPz7QV2+lfQIuc6R7oRu0=",
  sha256: "uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek=",
  crc64nvme: b64(crc64nvme(HELLO).toString(16).padStart(16, "0")),
};

describe("checksum headers on a request body", () => {
  it.each(Object.entries(SUMS))("verifies x-amz-checksum-%s", async (alg, value) => {
    const { data, digest } = await decode("hello world", { [`x-amz-checksum-${alg}`]: value });
    expect(data).toBe("hello world");
    expect(digest.checksums).toEqual({ [alg.toUpperCase()]: value });
  });

  it.each(Object.entries(SUMS))("rejects a wrong x-amz-checksum-%s with BadDigest", async (alg, value) => {
    const err = await expectBodyError("hello world!", { [`x-amz-checksum-${alg}`]: value }, "BadDigest");
    expect(err.message).toBe(`The ${alg.toUpperCase()} you specified did not match the calculated checksum.`);
  });

  it.each(["AAAA", "DUoRhQ", "DUoRhQ==x", "not base64!", "AAAAAAAA"])(
    "rejects the malformed CRC32 value %s",
    (v) => {
      expectHeaderError({ "x-amz-checksum-crc32": v }, "InvalidRequest");
    },
  );

  it("rejects two checksum headers", () => {
    expectHeaderError(
      { "x-amz-checksum-crc32": SUMS.crc32!, "x-amz-checksum-sha1": SUMS.sha1! },
      "InvalidRequest",
    );
  });

  it("refuses checksum algorithms it cannot verify instead of ignoring them", () => {
    expectHeaderError({ "x-amz-checksum-sha512": "AAAA" }, "InvalidRequest");
  });

  it("ignores x-amz-checksum-mode, -type and -algorithm, which are not body checksums", async () => {
    const headers = {
      "x-amz-checksum-mode": "ENABLED",
      "x-amz-checksum-type": "FULL_OBJECT",
      "x-amz-checksum-algorithm": "CRC32",
    };
    expect((await decode("hello world", headers)).data).toBe("hello world");
  });

  it("computes the algorithm named by x-amz-sdk-checksum-algorithm and requested extras", async () => {
    const { digest } = await decode(
      "hello world",
      { "x-amz-sdk-checksum-algorithm": "crc32c" },
      { computeChecksums: ["CRC64NVME", "SHA256"] },
    );
    expect(digest.checksums).toEqual({ CRC32C: SUMS.crc32c, CRC64NVME: SUMS.crc64nvme, SHA256: SUMS.sha256 });
  });

  it("rejects x-amz-sdk-checksum-algorithm that contradicts the checksum header", () => {
    expectHeaderError(
      { "x-amz-sdk-checksum-algorithm": "SHA1", "x-amz-checksum-crc32": SUMS.crc32! },
      "InvalidRequest",
    );
    expectHeaderError({ "x-amz-sdk-checksum-algorithm": "MD4" }, "InvalidRequest");
  });

  it("does not enforce checksum query parameters (presigned URLs carry an empty-body CRC there)", async () => {
    // The decoder only sees headers; a presigned PutObject's x-amz-checksum-crc32=AAAAAA== is in the query.
    const { digest } = await decode("hello world", { "x-amz-content-sha256": "UNSIGNED-PAYLOAD" });
    expect(digest.size).toBe(11);
  });
});

describe("Content-MD5", () => {
  const md5 = digest("md5", "hello world", "base64");

  it("verifies a correct Content-MD5", async () => {
    const { digest } = await decode("hello world", { "content-md5": md5 });
    expect(digest.md5Hex).toBe("5eb63bbbe01eeed093cb22bb8f5acdc3");
  });

  it("rejects a mismatch with BadDigest", async () => {
    await expectBodyError("hello world?", { "content-md5": md5 }, "BadDigest");
  });

  it.each(["", "abc", "XrY7u+Ae7tCTyyK7j1rNww", "not-base64-at-all!!!!!!="])(
    "rejects the malformed value %j with InvalidDigest",
    (v) => {
      expectHeaderError({ "content-md5": v }, "InvalidDigest");
    },
  );
});

describe("x-amz-content-sha256 payload hash", () => {
  const sha = sha256Hex("hello world");

  it("passes the body and accepts a matching hash", async () => {
    const { data, digest } = await decode("hello world", { "x-amz-content-sha256": sha });
    expect(data).toBe("hello world");
    expect(digest.checksums).toEqual({});
  });

  it("rejects a mismatch with XAmzContentSHA256Mismatch", async () => {
    const err = await expectBodyError(
      "hello world.",
      { "x-amz-content-sha256": sha },
      "XAmzContentSHA256Mismatch",
    );
    expect(toS3Error(err).status).toBe(400);
    expect(err.details.ClientComputedContentSHA256).toBe(sha);
  });

  it("takes the payload hash from the authentication result when given", async () => {
    const { stream, digest: done } = decodeRequestBody({
      body: Readable.from([Buffer.from("hello world")], { objectMode: false }),
      headers: {},
      auth: {
        payloadHash: sha.toUpperCase(),
        signingKey: Buffer.alloc(32),
        scope: { date: "20261122", region: "us-east-1", service: "s3" },
        seedSignature: "0".repeat(64),
        amzDate: "20261122T120000Z",
        presigned: false,
      },
    });
    stream.resume();
    expect((await done).size).toBe(11);
  });
});
