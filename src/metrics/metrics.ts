import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type { CallOutcome, LeaseEvent, TransactionOutcome, WaitOutcome } from "./observe.js";

/**
 * The Prometheus metrics of one gateway (docs/operations.md, "Metrics"). Each gateway has a registry of its
 * own, so that several gateways in one process never share or clash; the process metrics
 * (CPU, memory, event loop, GC) are the process's, kept once in a registry every gateway's
 * exposition ends with.
 *
 * Labels hold only bounded, harmless values: operation names, status codes, error codes,
 * backend and dependency names. Never a key, a bucket, an access key, a token or a secret.
 */
export type Metrics = ReturnType<typeof createMetrics>;

/** Latencies from 1 ms to about 30 s. */
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
/** Waits for a lease: up to the longest waitMs (60 s). */
const WAIT_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
/** Steps committed by one group commit. */
const BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256];

let processRegistry: Registry | undefined;

/** The process metrics, collected once per process whatever the number of gateways. */
function processMetrics(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry });
  }
  return processRegistry;
}

export function createMetrics(info: { gatewayId: string; version: string }) {
  const registry = new Registry();
  const counter = <L extends string>(name: string, help: string, labelNames: readonly L[] = []) =>
    new Counter<L>({ name, help, labelNames, registers: [registry] });
  const gauge = <L extends string>(name: string, help: string, labelNames: readonly L[] = []) =>
    new Gauge<L>({ name, help, labelNames, registers: [registry] });
  const histogram = <L extends string>(
    name: string,
    help: string,
    labelNames: readonly L[],
    buckets: number[],
  ) => new Histogram<L>({ name, help, labelNames, buckets, registers: [registry] });

  gauge("fencegate_build_info", "Always 1: the gateway's version and instance id.", [
    "version",
    "gateway",
  ]).set({ version: info.version, gateway: info.gatewayId }, 1);

  const requests = counter(
    "fencegate_http_requests_total",
    "HTTP requests answered, by operation and status.",
    ["operation", "status"],
  );
  const requestSeconds = histogram(
    "fencegate_http_request_duration_seconds",
    "Time from a request's arrival to its answer, by operation and status class (2xx, 4xx, 5xx).",
    ["operation", "status_class"],
    LATENCY_BUCKETS,
  );
  const decisions = counter(
    "fencegate_fencing_decisions_total",
    "Write decisions of the fencing core, by S3 operation, decision (accepted, rejected, unknown) and reason (accepted, the refusal's error code, or unknown).",
    ["operation", "decision", "reason"],
  );
  const leaseCounters: Record<LeaseEvent, Counter<string>> = {
    LeaseAcquired: counter("fencegate_lease_grants_total", "Leases granted (every grant takes a new token)."),
    LeaseRenewed: counter("fencegate_lease_renewals_total", "Lease renewals accepted."),
    LeaseReleased: counter("fencegate_lease_releases_total", "Leases released by their holder."),
    LeaseExpired: counter(
      "fencegate_lease_expiries_total",
      "Leases that ended by expiry (not renewed in time), as this gateway saw them.",
    ),
    LeaseBroken: counter("fencegate_lease_breaks_total", "Leases broken by an administrator."),
  };
  const leaseRefusals = counter(
    "fencegate_lease_refusals_total",
    "Lease requests refused, by event (LeaseAcquired, LeaseRenewed, ...) and error code (LeaseHeld, LeaseLost, AccessDenied).",
    ["event", "reason"],
  );
  const waits = counter(
    "fencegate_lease_waits_total",
    "Lease requests that had to wait for a held resource, by how the wait ended (granted, timeout, error).",
    ["outcome"],
  );
  const waitSeconds = histogram(
    "fencegate_lease_wait_duration_seconds",
    "How long lease requests that had to wait waited, by how the wait ended.",
    ["outcome"],
    WAIT_BUCKETS,
  );
  const lastToken = gauge(
    "fencegate_lease_last_token",
    "The token of the last lease this gateway granted (tokens only grow).",
  );
  const activeLeases = gauge(
    "fencegate_leases_active",
    "Active leases in the lease store (all replicas), read at scrape time.",
  );
  const waiters = gauge(
    "fencegate_lease_waiters",
    "Lease requests waiting in this gateway for a held resource, at scrape time.",
  );
  const storeCalls = counter(
    "fencegate_store_calls_total",
    "Calls to a remote storage backend, by backend kind, operation and outcome (ok, not_found, conflict, throttled, timeout, error).",
    ["backend", "operation", "outcome"],
  );
  const storeSeconds = histogram(
    "fencegate_store_call_duration_seconds",
    "Latency of calls to a remote storage backend, the SDK's retries included, by backend kind and operation.",
    ["backend", "operation"],
    LATENCY_BUCKETS,
  );
  const transactions = counter(
    "fencegate_transactions_total",
    "Fenced transactions ended on this gateway, by outcome: committed, refused (its commit refused: nothing visible), aborted (by its client, its lease ending, a shutdown), unknown (a commit answered 503 x-fence-outcome: unknown).",
    ["outcome"],
  );
  const openTransactions = gauge(
    "fencegate_transactions_open",
    "Fenced transactions open on this gateway, at scrape time.",
  );
  const batchSize = histogram(
    "fencegate_group_commit_batch_size",
    "Steps (writes, lease events, audit records) committed together by one transaction and fsync of the embedded store.",
    [],
    BATCH_BUCKETS,
  );
  const auditSeconds = histogram(
    "fencegate_audit_append_duration_seconds",
    "Latency of audit log appends made outside a store's atomic step, by log kind and outcome (ok, error).",
    ["log", "outcome"],
    LATENCY_BUCKETS,
  );
  /** Exported only where they mean something (see `enable`). */
  const optional = <L extends string>(name: string, help: string) =>
    new Gauge<L>({ name, help, labelNames: [], registers: [] });
  const archiveLag = optional(
    "fencegate_audit_archive_lag_records",
    "Audit records in Redis not yet archived to the backend, at scrape time (only with a Redis audit log that archives).",
  );
  const dependencyUp = gauge(
    "fencegate_dependency_up",
    "1 when the dependency answered the last readiness check in time, 0 otherwise (updated by /health/ready and by each scrape).",
    ["dependency", "kind"],
  );
  const redisUp = optional(
    "fencegate_redis_connected",
    "1 while the Redis lease store answers (checked at scrape time within a short deadline), 0 otherwise; absent with other lease stores.",
  );
  const redisEpoch = optional(
    "fencegate_redis_token_epoch",
    "The token epoch of the last token this gateway granted from Redis (tokens are epoch x 2^32 + counter); it grows when Redis may have lost its counter.",
  );
  const collectErrors = counter(
    "fencegate_metrics_collect_errors_total",
    "Scrape-time readings that failed or ran out of time (the gauge keeps its previous value), by collector.",
    ["collector"],
  );

  /** Readings taken at scrape time, each within a deadline. */
  const collectors: Array<{ name: string; run: () => Promise<void> }> = [];

  return {
    registry,
    request(operation: string, status: number, seconds: number): void {
      requests.inc({ operation, status: String(status) });
      requestSeconds.observe({ operation, status_class: `${Math.floor(status / 100)}xx` }, seconds);
    },
    decision(operation: string, decision: "accepted" | "rejected" | "unknown", reason: string | null): void {
      const why =
        decision === "accepted" ? "accepted" : decision === "unknown" ? "unknown" : (reason ?? "unknown");
      decisions.inc({ operation, decision, reason: why });
    },
    leaseEvent(event: LeaseEvent, token?: number): void {
      leaseCounters[event].inc();
      if (event === "LeaseAcquired" && token !== undefined) {
        lastToken.set(token);
        // Redis tokens: epoch x 2^32 + counter (exported with a Redis lease store only).
        redisEpoch.set(Math.floor(token / 2 ** 32));
      }
    },
    leaseRefused(event: string, reason: string | null): void {
      leaseRefusals.inc({ event, reason: reason ?? "unknown" });
    },
    leaseWait(outcome: WaitOutcome, seconds: number): void {
      waits.inc({ outcome });
      waitSeconds.observe({ outcome }, seconds);
    },
    storeCall(backend: string, operation: string, outcome: CallOutcome, seconds: number): void {
      storeCalls.inc({ backend, operation, outcome });
      storeSeconds.observe({ backend, operation }, seconds);
    },
    transaction(outcome: TransactionOutcome): void {
      transactions.inc({ outcome });
    },
    batch(steps: number): void {
      batchSize.observe(steps);
    },
    auditAppend(log: string, ok: boolean, seconds: number): void {
      auditSeconds.observe({ log, outcome: ok ? "ok" : "error" }, seconds);
    },
    dependency(name: string, kind: string, up: boolean): void {
      dependencyUp.set({ dependency: name, kind }, up ? 1 : 0);
    },
    gauges: { activeLeases, waiters, archiveLag, redisUp, redisEpoch, openTransactions },
    /** Exports the gauges of a Redis lease store, or of an audit log that archives. */
    enable(part: "redis" | "auditArchive"): void {
      const gauges: Array<[string, Gauge<string>]> =
        part === "redis"
          ? [
              ["fencegate_redis_connected", redisUp],
              ["fencegate_redis_token_epoch", redisEpoch],
            ]
          : [["fencegate_audit_archive_lag_records", archiveLag]];
      for (const [name, g] of gauges) if (!registry.getSingleMetric(name)) registry.registerMetric(g);
    },
    /** Adds a reading taken at every scrape (it must be cheap; it gets `deadlineMs`). */
    collect(name: string, run: () => Promise<void>): void {
      collectors.push({ name, run });
    },
    /** The text exposition: this gateway's metrics, then the process's. */
    async exposition(deadlineMs = 1_000): Promise<string> {
      await Promise.all(
        collectors.map(async (c) => {
          let timer: NodeJS.Timeout | undefined;
          const late = new Promise<"late">((resolve) => {
            timer = setTimeout(() => resolve("late"), deadlineMs);
          });
          try {
            const outcome = await Promise.race([c.run().then(() => "done" as const), late]);
            if (outcome === "late") collectErrors.inc({ collector: c.name });
          } catch {
            collectErrors.inc({ collector: c.name });
          } finally {
            clearTimeout(timer);
          }
        }),
      );
      return `${await registry.metrics()}\n${await processMetrics().metrics()}`;
    },
    contentType: registry.contentType,
  };
}
