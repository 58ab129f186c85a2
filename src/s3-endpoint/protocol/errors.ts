import { type DomainErrorCode, type ErrorDetails, isDomainError } from "../../core/errors.js";
import { renderXml } from "./xml.js";

/** An error as S3 puts it on the wire. */
export type S3WireError = {
  code: string;
  message: string;
  status: number;
  /** Extra elements of the error document (HighestToken, StringToSign, ...). */
  extra: Record<string, string | number>;
  /** Whole seconds for a Retry-After header (throttling, a busy backend). */
  retryAfterSeconds?: number;
  /** "unknown": a write whose outcome the gateway could not learn (header x-fence-outcome). */
  outcome?: "unknown";
};

type Wire = readonly [code: string, status: number];

/**
 * Every domain error as the S3 endpoint answers it: S3's own code and status where S3 has the
 * error, the contract's fencing codes otherwise. A Record over the closed set of domain codes,
 * so a new domain code does not compile until it has its S3 form.
 */
const S3_WIRE: Record<DomainErrorCode, Wire> = {
  FencingTokenRequired: ["FencingTokenRequired", 428],
  InvalidFencingToken: ["InvalidFencingToken", 403],
  FencingTokenScopeMismatch: ["FencingTokenScopeMismatch", 403],
  StaleFencingToken: ["StaleFencingToken", 409],
  LeaseExpired: ["LeaseExpired", 409],
  LeaseHeld: ["LeaseHeld", 409],
  LeaseNotFound: ["LeaseNotFound", 404],
  LeaseLost: ["LeaseLost", 409],
  LeaseStoreUnavailable: ["ServiceUnavailable", 503],
  TransactionNotFound: ["NoSuchTransaction", 404],
  TransactionAborted: ["TransactionAborted", 409],
  TransactionCommitted: ["TransactionCommitted", 409],
  AccessDenied: ["AccessDenied", 403],
  InvalidAccessKeyId: ["InvalidAccessKeyId", 403],
  SignatureDoesNotMatch: ["SignatureDoesNotMatch", 403],
  RequestTimeTooSkewed: ["RequestTimeTooSkewed", 403],
  AuthorizationHeaderMalformed: ["AuthorizationHeaderMalformed", 400],
  AuthorizationQueryParametersError: ["AuthorizationQueryParametersError", 400],
  MissingSecurityHeader: ["MissingSecurityHeader", 400],
  XAmzContentSHA256Mismatch: ["XAmzContentSHA256Mismatch", 400],
  NoSuchBucket: ["NoSuchBucket", 404],
  NoSuchKey: ["NoSuchKey", 404],
  NoSuchUpload: ["NoSuchUpload", 404],
  BucketNotEmpty: ["BucketNotEmpty", 409],
  BucketAlreadyOwnedByYou: ["BucketAlreadyOwnedByYou", 409],
  OperationAborted: ["OperationAborted", 409],
  InvalidBucketName: ["InvalidBucketName", 400],
  InvalidObjectName: ["InvalidArgument", 400],
  KeyTooLong: ["KeyTooLongError", 400],
  PreconditionFailed: ["PreconditionFailed", 412],
  NotModified: ["NotModified", 304],
  InvalidRange: ["InvalidRange", 416],
  InvalidPart: ["InvalidPart", 400],
  InvalidPartOrder: ["InvalidPartOrder", 400],
  EntityTooSmall: ["EntityTooSmall", 400],
  EntityTooLarge: ["EntityTooLarge", 400],
  MetadataTooLarge: ["MetadataTooLarge", 400],
  InvalidPartNumber: ["InvalidPartNumber", 416],
  InvalidStorageClass: ["InvalidStorageClass", 400],
  InvalidLocationConstraint: ["InvalidLocationConstraint", 400],
  IllegalLocationConstraintException: ["IllegalLocationConstraintException", 400],
  AccessControlListNotSupported: ["AccessControlListNotSupported", 400],
  MalformedACLError: ["MalformedACLError", 400],
  BadDigest: ["BadDigest", 400],
  InvalidDigest: ["InvalidDigest", 400],
  IncompleteBody: ["IncompleteBody", 400],
  MissingContentLength: ["MissingContentLength", 411],
  MaxMessageLengthExceeded: ["MaxMessageLengthExceeded", 400],
  MalformedXML: ["MalformedXML", 400],
  InvalidArgument: ["InvalidArgument", 400],
  InvalidRequest: ["InvalidRequest", 400],
  InvalidURI: ["InvalidURI", 400],
  MethodNotAllowed: ["MethodNotAllowed", 405],
  ExpectationFailed: ["ExpectationFailed", 417],
  NotImplemented: ["NotImplemented", 501],
  NoSuchEndpoint: ["InvalidRequest", 400],
  BadRequest: ["BadRequest", 400],
  RequestHeaderSectionTooLarge: ["RequestHeaderSectionTooLarge", 400],
  RequestTimeout: ["RequestTimeout", 400],
  NoSuchBucketPolicy: ["NoSuchBucketPolicy", 404],
  NoSuchCORSConfiguration: ["NoSuchCORSConfiguration", 404],
  NoSuchLifecycleConfiguration: ["NoSuchLifecycleConfiguration", 404],
  NoSuchTagSet: ["NoSuchTagSet", 404],
  NoSuchWebsiteConfiguration: ["NoSuchWebsiteConfiguration", 404],
  ServerSideEncryptionConfigurationNotFoundError: ["ServerSideEncryptionConfigurationNotFoundError", 404],
  ObjectLockConfigurationNotFoundError: ["ObjectLockConfigurationNotFoundError", 404],
  OwnershipControlsNotFoundError: ["OwnershipControlsNotFoundError", 404],
  NoSuchPublicAccessBlockConfiguration: ["NoSuchPublicAccessBlockConfiguration", 404],
  ReplicationConfigurationNotFoundError: ["ReplicationConfigurationNotFoundError", 404],
  SlowDown: ["SlowDown", 503],
  ServiceUnavailable: ["ServiceUnavailable", 503],
  InternalError: ["InternalError", 500],
};

const INTERNAL: S3WireError = {
  code: "InternalError",
  message: "We encountered an internal error. Please try again.",
  status: 500,
  extra: {},
};

/** Any thrown value → the S3 error to send. Anything but a DomainError is an InternalError (500). */
export function toS3Error(err: unknown): S3WireError {
  if (!isDomainError(err)) return INTERNAL;
  const [code, status] = S3_WIRE[err.code];
  const wire: S3WireError = { code, status, message: err.message, extra: extraElements(err.details) };
  const retryAfter = err.details.retryAfterSeconds;
  if (typeof retryAfter === "number" && Number.isFinite(retryAfter) && retryAfter >= 0) {
    wire.retryAfterSeconds = Math.ceil(retryAfter);
  }
  if (err.details.outcome === "unknown") wire.outcome = "unknown";
  return wire;
}

/** PascalCase details are S3 error elements; highestToken is the contract's HighestToken. */
function extraElements(details: ErrorDetails): Record<string, string | number> {
  const out: Record<string, string | number> = {};
  for (const [name, value] of Object.entries(details)) {
    if (typeof value !== "string" && typeof value !== "number") continue;
    if (name === "highestToken") out.HighestToken = value;
    else if (/^[A-Z]/.test(name)) out[name] = value;
  }
  return out;
}

export function renderS3Error(err: S3WireError, resource: string, requestId: string): string {
  return renderXml(
    "Error",
    { Code: err.code, Message: err.message, Resource: resource, RequestId: requestId, ...err.extra },
    { namespace: false },
  );
}
