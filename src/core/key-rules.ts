import { DomainError } from "./errors.js";

/**
 * Object key and bucket name rules shared by every backend and by the S3 layer.
 *
 * Keys are refused when a filesystem-like backend (the fs backend's ancestors, ADLS Gen2
 * with a hierarchical namespace, a future POSIX backend) could resolve them outside the
 * bucket's root, or when they cannot be carried in S3 XML. All backends refuse the same
 * keys, so that an object written through one backend can be moved to another.
 */

/** S3's limit, in UTF-8 bytes. */
export const MAX_OBJECT_KEY_BYTES = 1024;

/** Why a key is refused. */
type ObjectKeyProblem = {
  reason:
    | "empty"
    | "too-long"
    | "invalid-utf8"
    | "control-character"
    | "backslash"
    | "leading-slash"
    | "dot-segment";
  message: string;
};

// C0 controls other than tab, LF and CR cannot appear in XML 1.0, even escaped, so a listing
// could not return such a key.
const FORBIDDEN_CONTROL = /[\u0000-\u0008\u000b\u000c\u000e-\u001f]/;
// A lone surrogate has no UTF-8 encoding: the key could not be stored or signed as sent.
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

export function objectKeyProblem(key: string): ObjectKeyProblem | null {
  if (key.length === 0) return { reason: "empty", message: "object key must not be empty" };
  if (LONE_SURROGATE.test(key)) {
    return { reason: "invalid-utf8", message: "object key is not valid UTF-8" };
  }
  const bytes = Buffer.byteLength(key, "utf8");
  if (bytes > MAX_OBJECT_KEY_BYTES) {
    return {
      reason: "too-long",
      message: `object key is ${bytes} bytes long; the maximum is ${MAX_OBJECT_KEY_BYTES} bytes (UTF-8)`,
    };
  }
  if (FORBIDDEN_CONTROL.test(key)) {
    return {
      reason: "control-character",
      message: "object key must not contain NUL or control characters other than tab, LF and CR",
    };
  }
  if (key.includes("\\")) return { reason: "backslash", message: "object key must not contain a backslash" };
  if (key.startsWith("/")) return { reason: "leading-slash", message: "object key must not start with '/'" };
  for (const segment of key.split("/")) {
    if (segment === "." || segment === "..") {
      return { reason: "dot-segment", message: "object key must not contain a '.' or '..' path segment" };
    }
  }
  return null;
}

export const isValidObjectKey = (key: string): boolean => objectKeyProblem(key) === null;

/** Throws DomainError KeyTooLong for a key over 1024 bytes, InvalidObjectName (details.reason tells which rule) otherwise. */
export function assertValidObjectKey(key: string): void {
  const problem = objectKeyProblem(key);
  if (problem) {
    const code = problem.reason === "too-long" ? "KeyTooLong" : "InvalidObjectName";
    throw new DomainError(code, problem.message, { key, reason: problem.reason });
  }
}

const BUCKET_CHARS = /^[a-z0-9][a-z0-9.-]*[a-z0-9]$/;
const IP_LIKE = /^\d{1,3}(\.\d{1,3}){3}$/;
// Prefixes and suffixes S3 reserves for its own features (access points, directory buckets...).
const RESERVED_PREFIXES = ["xn--", "sthree-", "amzn-s3-demo-"];
const RESERVED_SUFFIXES = ["-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"];

/** S3's general-purpose bucket naming rules; null when the name is valid. */
export function bucketNameProblem(name: string): string | null {
  if (name.length < 3 || name.length > 63) return "bucket name must be 3 to 63 characters long";
  if (!BUCKET_CHARS.test(name)) {
    return "bucket name may contain only lowercase letters, digits, dots and hyphens, and must start and end with a letter or digit";
  }
  if (name.includes("..")) return "bucket name must not contain two adjacent dots";
  if (IP_LIKE.test(name)) return "bucket name must not look like an IP address";
  if (RESERVED_PREFIXES.some((p) => name.startsWith(p)) || RESERVED_SUFFIXES.some((s) => name.endsWith(s))) {
    return "bucket name uses a prefix or suffix reserved by S3";
  }
  return null;
}

export const isValidBucketName = (name: string): boolean => bucketNameProblem(name) === null;

/** Throws DomainError InvalidBucketName. */
export function assertValidBucketName(name: string): void {
  const problem = bucketNameProblem(name);
  if (problem) throw new DomainError("InvalidBucketName", problem, { bucket: name });
}
