import { describe, expect, it } from "vitest";
import { DomainError } from "../../src/core/errors.js";
import {
  assertValidBucketName,
  assertValidObjectKey,
  bucketNameProblem,
  isValidBucketName,
  isValidObjectKey,
  MAX_OBJECT_KEY_BYTES,
  objectKeyProblem,
} from "../../src/core/key-rules.js";

describe("object key rules", () => {
  it.each([
    "a",
    "dir/file.txt",
    "trailing/",
    "a//b",
    "...",
    "a/.../b",
    ".hidden",
    "a/.b/..c",
    "file.",
    "tab\there",
    "line\nbreak\r",
    "ünïcödé/ключ/😀",
    "%2e%2e/encoded-is-literal",
    "del\u007f",
  ])("accepts %j", (key) => {
    expect(objectKeyProblem(key)).toBeNull();
    expect(isValidObjectKey(key)).toBe(true);
    expect(() => assertValidObjectKey(key)).not.toThrow();
  });

  it.each([
    ["", "empty"],
    [".", "dot-segment"],
    ["..", "dot-segment"],
    ["../etc/passwd", "dot-segment"],
    ["a/../b", "dot-segment"],
    ["a/./b", "dot-segment"],
    ["a/..", "dot-segment"],
    ["a/.", "dot-segment"],
    ["/absolute", "leading-slash"],
    ["//double", "leading-slash"],
    ["a\\b", "backslash"],
    ["..\\windows", "backslash"],
    ["a\\..\\b", "backslash"],
    ["nul\u0000byte", "control-character"],
    ["bell\u0007", "control-character"],
    ["esc\u001b[0m", "control-character"],
    ["lone \ud800 surrogate", "invalid-utf8"],
    ["lone \udc00 low surrogate", "invalid-utf8"],
  ])("refuses %j (%s)", (key, reason) => {
    expect(objectKeyProblem(key)?.reason).toBe(reason);
    expect(isValidObjectKey(key)).toBe(false);
  });

  it("counts the length limit in UTF-8 bytes", () => {
    expect(MAX_OBJECT_KEY_BYTES).toBe(1024);
    expect(isValidObjectKey("a".repeat(1024))).toBe(true);
    expect(objectKeyProblem("a".repeat(1025))?.reason).toBe("too-long");
    expect(isValidObjectKey("é".repeat(512))).toBe(true); // 2 bytes each
    expect(objectKeyProblem("é".repeat(513))?.reason).toBe("too-long");
    expect(isValidObjectKey("😀".repeat(256))).toBe(true); // 4 bytes each
    expect(objectKeyProblem("😀".repeat(257))?.reason).toBe("too-long");
  });

  it("throws DomainError InvalidObjectName with the reason", () => {
    try {
      assertValidObjectKey("a/../b");
      expect.unreachable();
    } catch (e) {
      expect(e).toBeInstanceOf(DomainError);
      expect(e).toMatchObject({
        code: "InvalidObjectName",
        details: { key: "a/../b", reason: "dot-segment" },
      });
    }
  });
});

describe("bucket name rules", () => {
  it.each(["abc", "my-bucket", "my.bucket.name", "a1b", "0-0", "x".repeat(63), "192.168.1.1a", "1.2.3"])(
    "accepts %j",
    (name) => {
      expect(bucketNameProblem(name)).toBeNull();
      expect(isValidBucketName(name)).toBe(true);
    },
  );

  it.each([
    "ab",
    "x".repeat(64),
    "My-Bucket",
    "under_score",
    "-leading",
    "trailing-",
    ".leading",
    "trailing.",
    "a..b",
    "192.168.1.1",
    "10.0.0.255",
    "xn--punycode",
    "sthree-bucket",
    "name-s3alias",
    "name--ol-s3",
    "name.mrap",
    "name--x-s3",
    "spa ce",
    "ünï",
  ])("refuses %j", (name) => {
    expect(isValidBucketName(name)).toBe(false);
    expect(() => assertValidBucketName(name)).toThrow(expect.objectContaining({ code: "InvalidBucketName" }));
  });
});
