import { join } from "node:path";
import type { StorageBackend } from "../backends/storage-backend.js";
import { ConfigError } from "../config/load.js";
import type { Config } from "../config/schema.js";
import type { Clock } from "../core/clock.js";
import type { Logger } from "../core/log.js";
import { redactUrl } from "../core/redis-connection.js";
import { legacyObjectFloor, withFloors } from "../epochs/epoch-floors.js";
import { grantsNeedEpochs } from "../epochs/grant-guard.js";
import { createSystemEpochStore, type SystemEpochStore } from "../epochs/system-epoch-store.js";
import { createEmbeddedLeaseStore } from "../leases/embedded/embedded-lease-store.js";
import type { LeaseEvents, LeaseStore } from "../leases/lease-store.js";
import { createRedisLeaseStore } from "../leases/redis/redis-lease-store.js";
import type { EpochStore } from "../leases/redis-shared/epoch-store.js";
import { createFileEpochStore } from "../leases/redis-shared/file-epoch-store.js";
import { createRedlockLeaseStore } from "../leases/redlock/redlock-lease-store.js";
import type { EmbeddedDb } from "../sqlite/db.js";

/** How long the start waits for Redis before serving with lease calls answering 503. */
const START_WAIT_MS = 3_000;

/** The system bucket of a remote default backend, unless backend.systemBucket names another. */
const DEFAULT_SYSTEM_BUCKET = "fencegate-system";

/** Where older versions kept epoch objects when leaseStore.epochs gave no prefix. */
const LEGACY_EPOCHS_PREFIX = ".fencegate/redis-epochs/";

/**
 * The bucket of the default backend that holds fencegate's own records, when that backend is a
 * remote store (s3, azure); the gateway reserves its name. The fs backend has none.
 */
export function systemBucketOf(config: Config): string | undefined {
  if (config.backend.type === "fs") return undefined;
  const legacy = config.leaseStore.type === "embedded" ? undefined : config.leaseStore.epochs?.bucket;
  return legacy ?? config.backend.systemBucket ?? DEFAULT_SYSTEM_BUCKET;
}

type EpochSpec = { epochs?: { bucket: string; prefix?: string | undefined } | undefined };

/**
 * Where the token epochs of a Redis or Redlock lease store live, decided once, here. With a remote
 * default backend (s3, azure, or a routed configuration whose default is one), always in its
 * system bucket, shared by every replica: also when the deployment is set up from the environment
 * alone, and never anywhere else. Only with the fs default backend (one machine, one gateway) in
 * `<dataDir>/<dirName>`. Epochs that older versions kept elsewhere still count (epoch-floors.ts).
 */
function openEpochs(
  config: Config,
  spec: EpochSpec,
  env: { backend: StorageBackend; dirName: string },
): { epochs: EpochStore; system?: SystemEpochStore } {
  const { backend } = env;
  const localDir = join(config.dataDir, env.dirName);
  const bucket = systemBucketOf(config);
  if (bucket === undefined) {
    const files = createFileEpochStore(localDir);
    const legacy = spec.epochs
      ? [legacyObjectFloor(backend, spec.epochs.bucket, spec.epochs.prefix ?? LEGACY_EPOCHS_PREFIX)]
      : [];
    return { epochs: withFloors(files, legacy) };
  }
  if (!backend.systemRecords) {
    throw new ConfigError(`backend: the ${backend.kind} backend keeps no system records for token epochs`);
  }
  const system = createSystemEpochStore({
    records: backend.systemRecords(bucket),
    ...(spec.epochs ? { legacyPrefix: spec.epochs.prefix ?? LEGACY_EPOCHS_PREFIX } : {}),
    localDirs: [localDir],
  });
  return { epochs: system, system };
}

/**
 * Opens the system bucket (creating it when missing) before the gateway serves, waiting for it as
 * long as for Redis. One that cannot be used, or has not answered yet, does not stop the start:
 * every grant answers 503 naming it until it can be used.
 */
async function openSystemBucket(system: SystemEpochStore | undefined, log: Logger): Promise<void> {
  if (!system) return;
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    system.ready().then(
      () => "ready" as const,
      (e: unknown) => e as Error,
    ),
    new Promise<"waiting">((resolve) => {
      timer = setTimeout(() => resolve("waiting"), START_WAIT_MS);
    }),
  ]);
  clearTimeout(timer);
  if (outcome === "waiting") {
    log.warn("the system bucket of the token epochs has not answered yet: grants answer 503 until it does");
  } else if (outcome instanceof Error) {
    log.error(
      { err: outcome.message },
      "token epochs cannot be kept: every grant answers 503 until they can",
    );
  }
}

/**
 * The lease store the configuration asks for: the embedded one, or one Redis shared by every
 * replica (FENCEGATE_REDIS_URL). A Redis that is down at start-up does not stop the gateway: lease
 * calls and fenced writes answer 503 until it is reachable, and health names it. Settings that
 * break mutual exclusion stop the start (unless leaseStore.unsafeSettings is warn).
 */
export async function openLeaseStore(
  config: Config,
  env: { db: EmbeddedDb; backend: StorageBackend; ctx: { clock: Clock; log: Logger }; events: LeaseEvents },
): Promise<LeaseStore> {
  const { db, backend, ctx, events } = env;
  const spec = config.leaseStore;
  if (spec.type === "embedded") return createEmbeddedLeaseStore({ db, clock: ctx.clock, events });
  const log = ctx.log.child({ component: "leases" });
  if (spec.type === "redlock") return openRedlockLeaseStore(config, spec, { backend, ctx, log, events });
  const { epochs, system } = openEpochs(config, spec, { backend, dirName: "redis-epochs" });
  await openSystemBucket(system, log);
  const store = createRedisLeaseStore({
    url: spec.url,
    epochs,
    ...(spec.keyPrefix ? { keyPrefix: spec.keyPrefix } : {}),
    unsafeSettings: spec.unsafeSettings,
    commandTimeoutMs: spec.commandTimeoutMs,
    quarantineMs: spec.quarantineAfterLoss ? config.leases.maxTtlMs : 0,
    log,
    events,
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
  return system ? grantsNeedEpochs(store, system) : store;
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
  env: { backend: StorageBackend; ctx: { clock: Clock; log: Logger }; log: Logger; events: LeaseEvents },
): Promise<LeaseStore> {
  const { backend, ctx, log, events } = env;
  const { epochs, system } = openEpochs(config, spec, { backend, dirName: "redlock-epochs" });
  await openSystemBucket(system, log);
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
    events,
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
  return system ? grantsNeedEpochs(store, system) : store;
}
