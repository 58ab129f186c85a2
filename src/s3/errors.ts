import { isDomainError } from "../core/errors.js";
import { renderXml } from "./xml.js";

/** An error as S3 puts it on the wire. */
export class S3Error extends Error {
  override name = "S3Error";
  constructor(
    readonly code: string,
    message: string,
    readonly status: number = statusFor(code),
    readonly extra: Record<string, string | number | null | undefined> = {},
  ) {
    super(message);
  }
}

/** Status codes of S3's error list, plus fencegate's fencing errors (contract). */
const STATUS: Record<string, number> = {
  AccessDenied: 403,
  InvalidAccessKeyId: 403,
  SignatureDoesNotMatch: 403,
  RequestTimeTooSkewed: 403,
  InvalidFencingToken: 403,
  FencingTokenScopeMismatch: 403,
  NoSuchBucket: 404,
  NoSuchKey: 404,
  NoSuchUpload: 404,
  NoSuchLifecycleConfiguration: 404,
  NoSuchBucketPolicy: 404,
  NoSuchCORSConfiguration: 404,
  NoSuchTagSet: 404,
  NoSuchWebsiteConfiguration: 404,
  NoSuchVersion: 404,
  ServerSideEncryptionConfigurationNotFoundError: 404,
  ObjectLockConfigurationNotFoundError: 404,
  OwnershipControlsNotFoundError: 404,
  NoSuchPublicAccessBlockConfiguration: 404,
  ReplicationConfigurationNotFoundError: 404,
  MethodNotAllowed: 405,
  BucketNotEmpty: 409,
  BucketAlreadyOwnedByYou: 409,
  BucketAlreadyExists: 409,
  StaleFencingToken: 409,
  LeaseExpired: 409,
  MissingContentLength: 411,
  PreconditionFailed: 412,
  InvalidRange: 416,
  FencingTokenRequired: 428,
  NotModified: 304,
  InternalError: 500,
  NotImplemented: 501,
  ServiceUnavailable: 503,
  SlowDown: 503,
};

export function statusFor(code: string): number {
  return STATUS[code] ?? 400;
}

/** Domain codes whose S3 name differs. */
const S3_CODE: Record<string, string> = {
  InvalidObjectName: "InvalidArgument",
};

/** Any thrown value → the S3 error to send. Unknown errors become InternalError (500). */
export function toS3Error(err: unknown): S3Error {
  if (err instanceof S3Error) return err;
  if (isDomainError(err)) {
    const s3Code = err.details.s3Code;
    const tooLong = err.code === "InvalidObjectName" && err.details.reason === "too-long";
    const code =
      typeof s3Code === "string" ? s3Code : tooLong ? "KeyTooLongError" : (S3_CODE[err.code] ?? err.code);
    const highest = err.details.highestToken;
    return new S3Error(code, err.message, statusFor(code), {
      HighestToken: typeof highest === "number" ? highest : undefined,
    });
  }
  const e = err as { code?: unknown; status?: unknown; message?: unknown; details?: unknown };
  if (typeof e?.code === "string" && typeof e.status === "number" && e.status >= 300 && e.status < 600) {
    // S3's extra elements (StringToSign, CanonicalRequest, ...) help clients debug signatures.
    const extra =
      typeof e.details === "object" && e.details !== null ? (e.details as Record<string, string>) : {};
    return new S3Error(e.code, String(e.message ?? e.code), e.status, extra);
  }
  return new S3Error("InternalError", "We encountered an internal error. Please try again.", 500);
}

export function renderS3Error(err: S3Error, resource: string, requestId: string): string {
  return renderXml(
    "Error",
    { Code: err.code, Message: err.message, Resource: resource, RequestId: requestId, ...err.extra },
    { namespace: false },
  );
}
