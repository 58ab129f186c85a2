/**
 * Typed errors of the lease API. Every JSON error `{"error": {"code", "message", ...}}` becomes a
 * FenceApiError, or the subclass of its code, so callers can write
 * `catch (e) { if (e instanceof LeaseHeldError) ... }`.
 */

export type HeldBy = {
  leaseId: string;
  bucket: string;
  key?: string;
  prefix?: string;
  owner: string;
  token: number;
  expiresAt: string;
};

export type FenceApiErrorInit = {
  status: number;
  code: string;
  message: string;
  /** The parsed response body (or its text when it was not JSON). */
  body?: unknown;
  requestId?: string;
};

export class FenceApiError extends Error {
  override name = "FenceApiError";
  readonly status: number;
  readonly code: string;
  readonly body: unknown;
  readonly requestId: string | undefined;
  constructor(init: FenceApiErrorInit) {
    super(init.message);
    this.status = init.status;
    this.code = init.code;
    this.body = init.body;
    this.requestId = init.requestId;
  }

  /** The error's details beside code and message (e.g. `heldBy` of LeaseHeld). */
  get details(): Record<string, unknown> {
    const e = (this.body as { error?: Record<string, unknown> } | undefined)?.error;
    return e && typeof e === "object" ? e : {};
  }
}

/** 409: an overlapping lease is still held after `waitMs`. */
export class LeaseHeldError extends FenceApiError {
  override name = "LeaseHeldError";
  get heldBy(): HeldBy | undefined {
    return this.details.heldBy as HeldBy | undefined;
  }
}

/**
 * The lease is gone for this holder: 409 LeaseLost from the gateway (expired or superseded), or
 * (status 0, code LeaseExpired) not renewed before its expiry as this client measured it.
 */
export class LeaseLostError extends FenceApiError {
  override name = "LeaseLostError";
}

/** 404: no such lease, or it was released. */
export class LeaseNotFoundError extends FenceApiError {
  override name = "LeaseNotFoundError";
}

/** 403 AccessDenied: this access key may not do this (e.g. release another principal's lease). */
export class AccessDeniedError extends FenceApiError {
  override name = "AccessDeniedError";
}

/** 400 InvalidRequest: a bad body or parameter. */
export class InvalidRequestError extends FenceApiError {
  override name = "InvalidRequestError";
}

/** 503 LeaseStoreUnavailable: the gateway's lease store or audit log does not answer. */
export class LeaseStoreUnavailableError extends FenceApiError {
  override name = "LeaseStoreUnavailableError";
}

/** The signature was refused: unknown access key, wrong secret, clock skew, malformed header. */
export class AuthenticationError extends FenceApiError {
  override name = "AuthenticationError";
}

/** The gateway could not be reached, or the connection broke before an answer. */
export class FenceConnectionError extends Error {
  override name = "FenceConnectionError";
  constructor(
    message: string,
    /** True when the request certainly never reached the gateway (connection refused, no such host). */
    readonly notSent: boolean,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

const BY_CODE: Record<string, new (init: FenceApiErrorInit) => FenceApiError> = {
  LeaseHeld: LeaseHeldError,
  LeaseLost: LeaseLostError,
  LeaseExpired: LeaseLostError,
  LeaseNotFound: LeaseNotFoundError,
  AccessDenied: AccessDeniedError,
  InvalidRequest: InvalidRequestError,
  LeaseStoreUnavailable: LeaseStoreUnavailableError,
  InvalidAccessKeyId: AuthenticationError,
  SignatureDoesNotMatch: AuthenticationError,
  RequestTimeTooSkewed: AuthenticationError,
  AuthorizationHeaderMalformed: AuthenticationError,
  AuthorizationQueryParametersError: AuthenticationError,
  MissingSecurityHeader: AuthenticationError,
};

/** The typed error for an error answer of the lease API. */
export function apiError(init: FenceApiErrorInit): FenceApiError {
  const Type = BY_CODE[init.code] ?? FenceApiError;
  return new Type(init);
}
