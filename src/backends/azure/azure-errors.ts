import { DomainError } from "../../core/errors.js";

/**
 * How Azure Blob Storage failures become S3 errors (DomainErrors). Callers that expect a
 * particular answer (412 on a lost compare-and-swap, 404 on a missing blob) test for it with
 * `azureCode` / `azureStatus` before falling back to `toDomainError`.
 */

/** The Azure error code of a failed call (x-ms-error-code; HEAD answers carry it only in the header). */
export function azureCode(e: unknown): string | undefined {
  const err = e as { code?: unknown; details?: { errorCode?: unknown } } | null;
  const fromDetails = err?.details?.errorCode;
  if (typeof fromDetails === "string") return fromDetails;
  return typeof err?.code === "string" ? err.code : undefined;
}

export function azureStatus(e: unknown): number | undefined {
  const status = (e as { statusCode?: unknown } | null)?.statusCode;
  return typeof status === "number" ? status : undefined;
}

/** A compare-and-swap lost to a concurrent writer: re-read and try again. */
export function isLostRace(e: unknown): boolean {
  const status = azureStatus(e);
  const code = azureCode(e);
  if (status === 412) return code === "ConditionNotMet" || code === undefined;
  return status === 409 && code === "BlobAlreadyExists";
}

export const isBlobNotFound = (e: unknown): boolean =>
  azureStatus(e) === 404 && azureCode(e) !== "ContainerNotFound";

export const isContainerNotFound = (e: unknown): boolean =>
  azureStatus(e) === 404 && azureCode(e) === "ContainerNotFound";

/** The staged blocks a Put Block List names are gone (a concurrent commit to the blob discarded them). */
export const isInvalidBlockList = (e: unknown): boolean => azureCode(e) === "InvalidBlockList";

/** The service does not implement the call (Azurite and Stage Block From URL, for one). */
export const isNotImplemented = (e: unknown): boolean =>
  azureStatus(e) === 501 || azureCode(e) === "NotImplemented";

const NETWORK_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EPIPE",
  "REQUEST_SEND_ERROR",
  "UND_ERR_SOCKET",
]);

const LEASE_CODES = new Set([
  "LeaseIdMissing",
  "LeaseIdMismatchWithBlobOperation",
  "LeaseIdMismatchWithContainerOperation",
  "LeaseAlreadyPresent",
  "LeaseIsBreakingAndCannotBeAcquired",
]);

export type CallContext = {
  /** What was being done, for messages and logs: "put blob b/k". */
  what: string;
  /** Set when our own timeout aborted the call. */
  timedOut?: boolean;
  timeoutMs?: number;
  /** Set when the caller's signal (the client went away) aborted the call. */
  abandoned?: boolean;
};

/** The client went away before the call completed: nothing more is done for it. */
export function abandoned(): DomainError {
  return new DomainError("IncompleteBody", "the request was abandoned before it completed");
}

export function toDomainError(e: unknown, ctx: CallContext): Error {
  if (e instanceof DomainError) return e;
  if (ctx.abandoned) return abandoned();
  if (ctx.timedOut) {
    return new DomainError(
      "ServiceUnavailable",
      `no answer in time: Azure Blob Storage did not answer within ${ctx.timeoutMs} ms (${ctx.what})`,
      {},
      { cause: e },
    );
  }
  const status = azureStatus(e);
  const code = azureCode(e);
  const message = firstLine(e);
  if (status === undefined) {
    const errno = (e as { code?: unknown; cause?: { code?: unknown } } | null)?.code;
    const causeCode = (e as { cause?: { code?: unknown } } | null)?.cause?.code;
    const name = (e as { name?: unknown } | null)?.name;
    if (
      NETWORK_CODES.has(String(errno)) ||
      NETWORK_CODES.has(String(causeCode)) ||
      name === "AbortError" ||
      /socket hang up|ECONNREFUSED|getaddrinfo|connect E/i.test(message)
    ) {
      return new DomainError(
        "ServiceUnavailable",
        `Azure Blob Storage is unreachable (${ctx.what}): ${message}`,
        {},
        { cause: e },
      );
    }
    return new DomainError("InternalError", `${ctx.what} failed: ${message}`, {}, { cause: e });
  }
  if (status === 429 || (status === 503 && code === "ServerBusy")) {
    return new DomainError(
      "SlowDown",
      `Azure Blob Storage is throttling requests (${code ?? status}); please reduce your request rate`,
      { retryAfterSeconds: retryAfterSeconds(e) },
      { cause: e },
    );
  }
  if (status >= 500) {
    return new DomainError(
      "ServiceUnavailable",
      `Azure Blob Storage answered ${status} ${code ?? ""} (${ctx.what})`.replace("  ", " "),
      {},
      { cause: e },
    );
  }
  if (code === "ContainerNotFound" || code === "ContainerBeingDeleted") {
    return new DomainError("NoSuchBucket", "the specified bucket does not exist", {}, { cause: e });
  }
  if (code !== undefined && LEASE_CODES.has(code)) {
    return new DomainError(
      "ServiceUnavailable",
      `the blob or container holds an Azure lease that fencegate does not hold (${code}); fencegate never takes Azure leases: release or break it`,
      {},
      { cause: e },
    );
  }
  if (code === "InvalidBlockList" || code === "InvalidBlobOrBlock") {
    return new DomainError(
      "SlowDown",
      "a concurrent write to the same key discarded this write's staged blocks before its commit; nothing was changed, retry the request",
      { retryAfterSeconds: 1 },
      { cause: e },
    );
  }
  if (code === "BlobOperationNotSupported") {
    return new DomainError(
      "InvalidRequest",
      "Azure refuses block uploads to this path: it is a file created through the ADLS Gen2 (dfs) endpoint. Overwrite it with a body no larger than the backend's block size (one Put Blob), or delete it first",
      {},
      { cause: e },
    );
  }
  if (code === "MetadataTooLarge" || code === "InvalidMetadata") {
    return new DomainError(
      "MetadataTooLarge",
      "the object's metadata does not fit in Azure's 8 KiB metadata limit",
      {},
      { cause: e },
    );
  }
  if (status === 413 || code === "RequestBodyTooLarge") {
    return new DomainError("EntityTooLarge", "the body is larger than Azure accepts", {}, { cause: e });
  }
  if (status === 403) {
    return new DomainError(
      "InternalError",
      `Azure refused fencegate's credentials (${code ?? status}) for ${ctx.what}: check the backend's connection string or credential`,
      {},
      { cause: e },
    );
  }
  if (status === 409) {
    // With a hierarchical namespace, a key that is a directory of other keys (or lies under a
    // file) conflicts with a path: Azure answers 409 with a path-specific code.
    return new DomainError(
      "InvalidRequest",
      `Azure refused ${ctx.what} with ${code ?? "409 Conflict"}: on a hierarchical namespace a key cannot be both a file and a directory of other keys`,
      { azureCode: code },
      { cause: e },
    );
  }
  return new DomainError(
    "InternalError",
    `Azure answered ${status} ${code ?? ""} to ${ctx.what}: ${message}`,
    { azureCode: code },
    { cause: e },
  );
}

function retryAfterSeconds(e: unknown): number {
  const headers = (e as { response?: { headers?: { get(name: string): string | undefined } } } | null)
    ?.response?.headers;
  const value = headers?.get("retry-after");
  const seconds = value === undefined ? Number.NaN : Number(value);
  return Number.isFinite(seconds) && seconds > 0 ? Math.ceil(seconds) : 1;
}

function firstLine(e: unknown): string {
  const message = e instanceof Error ? e.message : String(e);
  return (message.split("\n")[0] ?? "").trim() || (e as { name?: string } | null)?.name || "error";
}
