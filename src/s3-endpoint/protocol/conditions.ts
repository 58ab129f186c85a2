import type { IncomingHttpHeaders } from "node:http";
import type { ObjectInfo } from "../../backends/storage-backend.js";
import { DomainError } from "../../core/errors.js";
import { etagListMatches } from "../../core/etag.js";
import { headerValue } from "../../http/sigv4/index.js";

/** The outcome of evaluating conditional headers against an object. */
type ConditionResult = "proceed" | "not-modified";

type Names = { ifMatch: string; ifNoneMatch: string; ifModifiedSince: string; ifUnmodifiedSince: string };

const READ: Names = {
  ifMatch: "if-match",
  ifNoneMatch: "if-none-match",
  ifModifiedSince: "if-modified-since",
  ifUnmodifiedSince: "if-unmodified-since",
};

const COPY_SOURCE: Names = {
  ifMatch: "x-amz-copy-source-if-match",
  ifNoneMatch: "x-amz-copy-source-if-none-match",
  ifModifiedSince: "x-amz-copy-source-if-modified-since",
  ifUnmodifiedSince: "x-amz-copy-source-if-unmodified-since",
};

/**
 * GET/HEAD conditions in RFC 9110 order, as S3 applies them: If-Match (else
 * If-Unmodified-Since) decides 412; then If-None-Match (else If-Modified-Since) decides 304.
 */
export function evaluateReadConditions(headers: IncomingHttpHeaders, info: ObjectInfo): ConditionResult {
  return evaluate(headers, info, READ, "not-modified");
}

/** CopyObject's x-amz-copy-source-if-* headers: every failure is 412. */
export function checkCopySourceConditions(headers: IncomingHttpHeaders, info: ObjectInfo): void {
  evaluate(headers, info, COPY_SOURCE, "fail");
}

function evaluate(
  headers: IncomingHttpHeaders,
  info: ObjectInfo,
  names: Names,
  onNotModified: "not-modified" | "fail",
): ConditionResult {
  const ifMatch = headerValue(headers, names.ifMatch);
  const ifNoneMatch = headerValue(headers, names.ifNoneMatch);
  const modifiedSince = date(headerValue(headers, names.ifModifiedSince));
  const unmodifiedSince = date(headerValue(headers, names.ifUnmodifiedSince));
  const modified = Math.floor(info.lastModified.getTime() / 1000) * 1000;

  if (ifMatch !== undefined) {
    if (!etagListMatches(ifMatch, info.etag)) throw preconditionFailed(names.ifMatch);
  } else if (unmodifiedSince !== undefined && modified > unmodifiedSince) {
    throw preconditionFailed(names.ifUnmodifiedSince);
  }
  let notModified = false;
  if (ifNoneMatch !== undefined) notModified = etagListMatches(ifNoneMatch, info.etag);
  else if (modifiedSince !== undefined) notModified = modified <= modifiedSince;
  if (!notModified) return "proceed";
  if (onNotModified === "fail")
    throw preconditionFailed(ifNoneMatch !== undefined ? names.ifNoneMatch : names.ifModifiedSince);
  return "not-modified";
}

function preconditionFailed(header: string): DomainError {
  return new DomainError(
    "PreconditionFailed",
    "At least one of the pre-conditions you specified did not hold",
    {
      condition: header,
    },
  );
}

/** An unparseable date is ignored, as S3 does. */
function date(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const ms = Date.parse(v);
  return Number.isNaN(ms) ? undefined : ms;
}
