import { DomainError } from "../core/errors.js";
import { bucketNameProblem, MAX_OBJECT_KEY_BYTES, objectKeyProblem } from "../core/key-rules.js";
import { textProblem } from "../leases/lease-rules.js";
import type { LeaseResource } from "../leases/lease-store.js";

/**
 * What the lease API accepts as a lease's resource and owner: the S3 endpoint's own bucket and
 * key rules (src/core/key-rules.ts), so that nothing is leased that S3 would refuse to write,
 * and nothing ill-formed (a lone UTF-16 surrogate, a NUL) reaches the lease store, the signed
 * token or a backend, where each would see a different string.
 */
export function leaseResourceOf(body: Record<string, unknown>): LeaseResource {
  const { bucket, key, prefix } = body;
  if (typeof bucket !== "string" || bucket.length === 0) throw invalid("bucket is required");
  const bucketProblem = bucketNameProblem(bucket);
  if (bucketProblem) throw invalid(bucketProblem);
  if ((key === undefined) === (prefix === undefined)) throw invalid('give exactly one of "key" or "prefix"');
  if (key !== undefined) {
    if (typeof key !== "string") throw invalid("key must be a string of 1 to 1024 bytes");
    const problem = objectKeyProblem(key);
    if (problem) throw invalid(problem.message);
    return { bucket, key };
  }
  if (typeof prefix !== "string") throw invalid("prefix must be a string of at most 1024 bytes");
  const problem = prefixProblem(prefix);
  if (problem) throw invalid(problem);
  return { bucket, prefix };
}

/**
 * A prefix is accepted when some valid key starts with it: the key rules applied to the prefix
 * followed by one more character (its last segment may still grow, so "a/." and "a/.." are fine
 * as prefixes of "a/.x" and "a/..x"; "../" and "/x" are not).
 */
export function prefixProblem(prefix: string): string | null {
  if (prefix === "") return null;
  if (Buffer.byteLength(prefix, "utf8") > MAX_OBJECT_KEY_BYTES) {
    return `prefix must be at most ${MAX_OBJECT_KEY_BYTES} bytes long (UTF-8)`;
  }
  const problem = objectKeyProblem(`${prefix}x`);
  if (problem && problem.reason !== "too-long") return problem.message.replace("object key", "prefix");
  return null;
}

const CONTROL = /[\u0000-\u001f\u007f]/;

/** An owner label: 1 to 256 characters of well-formed text without control characters. */
export function leaseOwnerOf(value: unknown, fallback: string): string {
  const owner = value ?? fallback;
  if (typeof owner !== "string" || owner.length === 0 || owner.length > 256) {
    throw invalid("owner must be a string of 1 to 256 characters");
  }
  const problem =
    textProblem("owner", owner) ?? (CONTROL.test(owner) ? "owner must not contain control characters" : null);
  if (problem) throw invalid(problem);
  return owner;
}

/** A listing filter from the query string: well-formed, or refused. */
export function filterParam(name: string, value: string | undefined): string | undefined {
  if (value === undefined || value === "") return undefined;
  const problem = textProblem(name, value);
  if (problem) throw invalid(problem);
  return value;
}

function invalid(message: string): DomainError {
  return new DomainError("InvalidRequest", message);
}
