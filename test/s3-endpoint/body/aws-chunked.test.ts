import { PassThrough, Readable } from "node:stream";
import { describe, expect, it } from "vitest";
import { DomainError } from "../../../src/core/errors.js";
import type { RequestHeaders } from "../../../src/http/sigv4/request-headers.js";
import {
  type DecodeRequestBodyOptions,
  decodeRequestBody,
} from "../../../src/s3-endpoint/body/decode-request-body.js";
import { toS3Error } from "../../../src/s3-endpoint/protocol/errors.js";

/** The exact body @aws-sdk/client-s3 sends for a stream upload of "hello world" (field notes). */
const FIELD_BODY = "6\r\nhello \r\n5\r\nworld\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n";
const FIELD_HEADERS = {
  "content-encoding": "aws-chunked",
  "transfer-encoding": "chunked",
  "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
  "x-amz-decoded-content-length": "11",
  "x-amz-trailer": "x-amz-checksum-crc32",
};

const source = (pieces: Buffer[]) => Readable.from(pieces, { objectMode: false });

async function decode(
  input: string | Buffer | Buffer[],
  headers: RequestHeaders,
  options: Partial<DecodeRequestBodyOptions> = {},
) {
  const pieces = Array.isArray(input) ? input : [Buffer.from(input)];
  const { stream, digest: done } = decodeRequestBody({ body: source(pieces), headers, ...options });
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(c as Buffer);
  return { data: Buffer.concat(chunks), digest: await done };
}

/** Expects decoding to fail with code, both on the stream and on `done`. */
async function expectDecodeError(
  input: string | Buffer | Buffer[],
  headers: RequestHeaders,
  code: string,
  options: Partial<DecodeRequestBodyOptions> = {},
): Promise<DomainError> {
  const pieces = Array.isArray(input) ? input : [Buffer.from(input)];
  const { stream, digest: done } = decodeRequestBody({ body: source(pieces), headers, ...options });
  let streamError: unknown;
  try {
    for await (const _ of stream) {
      // drain
    }
  } catch (e) {
    streamError = e;
  }
  expect(streamError, `expected ${code}`).toBeInstanceOf(DomainError);
  expect((streamError as DomainError).code).toBe(code);
  await expect(done).rejects.toBe(streamError);
  return streamError as DomainError;
}

const everySplit = (body: Buffer): Buffer[][] => {
  const splits: Buffer[][] = [];
  for (let i = 0; i <= body.length; i++) splits.push([body.subarray(0, i), body.subarray(i)]);
  return splits;
};
const bytewise = (body: Buffer): Buffer[] => [...body].map((b) => Buffer.from([b]));

describe("aws-chunked decoding (unsigned)", () => {
  it("decodes the body the AWS SDK sends and verifies its CRC32 trailer", async () => {
    const { data, digest } = await decode(FIELD_BODY, FIELD_HEADERS);
    expect(data.toString()).toBe("hello world");
    // No Content-MD5 was sent, so no MD5 is computed here (the storage layer makes the ETag).
    expect(digest).toEqual({ size: 11, checksums: { CRC32: "DUoRhQ==" } });
  });

  it("rejects a wrong CRC32 trailer with BadDigest", async () => {
    const err = await expectDecodeError(
      FIELD_BODY.replace("DUoRhQ==", "AAAAAA=="),
      FIELD_HEADERS,
      "BadDigest",
    );
    expect(toS3Error(err).status).toBe(400);
    expect(err.message).toBe("The CRC32 you specified did not match the calculated checksum.");
  });

  it("decodes whatever way the body is split across reads", async () => {
    const body = Buffer.from(FIELD_BODY);
    for (const pieces of [...everySplit(body), bytewise(body)]) {
      const { data, digest } = await decode(pieces, FIELD_HEADERS);
      expect(data.toString()).toBe("hello world");
      expect(digest.checksums.CRC32).toBe("DUoRhQ==");
    }
  });

  it("detects a wrong CRC however the body is split", async () => {
    const body = Buffer.from(FIELD_BODY.replace("DUoRhQ==", "DUoRhA=="));
    for (const pieces of [...everySplit(body), bytewise(body)]) {
      await expectDecodeError(pieces, FIELD_HEADERS, "BadDigest");
    }
  });

  it("never accepts a truncated body", async () => {
    const body = Buffer.from(FIELD_BODY);
    // Cutting only the final CRLF loses nothing and is tolerated; every shorter cut fails.
    for (let end = 0; end < body.length - 2; end++) {
      const { stream, digest: done } = decodeRequestBody({
        body: source([body.subarray(0, end)]),
        headers: FIELD_HEADERS,
      });
      stream.resume();
      await expect(done, `cut at ${end}`).rejects.toBeInstanceOf(DomainError);
    }
    const { data } = await decode(body.subarray(0, body.length - 2), FIELD_HEADERS);
    expect(data.toString()).toBe("hello world");
  });

  it("handles STREAMING-UNSIGNED-PAYLOAD without a trailer", async () => {
    const headers = {
      "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD",
      "x-amz-decoded-content-length": "5",
    };
    const { data, digest } = await decode("5\r\nhello\r\n0\r\n\r\n", headers);
    expect(data.toString()).toBe("hello");
    expect(digest.size).toBe(5);
  });

  it("decodes an empty object", async () => {
    const headers = { ...FIELD_HEADERS, "x-amz-decoded-content-length": "0" };
    const { data, digest } = await decode("0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n", headers);
    expect(data.length).toBe(0);
    expect(digest).toEqual({ size: 0, checksums: { CRC32: "AAAAAA==" } });
  });

  it("decodes many chunks and upper-case hex sizes", async () => {
    const payload = Buffer.alloc(200_000, 7);
    const parts: Buffer[] = [];
    for (let i = 0; i < payload.length; i += 65536) {
      const chunk = payload.subarray(i, i + 65536);
      parts.push(Buffer.from(`${chunk.length.toString(16).toUpperCase()}\r\n`), chunk, Buffer.from("\r\n"));
    }
    parts.push(Buffer.from("0\r\n\r\n"));
    const headers = { "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER" };
    const { data } = await decode(Buffer.concat(parts), headers);
    expect(data.equals(payload)).toBe(true);
  });

  it("releases data before the body has ended (no whole-body buffering)", async () => {
    const body = new PassThrough();
    const { stream, digest: done } = decodeRequestBody({
      body,
      headers: { "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER" },
    });
    body.write("b\r\nfirst chunk\r\n");
    const first = await new Promise<Buffer>((resolve) => stream.once("data", resolve));
    expect(first.toString()).toBe("first chunk");
    body.end("0\r\n\r\n");
    stream.resume();
    expect((await done).size).toBe(11);
  });

  describe("length", () => {
    it("rejects a body shorter than x-amz-decoded-content-length", async () => {
      await expectDecodeError(
        FIELD_BODY,
        { ...FIELD_HEADERS, "x-amz-decoded-content-length": "12" },
        "IncompleteBody",
      );
    });

    it("rejects a body longer than x-amz-decoded-content-length", async () => {
      await expectDecodeError(
        FIELD_BODY,
        { ...FIELD_HEADERS, "x-amz-decoded-content-length": "10" },
        "IncompleteBody",
      );
    });

    it("rejects a malformed x-amz-decoded-content-length before reading", () => {
      expect(() =>
        decodeRequestBody({
          body: source([]),
          headers: { ...FIELD_HEADERS, "x-amz-decoded-content-length": "ten" },
        }),
      ).toThrow(expect.objectContaining({ code: "InvalidArgument" }));
    });

    it("enforces maxSize while streaming and up front", async () => {
      const headers = { "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER" };
      await expectDecodeError("5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n", headers, "EntityTooLarge", {
        maxSize: 7,
      });
      expect(() => decodeRequestBody({ body: source([]), headers: FIELD_HEADERS, maxSize: 10 })).toThrow(
        expect.objectContaining({ code: "EntityTooLarge" }),
      );
    });
  });

  describe("framing errors", () => {
    const headers = { "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER" };
    it.each([
      ["a non-hex size", "g\r\nhello\r\n0\r\n\r\n"],
      ["an empty size line", "\r\nhello\r\n0\r\n\r\n"],
      ["a negative size", "-5\r\nhello\r\n0\r\n\r\n"],
      ["data longer than its size", "4\r\nhello\r\n0\r\n\r\n"],
      ["data not followed by CRLF", "5\r\nhelloXX0\r\n\r\n"],
      ["data after the final chunk", "5\r\nhello\r\n0\r\n\r\nmore"],
      ["a trailer line without a colon", "5\r\nhello\r\n0\r\nnonsense\r\n\r\n"],
      ["an absurd size", "fffffffffffffffff\r\nhello\r\n0\r\n\r\n"],
    ])("rejects %s with InvalidRequest", async (_name, body) => {
      await expectDecodeError(body, headers, "InvalidRequest");
    });

    it("rejects a chunk header line longer than 4 KiB without buffering it all", async () => {
      const long = Buffer.from(`5;${"x".repeat(5000)}\r\nhello\r\n0\r\n\r\n`);
      await expectDecodeError(bytewise(long.subarray(0, 4200)), headers, "InvalidRequest");
      await expectDecodeError(long, headers, "InvalidRequest");
    });

    it("rejects a body that stops inside a chunk with IncompleteBody", async () => {
      await expectDecodeError("5\r\nhel", headers, "IncompleteBody");
      await expectDecodeError("", headers, "IncompleteBody");
    });
  });

  describe("trailers", () => {
    it("rejects a declared trailer that never comes", async () => {
      await expectDecodeError(
        "5\r\nhello\r\n0\r\n\r\n",
        { ...FIELD_HEADERS, "x-amz-decoded-content-length": "5" },
        "InvalidRequest",
      );
    });

    it("rejects an undeclared trailer", async () => {
      const headers = { "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER" };
      await expectDecodeError(
        "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:NhCmhg==\r\n\r\n",
        headers,
        "InvalidRequest",
      );
    });

    it("rejects a malformed trailer checksum value", async () => {
      await expectDecodeError(FIELD_BODY.replace("DUoRhQ==", "DUoRhQ"), FIELD_HEADERS, "InvalidRequest");
    });

    it("accepts trailer lines ending in a bare LF", async () => {
      const { data } = await decode(
        "6\r\nhello \r\n5\r\nworld\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\n\n",
        FIELD_HEADERS,
      );
      expect(data.toString()).toBe("hello world");
    });

    it.each([
      ["x-amz-checksum-crc32c", "crc32c", "yZRlqg=="],
      ["x-amz-checksum-sha1", "sha1", "Kq5sNclPz7QV2+lfQIuc6R7oRu0="],
      ["x-amz-checksum-sha256", "sha256", "uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek="],
      ["x-amz-checksum-crc64nvme", "crc64nvme", "jSnVw/bqjr4="],
    ])("verifies a %s trailer", async (name, _alg, value) => {
      const headers = { ...FIELD_HEADERS, "x-amz-trailer": name };
      const body = `6\r\nhello \r\n5\r\nworld\r\n0\r\n${name}:${value}\r\n\r\n`;
      const { digest } = await decode(body, headers);
      expect(Object.values(digest.checksums)).toEqual([value]);
      await expectDecodeError(
        body.replace(
          value,
          value.replace(/^./, (c) => (c === "A" ? "B" : "A")),
        ),
        headers,
        "BadDigest",
      );
    });

    it("refuses x-amz-trailer with a body that is not aws-chunked", () => {
      expect(() =>
        decodeRequestBody({
          body: source([]),
          headers: { "x-amz-content-sha256": "UNSIGNED-PAYLOAD", "x-amz-trailer": "x-amz-checksum-crc32" },
        }),
      ).toThrow(expect.objectContaining({ code: "InvalidRequest" }));
    });

    it("refuses an unknown x-amz-trailer", () => {
      expect(() =>
        decodeRequestBody({
          body: source([]),
          headers: { ...FIELD_HEADERS, "x-amz-trailer": "x-amz-checksum-md4" },
        }),
      ).toThrow(expect.objectContaining({ code: "InvalidRequest" }));
    });
  });

  describe("plain bodies", () => {
    it("passes a body through when Content-Encoding says aws-chunked but the payload is not", async () => {
      const raw = "6\r\nhello \r\n0\r\n\r\n";
      const headers = { "content-encoding": "aws-chunked", "x-amz-content-sha256": "UNSIGNED-PAYLOAD" };
      const { data } = await decode(raw, headers);
      expect(data.toString()).toBe(raw);
    });

    it("rejects a body shorter than Content-Length", async () => {
      await expectDecodeError(
        "hello",
        { "x-amz-content-sha256": "UNSIGNED-PAYLOAD", "content-length": "6" },
        "IncompleteBody",
      );
    });

    it("treats a missing x-amz-content-sha256 as UNSIGNED-PAYLOAD", async () => {
      expect((await decode("abc", {})).data.toString()).toBe("abc");
    });

    it("rejects an unknown x-amz-content-sha256 before reading", () => {
      expect(() =>
        decodeRequestBody({ body: source([]), headers: { "x-amz-content-sha256": "STREAMING-FOO" } }),
      ).toThrow(expect.objectContaining({ code: "InvalidArgument" }));
    });
  });

  describe("source failures", () => {
    it("turns an aborted request into IncompleteBody", async () => {
      const body = new PassThrough();
      const { stream, digest: done } = decodeRequestBody({ body, headers: FIELD_HEADERS });
      stream.on("error", () => {});
      stream.resume();
      body.write("6\r\nhello ");
      body.destroy(new Error("aborted"));
      await expect(done).rejects.toMatchObject({ code: "IncompleteBody" });
    });

    it("does not destroy the request when the body is bad (the error response must still be sent)", async () => {
      const body = new PassThrough();
      const { stream, digest: done } = decodeRequestBody({ body, headers: FIELD_HEADERS });
      stream.on("error", () => {});
      stream.resume();
      body.write("zz\r\n");
      await expect(done).rejects.toMatchObject({ code: "InvalidRequest" });
      expect(body.destroyed).toBe(false);
    });

    it("rejects done when the consumer abandons the stream", async () => {
      const { stream, digest: done } = decodeRequestBody({ body: new PassThrough(), headers: FIELD_HEADERS });
      stream.destroy();
      await expect(done).rejects.toMatchObject({ code: "IncompleteBody" });
    });
  });
});
