import { join } from "node:path";
import type { StorageBackend } from "../backends/storage-backend.js";
import { ConfigError } from "../config/load.js";
import type { Config } from "../config/schema.js";
import type { Clock } from "../core/clock.js";
import { DomainError } from "../core/errors.js";
import type { Logger } from "../core/log.js";
import type { EmbeddedDb } from "../embedded/db.js";
import { createBackendEpochStore } from "../epochs/backend-epoch-store.js";
import { createEmbeddedLeaseStore } from "../leases/embedded/embedded-lease-store.js";
import type { LeaseStore } from "../leases/lease-store.js";
import { createFileEpochStore } from "../leases/redis/file-epoch-store.js";
import { createRedisLeaseStore, redactUrl } from "../leases/redis/redis-lease-store.js";
import { createRedlockLeaseStore } from "../leases/redlock/redlock-lease-store.js";

/** How long the start waits for Redis before serving with lease calls answering 503. */
const START_WAIT_MS = 3_000;

/**
 * The lease store the configuration asks for: the embedded one, or one Redis shared by every
 * replica (FENCEGATE_REDIS_URL). A Redis that is down at start-up does not stop the gateway: lease
 * calls and fenced writes answer 503 until it is reachable, and health names it. Settings that
 * break mutual exclusion stop the start (unless leaseStore.unsafeSettings is warn).
 */
export async function openLeaseStore(
  config: Config,
  env: { db: EmbeddedDb; backend: StorageBackend; ctx: { clock: Clock; log: Logger } },
): Promise<LeaseStore> {
  const { db, backend, ctx } = env;
  const spec = config.leaseStore;
  if (spec.type === "embedded") return createEmbeddedLeaseStore({ db, clock: ctx.clock });
  const log = ctx.log.child({ component: "leases" });
  if (spec.type === "redlock") return openRedlockLeaseStore(config, spec, { backend, ctx, log });
  const epochs = spec.epochs
    ? createBackendEpochStore({
        backend,
        bucket: spec.epochs.bucket,
        ...(spec.epochs.prefix ? { prefix: spec.epochs.prefix } : {}),
      })
    : createFileEpochStore(join(config.dataDir, "redis-epochs"));
  if (!spec.epochs && config.backend.type !== "fs") {
    log.warn(
      "leaseStore.epochs is not set: token epochs live in this gateway's data directory, which is safe for one gateway only; several replicas must share leaseStore.epochs.bucket",
    );
  }
  if (spec.epochs) {
    // A missing bucket is a configuration error, found now rather than at the first grant.
    await epochs.highest().catch((e: unknown) => {
      if (e instanceof DomainError && e.code === "NoSuchBucket") {
        throw new ConfigError(`leaseStore.epochs.bucket: bucket ${spec.epochs!.bucket} does not exist`);
      }
      log.warn({ err: (e as Error).message }, "the token epoch store is not reachable yet");
    });
  }
  const store = createRedisLeaseStore({
    url: spec.url,
    epochs,
    ...(spec.keyPrefix ? { keyPrefix: spec.keyPrefix } : {}),
    unsafeSettings: spec.unsafeSettings,
    commandTimeoutMs: spec.commandTimeoutMs,
    quarantineMs: spec.quarantineAfterLoss ? config.leases.maxTtlMs : 0,
    log,
  });
  if (!(await store.ready(START_WAIT_MS))) {
    log.warn(
      { redis: redactUrl(spec.url) },
      "the Redis lease store is not reachable yet: lease calls and fenced writes answer 503 until it is",
    );
  } else if (spec.unsafeSettings === "refuse" && (store.settings?.unsafe.length ?? 0) > 0) {
    await store.close();
    throw new ConfigError(
      `leaseStore: unsafe Redis settings at ${redactUrl(spec.url)}: ${store.settings!.unsafe.join("; ")} (or set leaseStore.unsafeSettings: warn)`,
    );
  }
  return store;
}

type RedlockSpec = Extract<Config["leaseStore"], { type: "redlock" }>;

/**
 * The Redlock quorum (FENCEGATE_REDLOCK_URLS): independent Redis masters, a majority of which
 * must agree. Instances down at start-up do not stop the gateway: lease calls and fenced writes
 * answer 503 until a majority is reachable, and health says so. An instance that lost its data
 * stays out of the quorum for leases.maxTtlMs.
 */
async function openRedlockLeaseStore(
  config: Config,
  spec: RedlockSpec,
  env: { backend: StorageBackend; ctx: { clock: Clock; log: Logger }; log: Logger },
): Promise<LeaseStore> {
  const { backend, ctx, log } = env;
  const epochs = spec.epochs
    ? createBackendEpochStore({
        backend,
        bucket: spec.epochs.bucket,
        ...(spec.epochs.prefix ? { prefix: spec.epochs.prefix } : {}),
      })
    : createFileEpochStore(join(config.dataDir, "redlock-epochs"));
  if (!spec.epochs && config.backend.type !== "fs") {
    log.warn(
      "leaseStore.epochs is not set: token epochs live in this gateway's data directory, which is safe for one gateway only; several replicas must share leaseStore.epochs.bucket",
    );
  }
  if (spec.urls.length < 3) {
    log.warn(
      { instances: spec.urls.length },
      "the Redlock lease store has fewer than 3 instances: it survives no instance failure",
    );
  }
  const store = createRedlockLeaseStore({
    urls: spec.urls,
    epochs,
    clock: ctx.clock,
    quarantineMs: config.leases.maxTtlMs,
    ...(spec.keyPrefix ? { keyPrefix: spec.keyPrefix } : {}),
    ...(spec.commandTimeoutMs ? { commandTimeoutMs: spec.commandTimeoutMs } : {}),
    log,
  });
  if (!(await store.ready(START_WAIT_MS))) {
    log.warn(
      { redis: spec.urls.map(redactUrl) },
      "a majority of the Redlock instances is not reachable yet: lease calls and fenced writes answer 503 until it is",
    );
  }
  return store;
}
