import type { AuditLog } from "../audit/audit-log.js";
import type { StorageBackend } from "../backends/storage-backend.js";
import type { TxDomain } from "../core/tx.js";
import type { LeaseService } from "../leases/lease-service.js";
import type { LeaseStore } from "../leases/lease-store.js";
import type { Metrics } from "../metrics/metrics.js";
import { EmbeddedDomain } from "../sqlite/domain.js";

/** How long a scrape waits for the Redis ping before it reports Redis as not connected. */
const REDIS_PING_DEADLINE_MS = 500;

/**
 * Connects a gateway's stores to its metrics: the group commit of the embedded store, the
 * latency of audit appends, and the readings taken at scrape time (active leases, waiters,
 * Redis connectivity, the audit archive's lag). The fencing core and the lease service report
 * through the observers the gateway gives them.
 */
export function wireMetrics(
  metrics: Metrics,
  parts: {
    leaseStore: LeaseStore;
    audit: AuditLog;
    backends: Iterable<StorageBackend>;
    leases: LeaseService;
    transactions?: { openCount(): number };
  },
): void {
  const { leaseStore, audit, leases } = parts;
  const domains = new Set<TxDomain | undefined>([leaseStore.domain, audit.domain]);
  for (const backend of parts.backends) domains.add(backend.domain);
  for (const domain of domains)
    if (domain instanceof EmbeddedDomain) domain.onBatch = (n) => metrics.batch(n);

  instrumentAudit(audit, metrics);

  metrics.collect("leases", async () => {
    const listed = await leases.list({});
    metrics.gauges.activeLeases.set(listed.filter((l) => l.state === "active").length);
  });
  metrics.collect("waiters", async () => {
    metrics.gauges.waiters.set(leases.waiting());
  });
  metrics.collect("transactions", async () => {
    metrics.gauges.openTransactions.set(parts.transactions?.openCount() ?? 0);
  });
  if (leaseStore.kind === "redis" || leaseStore.kind === "redlock") {
    metrics.enable("redis");
    metrics.collect("redis", async () => {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), REDIS_PING_DEADLINE_MS);
      });
      const answered = leaseStore.ping().then(
        () => true,
        () => false,
      );
      const up = await Promise.race([answered, late]);
      clearTimeout(timer);
      metrics.gauges.redisUp.set(up ? 1 : 0);
    });
  }
  const archived = audit as Partial<{ archives: boolean; archiveLag(): Promise<number> }>;
  if (archived.archives === true && typeof archived.archiveLag === "function") {
    const lagOf = archived.archiveLag.bind(audit);
    metrics.enable("auditArchive");
    metrics.collect("auditArchive", async () => {
      metrics.gauges.archiveLag.set(await lagOf());
    });
  }
}

/**
 * Times the audit log's appends made outside a store's step (those inside one are part of that
 * step's transaction). The log object stays the same one: other components recognise it (the
 * Redis lease store appends lease events in its own scripts when it is its Redis).
 */
function instrumentAudit(audit: AuditLog, metrics: Metrics): void {
  const timed =
    <A extends unknown[], R>(run: (...args: A) => Promise<R>) =>
    async (...args: A): Promise<R> => {
      const started = performance.now();
      try {
        const out = await run(...args);
        metrics.auditAppend(audit.kind, true, (performance.now() - started) / 1000);
        return out;
      } catch (e) {
        metrics.auditAppend(audit.kind, false, (performance.now() - started) / 1000);
        throw e;
      }
    };
  audit.append = timed(audit.append.bind(audit));
  audit.appendOnce = timed(audit.appendOnce.bind(audit));
}
