import { isDomainError } from "../core/errors.js";

/** Lease API errors as JSON: {"error": {"code", "message", ...details}}. */
const STATUS: Record<string, number> = {
  InvalidRequest: 400,
  InvalidArgument: 400,
  AuthorizationHeaderMalformed: 400,
  AuthorizationQueryParametersError: 400,
  MissingSecurityHeader: 400,
  XAmzContentSHA256Mismatch: 400,
  AccessDenied: 403,
  InvalidAccessKeyId: 403,
  SignatureDoesNotMatch: 403,
  RequestTimeTooSkewed: 403,
  LeaseNotFound: 404,
  NotFound: 404,
  MethodNotAllowed: 405,
  LeaseHeld: 409,
  LeaseLost: 409,
  PayloadTooLarge: 413,
  UnsupportedMediaType: 415,
  InternalError: 500,
  ServiceUnavailable: 503,
};

export type ApiError = { status: number; body: { error: Record<string, unknown> } };

export function toApiError(err: unknown): ApiError {
  if (isDomainError(err)) {
    const { s3Code: _ignored, ...details } = err.details;
    return {
      status: STATUS[err.code] ?? 400,
      body: { error: { code: err.code, message: err.message, ...details } },
    };
  }
  const e = err as { code?: unknown; status?: unknown; message?: unknown };
  if (typeof e?.code === "string" && typeof e.status === "number" && e.status >= 400 && e.status < 500) {
    return { status: e.status, body: { error: { code: e.code, message: String(e.message ?? e.code) } } };
  }
  return { status: 500, body: { error: { code: "InternalError", message: "internal error" } } };
}

export function apiError(status: number, code: string, message: string): ApiError {
  return { status, body: { error: { code, message } } };
}
