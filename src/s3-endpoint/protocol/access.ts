import type { AccessPolicy, Action, Scope } from "../../access/access-policy.js";
import { DomainError } from "../../core/errors.js";
import type { S3Request } from "./context.js";
import { copySource } from "./copy-source.js";
import { textParam } from "./query.js";

/**
 * The rights an S3 request needs, checked once in the handler before its operation runs, so
 * before any body is read or any backend touched. Each route in routes.ts declares its needs;
 * presigned requests authenticate as their signer and go through the same check.
 */

/** What part of the bucket a need is about. */
export type NeedScope =
  /** The request's object key. */
  | "key"
  /** The listing's `prefix` parameter ("" when absent: the whole bucket). */
  | "prefix"
  /** The whole bucket: creating or deleting it, changing its settings. */
  | "bucket"
  /** Some part of the bucket: probing it, reading its settings (a key limited to a prefix may). */
  | "somewhere"
  /** The object named by x-amz-copy-source, in its own bucket. */
  | "copy-source";

export type Need = { action: Action; on: NeedScope };

/** A route's needs: fixed, or chosen by the request (an unsupported sub-resource read or written). */
export type Needs = readonly Need[] | ((req: S3Request) => readonly Need[]);

const READS = new Set(["GET", "HEAD"]);

/**
 * For routes that answer the same refusal whatever they are asked (unsupported sub-resources,
 * methods a resource does not allow): a GET or HEAD needs `read`, anything else `write`, so that
 * a key without rights learns nothing, not even which sub-resources exist.
 */
export const readOrWrite =
  (read: NeedScope, write: NeedScope): Needs =>
  (req) =>
    READS.has(req.method) ? [{ action: "read", on: read }] : [{ action: "write", on: write }];

const DENIALS = new WeakSet<object>();

/** S3's refusal, word for word; marked so the handler can tell it from SigV4's AccessDenied. */
export function accessDenied(): DomainError {
  const err = new DomainError("AccessDenied", "Access Denied");
  DENIALS.add(err);
  return err;
}

/** Whether an error is a refusal by the access policy (not by authentication). */
export function isAccessDenial(err: unknown): boolean {
  return typeof err === "object" && err !== null && DENIALS.has(err);
}

/** Throws AccessDenied unless the principal may do `action` on `scope` of `bucket`. */
export function assertAllowed(
  access: AccessPolicy,
  principal: string,
  action: Action,
  bucket: string,
  scope: Scope,
): void {
  if (!access.allows(principal, action, bucket, scope)) throw accessDenied();
}

/** Throws AccessDenied unless the request's principal has every right the route needs. */
export function checkNeeds(needs: Needs, req: S3Request, access: AccessPolicy): void {
  const list = typeof needs === "function" ? needs(req) : needs;
  for (const need of list) if (!hasNeed(need, req, access)) throw accessDenied();
}

function hasNeed({ action, on }: Need, req: S3Request, access: AccessPolicy): boolean {
  const { bucket, principal } = req;
  // A need names a part of a bucket; a request without one cannot have it.
  if (bucket === null) return false;
  switch (on) {
    case "key":
      return req.key !== null && access.allows(principal, action, bucket, { key: req.key });
    case "prefix":
      return access.allows(principal, action, bucket, { prefix: textParam(req.query, "prefix") ?? "" });
    case "bucket":
      return access.allows(principal, action, bucket, { bucket: true });
    case "somewhere":
      return access.allowsSomewhere(principal, action, bucket);
    case "copy-source": {
      const source = copySource(req);
      return access.allows(principal, action, source.bucket, { key: source.key });
    }
  }
}
