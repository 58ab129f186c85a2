import { type DomainErrorCode, isDomainError } from "../core/errors.js";

/** Lease API errors as JSON: {"error": {"code", "message", ...details}}. */
type ApiError = { status: number; body: { error: Record<string, unknown> } };

/**
 * Every domain error as the lease API answers it: its code (the domain code, but for the few
 * renamed here) and HTTP status. A Record over the closed set of domain codes, so a new domain
 * code does not compile until it has its JSON form.
 */
const API_WIRE: Record<DomainErrorCode, readonly [code: string, status: number]> = {
  FencingTokenRequired: ["FencingTokenRequired", 428],
  InvalidFencingToken: ["InvalidFencingToken", 403],
  FencingTokenScopeMismatch: ["FencingTokenScopeMismatch", 403],
  StaleFencingToken: ["StaleFencingToken", 409],
  LeaseExpired: ["LeaseExpired", 409],
  LeaseHeld: ["LeaseHeld", 409],
  LeaseNotFound: ["LeaseNotFound", 404],
  LeaseLost: ["LeaseLost", 409],
  LeaseStoreUnavailable: ["LeaseStoreUnavailable", 503],
  TransactionNotFound: ["TransactionNotFound", 404],
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
  InvalidBucketName: ["InvalidRequest", 400],
  InvalidObjectName: ["InvalidRequest", 400],
  KeyTooLong: ["InvalidRequest", 400],
  PreconditionFailed: ["PreconditionFailed", 412],
  NotModified: ["NotModified", 304],
  InvalidRange: ["InvalidRange", 416],
  InvalidPart: ["InvalidRequest", 400],
  InvalidPartOrder: ["InvalidRequest", 400],
  EntityTooSmall: ["InvalidRequest", 400],
  EntityTooLarge: ["PayloadTooLarge", 413],
  MetadataTooLarge: ["InvalidRequest", 400],
  InvalidPartNumber: ["InvalidRequest", 416],
  InvalidStorageClass: ["InvalidRequest", 400],
  InvalidLocationConstraint: ["InvalidRequest", 400],
  IllegalLocationConstraintException: ["InvalidRequest", 400],
  AccessControlListNotSupported: ["InvalidRequest", 400],
  MalformedACLError: ["InvalidRequest", 400],
  BadDigest: ["InvalidRequest", 400],
  InvalidDigest: ["InvalidRequest", 400],
  IncompleteBody: ["InvalidRequest", 400],
  MissingContentLength: ["InvalidRequest", 411],
  MaxMessageLengthExceeded: ["PayloadTooLarge", 413],
  MalformedXML: ["InvalidRequest", 400],
  InvalidArgument: ["InvalidRequest", 400],
  InvalidRequest: ["InvalidRequest", 400],
  InvalidURI: ["InvalidRequest", 400],
  MethodNotAllowed: ["MethodNotAllowed", 405],
  ExpectationFailed: ["ExpectationFailed", 417],
  NotImplemented: ["NotImplemented", 501],
  NoSuchEndpoint: ["NotFound", 404],
  BadRequest: ["InvalidRequest", 400],
  RequestHeaderSectionTooLarge: ["InvalidRequest", 431],
  RequestTimeout: ["RequestTimeout", 408],
  NoSuchBucketPolicy: ["NotFound", 404],
  NoSuchCORSConfiguration: ["NotFound", 404],
  NoSuchLifecycleConfiguration: ["NotFound", 404],
  NoSuchTagSet: ["NotFound", 404],
  NoSuchWebsiteConfiguration: ["NotFound", 404],
  ServerSideEncryptionConfigurationNotFoundError: ["NotFound", 404],
  ObjectLockConfigurationNotFoundError: ["NotFound", 404],
  OwnershipControlsNotFoundError: ["NotFound", 404],
  NoSuchPublicAccessBlockConfiguration: ["NotFound", 404],
  ReplicationConfigurationNotFoundError: ["NotFound", 404],
  SlowDown: ["SlowDown", 503],
  ServiceUnavailable: ["ServiceUnavailable", 503],
  InternalError: ["InternalError", 500],
};

/** Any thrown value → the JSON error to send. Anything but a DomainError is an InternalError (500). */
export function toApiError(err: unknown): ApiError {
  if (!isDomainError(err)) {
    return { status: 500, body: { error: { code: "InternalError", message: "internal error" } } };
  }
  const [code, status] = API_WIRE[err.code];
  // Only the camelCase facts: PascalCase details are S3 error elements (see core/errors.ts).
  const details = Object.fromEntries(Object.entries(err.details).filter(([k]) => /^[a-z]/.test(k)));
  return { status, body: { error: { code, message: err.message, ...details } } };
}
