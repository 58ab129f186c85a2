/**
 * What the layers below the gateway tell the metrics, without depending on prom-client: the
 * names and outcomes they report (src/metrics/metrics.ts counts them).
 */

/** The lease events counted, by the name their audit record carries. */
export type LeaseEvent = "LeaseAcquired" | "LeaseRenewed" | "LeaseReleased" | "LeaseExpired" | "LeaseBroken";

/** How a wait for a held lease ended. */
export type WaitOutcome = "granted" | "timeout" | "error";

/** How a fenced transaction ended (a commit answered "unknown" may still be committed by a repeat). */
export type TransactionOutcome = "committed" | "refused" | "aborted" | "unknown";

/** A store call's outcome, in a handful of values an alert can name. */
export type CallOutcome = "ok" | "not_found" | "conflict" | "throttled" | "timeout" | "error";

/** Told of one call to a store: its operation, outcome and latency. */
export type CallObserver = (operation: string, outcome: CallOutcome, seconds: number) => void;

/** A store call's error as an outcome label: the HTTP status or the error's name. */
export function callOutcome(err: unknown): CallOutcome {
  if (err === undefined || err === null) return "ok";
  const e = err as { name?: string; $metadata?: { httpStatusCode?: number }; statusCode?: number };
  const status = e.$metadata?.httpStatusCode ?? e.statusCode;
  const name = e.name ?? "";
  if (name === "TimeoutError" || name === "AbortError") return "timeout";
  if (status === 404 || name === "NoSuchKey" || name === "NotFound" || name === "NoSuchBucket")
    return "not_found";
  if (status === 409 || status === 412 || name === "PreconditionFailed") return "conflict";
  if (status === 429 || status === 503 || name === "SlowDown") return "throttled";
  return "error";
}

/** Told of a write decision of the fencing core (src/fence/write-fencer.ts). */
export type FenceObserver = (
  operation: string,
  decision: "accepted" | "rejected" | "unknown",
  reason: string | null,
) => void;

/** Told of lease events (src/leases/lease-service.ts). */
export type LeaseObserver = {
  /** An accepted lease event; `token` is the lease's. */
  event(event: LeaseEvent, token: number): void;
  /** A lease request refused, with its error code. */
  refused(event: string, reason: string | null): void;
  /** A request that had to wait for a held resource got its answer after `seconds`. */
  waited(outcome: WaitOutcome, seconds: number): void;
};
