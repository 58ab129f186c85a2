import { DomainError } from "../../core/errors.js";
import { noSuchBucket } from "../backend-errors.js";

/**
 * What a failed store request means to fencegate. The AWS SDK throws service exceptions named
 * after S3's error code (with `$metadata.httpStatusCode` and `$response`), and plain Node errors
 * (`code` ECONNREFUSED...) or `TimeoutError` / `AbortError` for the transport.
 */
type StoreFailure =
  | "no-such-key"
  | "no-such-bucket"
  | "no-such-upload"
  /** 404 without an error code (HEAD): no such key, or no such bucket on a store that does not say. */
  | "not-found"
  /** 412 PreconditionFailed or 409 ConditionalRequestConflict: a conditional write lost. */
  | "condition-failed"
  | "bucket-exists"
  | "bucket-not-empty"
  | "throttled"
  /** The request never reached the store (connection refused, DNS): it certainly did nothing. */
  | "unreachable"
  /** Timeouts, resets, 5xx: the request may or may not have taken effect. */
  | "unavailable"
  | "aborted"
  | "invalid-range"
  | "other";

type SdkError = Error & {
  code?: string;
  Code?: string;
  $metadata?: { httpStatusCode?: number };
  $response?: { headers?: Record<string, string> };
};

const NOT_SENT = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH"]);
const TRANSPORT = new Set([
  "ECONNRESET",
  "ETIMEDOUT",
  "EPIPE",
  "ECONNABORTED",
  "ESOCKETTIMEDOUT",
  "ERR_STREAM_PREMATURE_CLOSE",
  "UND_ERR_SOCKET",
]);
const THROTTLING = new Set([
  "SlowDown",
  "Throttling",
  "ThrottlingException",
  "TooManyRequests",
  "TooManyRequestsException",
  "RequestLimitExceeded",
]);

export function storeStatus(err: unknown): number | undefined {
  return (err as SdkError)?.$metadata?.httpStatusCode;
}

/** S3's error code: the exception's name, or on HEAD the x-amz-error-code header some stores send. */
function errorCode(err: SdkError): string {
  const header = err.$response?.headers?.["x-amz-error-code"];
  if ((err.name === "NotFound" || err.name === "UnknownError") && header) return header;
  return err.Code ?? err.name;
}

export function classifyStoreError(err: unknown): StoreFailure {
  if (!(err instanceof Error)) return "other";
  const e = err as SdkError;
  const status = storeStatus(err);
  const code = errorCode(e);
  if (e.name === "AbortError") return "aborted";
  if (e.code && NOT_SENT.has(e.code)) return "unreachable";
  if (e.name === "TimeoutError" || (e.code && TRANSPORT.has(e.code))) return "unavailable";
  switch (code) {
    case "NoSuchKey":
      return "no-such-key";
    case "NoSuchBucket":
      return "no-such-bucket";
    case "NoSuchUpload":
      return "no-such-upload";
    case "PreconditionFailed":
    case "ConditionalRequestConflict":
      return "condition-failed";
    case "BucketAlreadyOwnedByYou":
    case "BucketAlreadyExists":
      return "bucket-exists";
    case "BucketNotEmpty":
      return "bucket-not-empty";
    case "InvalidRange":
      return "invalid-range";
  }
  if (THROTTLING.has(code) || status === 429) return "throttled";
  if (status === 412 || (status === 409 && code === "ConditionalRequestConflict")) return "condition-failed";
  if (status === 404 && (code === "NotFound" || code === "UnknownError")) return "not-found";
  if (status !== undefined && status >= 500) return "unavailable";
  return "other";
}

/** Seconds the store asked us to wait (Retry-After), or 1. */
function retryAfterSeconds(err: unknown): number {
  const raw = (err as SdkError)?.$response?.headers?.["retry-after"];
  const seconds = raw === undefined ? Number.NaN : Number(raw);
  return Number.isFinite(seconds) && seconds >= 0 ? Math.ceil(seconds) : 1;
}

/**
 * The DomainError a failed store request becomes when its outcome does not matter to a commit
 * (reads, blob uploads, deletes of garbage). `endpoint` names the store in messages. An abort
 * the caller asked for is rethrown as it is.
 */
export function storeDomainError(err: unknown, endpoint: string, bucket?: string): unknown {
  if (err instanceof DomainError) return err;
  const kind = classifyStoreError(err);
  const what = err instanceof Error ? err.message || err.name : String(err);
  switch (kind) {
    case "aborted":
      return err;
    case "no-such-bucket":
      return noSuchBucket(bucket ?? "");
    case "throttled":
      return new DomainError(
        "SlowDown",
        `the store at ${endpoint} asks fencegate to slow down; please reduce your request rate`,
        { retryAfterSeconds: retryAfterSeconds(err) },
        { cause: err },
      );
    case "unreachable":
    case "unavailable":
      return new DomainError(
        "ServiceUnavailable",
        `the store at ${endpoint} is unavailable (${what}); please retry`,
        { retryAfterSeconds: retryAfterSeconds(err) },
        { cause: err },
      );
    default:
      return new DomainError(
        "InternalError",
        `the store at ${endpoint} refused a request (${(err as SdkError)?.name ?? "error"}: ${what})`,
        {},
        { cause: err },
      );
  }
}
