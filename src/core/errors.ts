/**
 * Domain errors: the one error class below the edge. Every failure a client can be told about
 * is a DomainError with a code from this closed set; the S3 endpoint and the lease API each map
 * the codes to their wire form in one table (src/s3-endpoint/protocol/errors.ts, src/api/errors.ts), which the
 * type system checks for completeness. Nothing below the edge builds an HTTP response.
 *
 * `details` carries facts a client may use. Keys in PascalCase are extra elements of S3's error
 * document (StringToSign, ArgumentName, ...: the SigV4 and body layers speak S3's protocol);
 * camelCase keys (highestToken, leaseId, heldBy, ...) go to the lease API's JSON and the logs.
 */
export const DOMAIN_ERROR_CODES = [
  // fencing (the contract's names)
  "FencingTokenRequired",
  "InvalidFencingToken",
  "FencingTokenScopeMismatch",
  "StaleFencingToken",
  "LeaseExpired",
  // leases
  "LeaseHeld",
  "LeaseNotFound",
  "LeaseLost",
  "LeaseStoreUnavailable",
  // fenced transactions
  "TransactionNotFound",
  "TransactionAborted",
  "TransactionCommitted",
  // authentication and authorization
  "AccessDenied",
  "InvalidAccessKeyId",
  "SignatureDoesNotMatch",
  "RequestTimeTooSkewed",
  "AuthorizationHeaderMalformed",
  "AuthorizationQueryParametersError",
  "MissingSecurityHeader",
  "XAmzContentSHA256Mismatch",
  // buckets and objects
  "NoSuchBucket",
  "NoSuchKey",
  "NoSuchUpload",
  "BucketNotEmpty",
  "BucketAlreadyOwnedByYou",
  /** A conflicting operation on the same resource is in progress (a bucket being deleted). */
  "OperationAborted",
  "InvalidBucketName",
  "InvalidObjectName",
  "KeyTooLong",
  "PreconditionFailed",
  "NotModified",
  "InvalidRange",
  "InvalidPart",
  "InvalidPartOrder",
  "EntityTooSmall",
  "EntityTooLarge",
  "MetadataTooLarge",
  "InvalidPartNumber",
  "InvalidStorageClass",
  // bucket creation and access control (a single-owner store: only the owner's full control exists)
  "InvalidLocationConstraint",
  "IllegalLocationConstraintException",
  "AccessControlListNotSupported",
  "MalformedACLError",
  // request bodies
  "BadDigest",
  "InvalidDigest",
  "IncompleteBody",
  "MissingContentLength",
  "MaxMessageLengthExceeded",
  "MalformedXML",
  // requests in general
  "InvalidArgument",
  "InvalidRequest",
  "InvalidURI",
  "MethodNotAllowed",
  /** An Expect header other than 100-continue. */
  "ExpectationFailed",
  "NotImplemented",
  "NoSuchEndpoint",
  "BadRequest",
  "RequestHeaderSectionTooLarge",
  "RequestTimeout",
  // bucket settings fencegate never configures: S3's "not found" answer for each
  "NoSuchBucketPolicy",
  "NoSuchCORSConfiguration",
  "NoSuchLifecycleConfiguration",
  "NoSuchTagSet",
  "NoSuchWebsiteConfiguration",
  "ServerSideEncryptionConfigurationNotFoundError",
  "ObjectLockConfigurationNotFoundError",
  "OwnershipControlsNotFoundError",
  "NoSuchPublicAccessBlockConfiguration",
  "ReplicationConfigurationNotFoundError",
  // the service
  "SlowDown",
  "ServiceUnavailable",
  "InternalError",
] as const;

export type DomainErrorCode = (typeof DOMAIN_ERROR_CODES)[number];

export type ErrorDetails = Record<string, unknown>;

export class DomainError extends Error {
  override name = "DomainError";
  readonly code: DomainErrorCode;
  /** Extra facts for the client (see the file comment for the key convention). */
  readonly details: ErrorDetails;

  constructor(code: DomainErrorCode, message: string, details: ErrorDetails = {}, options?: ErrorOptions) {
    super(message, options);
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

/**
 * A write or commit sent to a store whose answer never came (lost, late, cut off): it may or may
 * not have happened. Answered 503 with `x-fence-outcome: unknown`, never as refused; the gateway
 * (or a repeat of the request) learns the outcome later.
 */
export function outcomeUnknown(message: string, cause: unknown, details: ErrorDetails = {}): DomainError {
  return new DomainError("ServiceUnavailable", message, { outcome: "unknown", ...details }, { cause });
}

/** Whether an error says that the outcome of a write or commit is unknown (see outcomeUnknown). */
export const isOutcomeUnknown = (err: unknown): boolean =>
  isDomainError(err) && err.details.outcome === "unknown";

/** The HCT a refusal carries, when it knows it (x-fence-highest-token, the audit record). */
export function highestTokenOf(err: unknown): number | undefined {
  if (!isDomainError(err)) return undefined;
  const value = err.details.highestToken;
  return typeof value === "number" ? value : undefined;
}
