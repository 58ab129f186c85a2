/**
 * Domain errors. Storage, lease and fencing code throws these; the S3 layer and the
 * lease API map them to wire errors in one table each (src/s3/errors.ts,
 * src/api/errors.ts). Nothing below the edge builds an HTTP response.
 */
export type DomainErrorCode =
  // fencing (contract names)
  | "FencingTokenRequired"
  | "InvalidFencingToken"
  | "FencingTokenScopeMismatch"
  | "StaleFencingToken"
  | "LeaseExpired"
  // leases
  | "LeaseHeld"
  | "LeaseNotFound"
  | "LeaseLost"
  // storage
  | "NoSuchBucket"
  | "NoSuchKey"
  | "BucketNotEmpty"
  | "BucketAlreadyOwnedByYou"
  | "InvalidBucketName"
  | "InvalidObjectName"
  | "PreconditionFailed"
  | "NotModified"
  | "InvalidRange"
  | "BadDigest"
  | "InvalidDigest"
  | "IncompleteBody"
  | "EntityTooLarge"
  | "EntityTooSmall"
  | "NoSuchUpload"
  | "InvalidPart"
  | "InvalidPartOrder"
  | "InvalidArgument"
  | "InvalidRequest"
  | "MalformedXML"
  | "NotImplemented"
  | "ServiceUnavailable";

export class DomainError extends Error {
  readonly code: DomainErrorCode;
  /** Extra fields a client may use (e.g. highestToken, holder). */
  readonly details: Record<string, unknown>;

  constructor(code: DomainErrorCode, message: string, details: Record<string, unknown> = {}) {
    super(message);
    this.name = "DomainError";
    this.code = code;
    this.details = details;
  }
}

export const isDomainError = (e: unknown): e is DomainError => e instanceof DomainError;

/** A write refused because its token is below the object's highest committed token. */
export class StaleTokenError extends DomainError {
  readonly highestToken: number;
  constructor(token: number, highestToken: number) {
    super(
      "StaleFencingToken",
      `fencing token ${token} is below the highest committed token ${highestToken} for this object`,
      { highestToken },
    );
    this.highestToken = highestToken;
  }
}
