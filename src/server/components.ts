import type { AuditLog } from "../audit/audit-log.js";
import { createAzureBackend } from "../backends/azure/index.js";
import { createFsBackend } from "../backends/fs/index.js";
import { type BucketRoute, RoutedBackend } from "../backends/routing/routed-backend.js";
import { storeIdentity } from "../backends/routing/store-identity.js";
import { createS3Backend } from "../backends/s3/index.js";
import type { StorageBackend } from "../backends/storage-backend.js";
import { ConfigError } from "../config/load.js";
import type { BackendSpec, Config } from "../config/schema.js";
import type { Clock } from "../core/clock.js";
import type { Logger } from "../core/log.js";
import type { LeaseStore } from "../leases/lease-store.js";
import type { Metrics } from "../metrics/metrics.js";
import type { CallObserver } from "../metrics/observe.js";
import { closeEmbeddedDb, type EmbeddedDb, openEmbeddedDb } from "../sqlite/db.js";
import { openAuditLog } from "./audit-components.js";
import { openLeaseStore, systemBucketOf } from "./lease-components.js";
import { azureConnection, s3Connection } from "./store-connection.js";

/**
 * The backend, lease store and audit log of one gateway. Co-located ones share a TxDomain
 * (src/core/tx.ts), and the fencing core joins their atomic steps where they do.
 */
type Components = {
  /** Every bucket, routed to the backend that holds it. */
  backend: RoutedBackend;
  /** Each configured backend by name: `default` (config `backend`) and those of `backends`. */
  backends: ReadonlyMap<string, StorageBackend>;
  leaseStore: LeaseStore;
  audit: AuditLog;
  close(): Promise<void>;
};

type ComponentContext = {
  clock: Clock;
  gatewayId: string;
  log: Logger;
  /** Told of store calls (metrics). */
  metrics?: Metrics;
};

/** Builds the backends, the lease store and the audit log the configuration asks for. */
export async function openComponents(config: Config, ctx: ComponentContext): Promise<Components> {
  const db: EmbeddedDb = openEmbeddedDb({ dataDir: config.dataDir });
  const opened: StorageBackend[] = [];
  try {
    const open = async (name: string, spec: BackendSpec): Promise<StorageBackend> => {
      const backend = await openBackend(name, spec, { config, db, ctx });
      opened.push(backend);
      return backend;
    };
    const fallback = await open("default", config.backend);
    const named = new Map<string, StorageBackend>([["default", fallback]]);
    for (const [name, spec] of Object.entries(config.backends)) named.set(name, await open(name, spec));
    // Which store each backend is: the configuration refused routes that overlap in one store
    // (schema.ts); the routed backend refuses fallback names that a route keeps its objects in.
    const storeOf = (name: string) =>
      storeIdentity(name === "default" ? config.backend : config.backends[name]!, config).key;
    const routes = new Map<string, BucketRoute>();
    for (const [bucket, route] of Object.entries(config.buckets)) {
      routes.set(bucket, {
        backend: named.get(route.backend)!,
        target: route.target ?? bucket,
        prefix: route.prefix,
        store: storeOf(route.backend),
      });
    }
    const systemBucket = systemBucketOf(config);
    const system = systemBucket ? { systemBucket } : {};
    const fallbackStore = storeOf("default");
    // The view of S3 requests: keys under a backend's meta prefix are refused and never listed.
    const backend = new RoutedBackend({ routes, fallback, fallbackStore, guardMeta: true, ...system });
    // fencegate's own uses of the store: token epochs, the audit archive (under .fencegate/audit/).
    const internal = new RoutedBackend({ routes, fallback, fallbackStore, ...system });
    const audit = await openAuditLog(config, { db, ctx, backend: internal });
    // The lease store records its lease events in the audit log (in its own steps when it can).
    const leaseStore = await openLeaseStore(config, { db, backend: internal, ctx, events: audit });
    return {
      backend,
      backends: named,
      leaseStore,
      audit,
      async close() {
        // Side by side: none waits for another (a silent Redis must not hold up the rest).
        const closed = await Promise.allSettled([backend.close(), leaseStore.close(), audit.close()]);
        for (const c of closed) {
          if (c.status === "rejected") ctx.log.warn({ err: c.reason }, "closing a store failed");
        }
        closeEmbeddedDb(db);
      },
    };
  } catch (e) {
    for (const backend of opened) await backend.close().catch(() => undefined);
    closeEmbeddedDb(db);
    throw e;
  }
}

async function openBackend(
  name: string,
  spec: BackendSpec,
  env: { config: Config; db: EmbeddedDb; ctx: ComponentContext },
): Promise<StorageBackend> {
  const { config, db, ctx } = env;
  switch (spec.type) {
    case "fs":
      return createFsBackend({
        dataDir: spec.root ?? config.dataDir,
        db,
        clock: ctx.clock,
        multipartMaxAgeMs: config.multipart.maxAgeMs,
        multipartSweepIntervalMs: config.multipart.sweepIntervalMs,
      });
    case "s3": {
      const backend = createS3Backend({
        ...s3Connection(spec),
        ...(spec.partSizeBytes ? { partSizeBytes: spec.partSizeBytes } : {}),
        gcIntervalMs: spec.gcIntervalMs,
        gcGraceMs: spec.gcGraceMs,
        multipartMaxAgeMs: config.multipart.maxAgeMs,
        ...(spec.verifyBucket ? { verifyBucket: spec.verifyBucket } : {}),
        clock: ctx.clock,
        log: ctx.log.child({ backend: name }),
        ...(ctx.metrics ? { observeCall: storeCalls(ctx.metrics, "s3") } : {}),
      });
      if (spec.verifyBucket) {
        const report = await backend.verifyConditionalWrites(spec.verifyBucket);
        if (!report.ok) {
          await backend.close();
          throw new ConfigError(`${where(name)}: ${report.findings.join("; ")}`);
        }
      }
      return backend;
    }
    case "azure": {
      const backend = createAzureBackend({
        ...azureConnection(spec),
        ...(spec.blockSizeBytes ? { blockSizeBytes: spec.blockSizeBytes } : {}),
        ...(spec.hierarchicalNamespace !== undefined
          ? { hierarchicalNamespace: spec.hierarchicalNamespace }
          : {}),
        multipartMaxAgeMs: config.multipart.maxAgeMs,
        multipartSweepIntervalMs: config.multipart.sweepIntervalMs,
        clock: ctx.clock,
        log: ctx.log.child({ backend: name }),
        ...(ctx.metrics ? { observeCall: storeCalls(ctx.metrics, "azure") } : {}),
      });
      // Bad credentials or an unreachable account stop the start, with Azure's own message.
      await backend.ready().catch(async (e: unknown) => {
        await backend.close();
        throw new ConfigError(`${where(name)}: cannot use the Azure account: ${(e as Error).message}`);
      });
      return backend;
    }
  }
}

const where = (name: string) => (name === "default" ? "backend" : `backends.${name}`);

/** A backend's store calls, as the metrics count them. */
function storeCalls(metrics: Metrics, backend: string): CallObserver {
  return (operation, outcome, seconds) => metrics.storeCall(backend, operation, outcome, seconds);
}
