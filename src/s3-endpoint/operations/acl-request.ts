import { DomainError } from "../../core/errors.js";
import { header, type S3Request } from "../protocol/context.js";

/**
 * Access control in a single-owner store: every bucket and object belongs to the caller's
 * account and nobody else has any access, which is what S3 calls ACLs disabled (Object
 * Ownership "bucket owner enforced"). ACLs are read as the owner's full control; a request that
 * asks for exactly that (the canned `private`, or `bucket-owner-full-control` on an object) is
 * accepted, and any other grant is refused as S3 refuses it on such a bucket, never stored as if
 * it were enforced.
 */

const CANNED_ACLS: ReadonlySet<string> = new Set([
  "private",
  "public-read",
  "public-read-write",
  "authenticated-read",
  "aws-exec-read",
  "bucket-owner-read",
  "bucket-owner-full-control",
  "log-delivery-write",
]);

/** The canned ACLs that say what this store enforces: the owner, and only the owner, has full control. */
const ENFORCED: Record<"bucket" | "object", readonly string[]> = {
  bucket: ["private"],
  object: ["private", "bucket-owner-full-control"],
};

export const GRANT_HEADERS = [
  "x-amz-grant-read",
  "x-amz-grant-write",
  "x-amz-grant-read-acp",
  "x-amz-grant-write-acp",
  "x-amz-grant-full-control",
];

export const notSupported = () =>
  new DomainError("AccessControlListNotSupported", "The bucket does not allow ACLs", {
    reason: "fencegate is a single-owner store: only the owner's full control can be granted",
  });

/** A request header, or for a presigned URL the query parameter the SDK presigner hoisted it into. */
export function requested(req: S3Request, name: string): string | undefined {
  return header(req, name) ?? (req.presigned ? (req.query.get(name) ?? undefined) : undefined);
}

/** Validates x-amz-acl and x-amz-grant-* on a write (CreateBucket, PutObject, CopyObject, ...). */
export function checkRequestedAcl(req: S3Request, target: "bucket" | "object"): void {
  const canned = requested(req, "x-amz-acl")?.trim();
  if (canned !== undefined) {
    if (!CANNED_ACLS.has(canned)) {
      throw new DomainError("InvalidArgument", `The canned ACL "${canned.slice(0, 64)}" is not valid.`, {
        ArgumentName: "x-amz-acl",
        ArgumentValue: canned.slice(0, 64),
      });
    }
    if (!ENFORCED[target].includes(canned)) throw notSupported();
  }
  if (GRANT_HEADERS.some((name) => requested(req, name) !== undefined)) throw notSupported();
}
