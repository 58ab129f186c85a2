/**
 * Typed errors of the lease API. Every JSON error `{"error": {"code", "message", ...}}` becomes a
 * FenceApiError, or the subclass of its code, so callers can write
 * `catch (e) { if (e instanceof LeaseHeldError) ... }`.
 */

import type { HeldBy } from "./wire.js";

/** The lease in the way of a LeaseHeld answer (its leaseId only for its holder and administrators). */
export type { HeldBy };

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
    return errorFields(this.body) ?? {};
  }
}

/** The error of an answer's body: `{"error": {"code", "message", ...}}`, or the same fields at the top. */
export function errorFields(body: unknown): Record<string, unknown> | undefined {
  if (!body || typeof body !== "object") return undefined;
  const wrapped = (body as { error?: unknown }).error;
  if (wrapped && typeof wrapped === "object") return wrapped as Record<string, unknown>;
  return typeof (body as { code?: unknown }).code === "string"
    ? (body as Record<string, unknown>)
    : undefined;
}

/**
 * A FenceApiError subclass whose `name` is `title` (given as a string, so that a minifier that
 * renames classes leaves it alone).
 */
function named(title: string): typeof FenceApiError {
  return class extends FenceApiError {
    override name = title;
  };
}

/** 409: an overlapping lease is still held after `waitMs`. */
export class LeaseHeldError extends named("LeaseHeldError") {
  get heldBy(): HeldBy | undefined {
    return this.details.heldBy as HeldBy | undefined;
  }
}

/**
 * Why a lease was lost, in words that say what happened:
 * - `broken`: an administrator broke it (`fencegate lease break`, `FenceClient.breakLease`);
 * - `expired`: it was not renewed in time;
 * - `superseded`: it expired and the resource was leased again, with a newer token;
 * - `released`: it was released, by its holder or an administrator;
 * - `unknown`: the gateway refused the lease without saying why (e.g. it no longer knows it).
 */
export type LeaseLossReason = "broken" | "expired" | "superseded" | "released" | "unknown";

export type LeaseLossDetails = {
  leaseId?: string;
  /** The newer lease's token, for `superseded`. */
  supersededBy?: number;
  /** The access key that broke or released the lease, when known. */
  by?: string | null;
  /** For `unknown`: what the gateway said. */
  cause?: string;
};

/**
 * One sentence on a lost lease, e.g. "lease L1 was broken by an administrator (root)" or "lease
 * L1 was superseded by token 43". The same words everywhere: the SDK's LeaseLostError, the
 * command line (`fencegate run`).
 */
export function describeLeaseLoss(reason: LeaseLossReason, details: LeaseLossDetails = {}): string {
  const lease = details.leaseId ? `lease ${details.leaseId}` : "the lease";
  const by = details.by ? ` (${details.by})` : "";
  switch (reason) {
    case "broken":
      return `${lease} was broken by an administrator${by}`;
    case "expired":
      return `${lease} expired (not renewed in time)`;
    case "superseded":
      return details.supersededBy !== undefined
        ? `${lease} was superseded by token ${details.supersededBy} (it had expired, and the resource was leased again)`
        : `${lease} was superseded by a newer lease (it had expired, and the resource was leased again)`;
    case "released":
      return `${lease} was released${by}`;
    default:
      return `${lease} was lost${details.cause ? `: ${details.cause}` : ""}`;
  }
}

export type LeaseLostErrorInit = FenceApiErrorInit & {
  reason?: LeaseLossReason;
  supersededBy?: number;
  by?: string | null;
};

/**
 * The lease is gone for this holder: 409 LeaseLost from the gateway, or (status 0, code
 * LeaseExpired) not renewed before its expiry as this client measured it. `reason` says why
 * (broken, expired, superseded, released, or unknown); a Lease handle asks the audit log when
 * the gateway's answer alone does not tell (a break and a release answer alike).
 */
export class LeaseLostError extends named("LeaseLostError") {
  readonly reason: LeaseLossReason;
  /** The newer lease's token, when `reason` is `superseded`. */
  readonly supersededBy: number | undefined;
  /** Who broke or released the lease (an access key id), when known. */
  readonly by: string | null;
  constructor(init: LeaseLostErrorInit) {
    super(init);
    this.reason = init.reason ?? reasonOfAnswer(init.code, this.details);
    this.supersededBy = init.supersededBy;
    this.by = init.by ?? null;
  }
}

/**
 * What the gateway's own answer says: a renewal refused with {"reason": "broken" | "released" |
 * "expired"}.
 */
function reasonOfAnswer(code: string, details: Record<string, unknown>): LeaseLossReason {
  if (details.reason === "broken") return "broken";
  if (details.reason === "released") return "released";
  if (details.reason === "expired" || code === "LeaseExpired") return "expired";
  return "unknown";
}

/** 404: no such lease, or it was released. */
export class LeaseNotFoundError extends named("LeaseNotFoundError") {}

/** 403 AccessDenied: this access key may not do this (e.g. release another principal's lease). */
export class AccessDeniedError extends named("AccessDeniedError") {}

/** 400 InvalidRequest: a bad body or parameter. */
export class InvalidRequestError extends named("InvalidRequestError") {}

/** 503 LeaseStoreUnavailable: the gateway's lease store or audit log does not answer. */
export class LeaseStoreUnavailableError extends named("LeaseStoreUnavailableError") {}

/** The signature was refused: unknown access key, wrong secret, clock skew, malformed header. */
export class AuthenticationError extends named("AuthenticationError") {}

/** 404 TransactionNotFound: no such transaction (or this access key may not see it). */
export class TransactionNotFoundError extends named("TransactionNotFoundError") {}

/**
 * 409 TransactionAborted: the transaction was aborted (by its holder, or because its lease ended
 * or was superseded, or a commit of it was refused); none of its writes is visible.
 */
export class TransactionAbortedError extends named("TransactionAbortedError") {}

/** 409 TransactionCommitted: an abort came after the commit; every write of it is visible. */
export class TransactionCommittedError extends named("TransactionCommittedError") {}

/**
 * 409 StaleFencingToken: a write (or a commit) whose token is below an object's highest
 * committed token, or whose lease was superseded. A refused commit made nothing visible.
 */
export class StaleFencingTokenError extends named("StaleFencingTokenError") {}

/** The header the gateway answers `unknown` in when it could not learn whether it committed. */
export const FENCE_OUTCOME_HEADER = "x-fence-outcome";

/**
 * The gateway does not know whether it committed: it answered 503 with `x-fence-outcome:
 * unknown` (status 503), or the connection broke after the request was sent and no retry got an
 * answer (status 0, code OutcomeUnknown, the connection error as `cause`). This is NOT a
 * refusal: the commit may have happened. A transaction's commit is idempotent, so committing
 * again is safe and answers what happened (200 with the same objects, or a refusal);
 * `transactionState(id)` tells too.
 */
export class OutcomeUnknownError extends named("OutcomeUnknownError") {
  /** The transaction whose commit's outcome is unknown (set by FenceClient.commitTransaction). */
  transactionId: string | undefined;
  constructor(init: FenceApiErrorInit, options?: { cause?: unknown }) {
    super(init);
    if (options && "cause" in options) this.cause = options.cause;
  }
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
  TransactionNotFound: TransactionNotFoundError,
  TransactionAborted: TransactionAbortedError,
  TransactionCommitted: TransactionCommittedError,
  StaleFencingToken: StaleFencingTokenError,
  InvalidAccessKeyId: AuthenticationError,
  SignatureDoesNotMatch: AuthenticationError,
  RequestTimeTooSkewed: AuthenticationError,
  AuthorizationHeaderMalformed: AuthenticationError,
  AuthorizationQueryParametersError: AuthenticationError,
  MissingSecurityHeader: AuthenticationError,
};

/**
 * The typed error for an error answer of the lease API. `outcome` is the answer's
 * `x-fence-outcome` header: `unknown` makes an OutcomeUnknownError, whatever the code.
 */
export function apiError(init: FenceApiErrorInit, outcome?: string): FenceApiError {
  if (outcome?.trim().toLowerCase() === "unknown") return new OutcomeUnknownError(init);
  const Type = BY_CODE[init.code] ?? FenceApiError;
  return new Type(init);
}
