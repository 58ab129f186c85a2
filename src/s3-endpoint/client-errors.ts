import type { DomainError } from "../core/errors.js";
import type { EdgeAnswer } from "../http/edge-answers.js";
import { splitRawUrl } from "../http/raw-url.js";
import { renderS3Error, toS3Error } from "./protocol/errors.js";

/** A Resource element names the path as received, cut short: the target may be kilobytes long. */
const MAX_RESOURCE_CHARS = 1024;

/**
 * A refusal of a request that never reached the S3 handler (the HTTP parser's, a timeout, a
 * target the router cannot read) as S3 answers: an XML error document with the request id.
 */
export function s3EdgeAnswer(err: DomainError, target: string | undefined, requestId: string): EdgeAnswer {
  const s3err = toS3Error(err);
  const resource = target === undefined ? "/" : splitRawUrl(target).rawPath.slice(0, MAX_RESOURCE_CHARS);
  return {
    status: s3err.status,
    contentType: "application/xml",
    body: renderS3Error(s3err, resource, requestId),
  };
}
