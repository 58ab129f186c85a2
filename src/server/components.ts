import type { AuditDraft, AuditLog } from "../audit/audit-log.js";
import { createEmbeddedAuditLog } from "../audit/embedded/embedded-audit-log.js";
import { createFsBackend } from "../backends/fs/index.js";
import type { StorageBackend } from "../backends/storage-backend.js";
import { ConfigError } from "../config/load.js";
import type { Config } from "../config/schema.js";
import type { Clock } from "../core/clock.js";
import { type EmbeddedDb, openEmbeddedDb } from "../embedded/db.js";
import { createEmbeddedLeaseStore } from "../leases/embedded/embedded-lease-store.js";
import type { LeaseStore } from "../leases/lease-store.js";
import type { Logger } from "../log.js";

export type Components = {
  backend: StorageBackend;
  leaseStore: LeaseStore;
  audit: AuditLog;
  /**
   * Set when the audit log can join the backend's and the lease store's transactions (all
   * three in one embedded database).
   */
  appendInCommit?: (draft: AuditDraft) => void;
  close(): Promise<void>;
};

/** Builds the backend, lease store and audit log the configuration asks for. */
export async function openComponents(
  config: Config,
  ctx: { clock: Clock; gatewayId: string; log: Logger },
): Promise<Components> {
  if (config.backend.type !== "fs") {
    throw new ConfigError(
      `backend.type: the ${config.backend.type} backend is not available in this version`,
    );
  }
  if (config.leaseStore.type !== "embedded") {
    throw new ConfigError(
      `leaseStore.type: the ${config.leaseStore.type} lease store is not available in this version`,
    );
  }
  const db: EmbeddedDb = openEmbeddedDb({ dataDir: config.dataDir });
  try {
    const backend = await createFsBackend({
      dataDir: config.backend.root ?? config.dataDir,
      db,
      clock: ctx.clock,
      multipartMaxAgeMs: config.multipart.maxAgeMs,
      multipartSweepIntervalMs: config.multipart.sweepIntervalMs,
    });
    const leaseStore = createEmbeddedLeaseStore({ db, clock: ctx.clock });
    const audit = createEmbeddedAuditLog({ db, gatewayId: ctx.gatewayId, clock: ctx.clock });
    return {
      backend,
      leaseStore,
      audit,
      appendInCommit: (draft) => {
        audit.appendSync(draft);
      },
      async close() {
        await backend.close();
        await leaseStore.close();
        await audit.close();
        db.close();
      },
    };
  } catch (e) {
    db.close();
    throw e;
  }
}
