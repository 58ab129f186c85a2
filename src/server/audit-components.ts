import { resolve } from "node:path";
import type { AuditLog } from "../audit/audit-log.js";
import { createEmbeddedAuditLog } from "../audit/embedded/embedded-audit-log.js";
import { createDirArchiveStore } from "../audit/redis/archive-store.js";
import { createRedisAuditLog, openRedis, redisReady } from "../audit/redis/redis-audit-log.js";
import type { StorageBackend } from "../backends/storage-backend.js";
import { ConfigError } from "../config/load.js";
import type { Config } from "../config/schema.js";
import type { Clock } from "../core/clock.js";
import type { Logger } from "../core/log.js";
import type { EmbeddedDb } from "../sqlite/db.js";
import { createBackendArchiveStore } from "./backend-archive-store.js";

/**
 * The audit log the configuration asks for: in Redis, shared by every replica, when
 * `audit.type` is redis or the lease store is on one Redis (FENCEGATE_REDIS_URL); in the
 * gateway's own database otherwise.
 */
export async function openAuditLog(
  config: Config,
  env: { db: EmbeddedDb; ctx: { clock: Clock; gatewayId: string; log: Logger }; backend: StorageBackend },
): Promise<AuditLog> {
  const { db, ctx, backend } = env;
  const leaseRedis = config.leaseStore.type === "redis" ? config.leaseStore.url : undefined;
  const type = config.audit.type ?? (leaseRedis !== undefined ? "redis" : "embedded");
  if (type === "embedded") return createEmbeddedAuditLog({ db, gatewayId: ctx.gatewayId, clock: ctx.clock });
  const url = config.audit.url ?? leaseRedis;
  if (url === undefined) {
    throw new ConfigError(
      "audit.url: the Redis audit log needs a Redis (audit.url, or a lease store on one Redis)",
    );
  }
  // A Redis that is down at start-up does not stop the gateway: decisions answer 503 until it
  // is reachable, and health names it.
  const redis = openRedis(url);
  if (!(await redisReady(redis, 2_000))) {
    ctx.log.warn("the Redis audit log is not reachable yet: writes and lease calls answer 503 until it is");
  }
  const r = config.audit.retention;
  return createRedisAuditLog({
    redis,
    ownsConnection: true,
    ...(config.audit.keyPrefix ? { keyPrefix: config.audit.keyPrefix } : {}),
    gatewayId: ctx.gatewayId,
    clock: ctx.clock,
    log: ctx.log.child({ component: "audit" }),
    ...(r
      ? {
          retention: {
            archive:
              r.archiveBucket !== undefined
                ? createBackendArchiveStore({ backend, bucket: r.archiveBucket })
                : createDirArchiveStore(resolve(r.archiveDir!)),
            ...(r.maxRecords !== undefined ? { maxRecords: r.maxRecords } : {}),
            ...(r.maxAgeMs !== undefined ? { maxAgeMs: r.maxAgeMs } : {}),
            segmentRecords: r.segmentRecords,
            intervalMs: r.intervalMs,
          },
        }
      : {}),
  }).catch((e: unknown) => {
    redis.disconnect();
    throw e;
  });
}
