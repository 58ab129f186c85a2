/**
 * The one error class of the authentication and body layers. It carries S3's wire code and
 * status itself because several of these codes (the auth ones, XAmzContentSHA256Mismatch) have
 * no DomainError counterpart, and the edge maps anything with { code, status, message } as is.
 */
export type S3RequestErrorCode =
  | "AccessDenied"
  | "InvalidAccessKeyId"
  | "SignatureDoesNotMatch"
  | "RequestTimeTooSkewed"
  | "AuthorizationQueryParametersError"
  | "AuthorizationHeaderMalformed"
  | "MissingSecurityHeader"
  | "InvalidArgument"
  | "InvalidRequest"
  | "XAmzContentSHA256Mismatch"
  | "BadDigest"
  | "InvalidDigest"
  | "IncompleteBody"
  | "EntityTooLarge";

const STATUS: Record<S3RequestErrorCode, number> = {
  AccessDenied: 403,
  InvalidAccessKeyId: 403,
  SignatureDoesNotMatch: 403,
  RequestTimeTooSkewed: 403,
  AuthorizationQueryParametersError: 400,
  AuthorizationHeaderMalformed: 400,
  MissingSecurityHeader: 400,
  InvalidArgument: 400,
  InvalidRequest: 400,
  XAmzContentSHA256Mismatch: 400,
  BadDigest: 400,
  InvalidDigest: 400,
  IncompleteBody: 400,
  EntityTooLarge: 400,
};

export class S3RequestError extends Error {
  override name = "S3RequestError";
  readonly code: S3RequestErrorCode;
  readonly status: number;
  /** Extra elements S3 puts in its error document (e.g. StringToSign, HeadersNotSigned). */
  readonly details: Record<string, string>;

  constructor(
    code: S3RequestErrorCode,
    message: string,
    details: Record<string, string> = {},
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.code = code;
    this.status = STATUS[code];
    this.details = details;
  }
}

/** The same class under the name the auth layer was specified with. */
export { S3RequestError as S3AuthError };

export const isS3RequestError = (e: unknown): e is S3RequestError => e instanceof S3RequestError;
