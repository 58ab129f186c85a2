// The system under test of a nemesis run: two gateway replicas (processes) on one Redis lease
// store and audit log (AOF, fsync on every write) reached through the Redis fault proxy, sharing
// one remote store (S3: a second fencegate; Azure: Azurite) reached through the HTTP fault proxy,
// one token-signing key and the store's system bucket for token epochs.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { HttpMatch } from "../../support/fault-proxy.js";
import { type GatewayProcess, spawnGateway, tempDir } from "../../support/gateway.js";
import { type RedisServer, startRedis } from "../../support/redis.js";
import { type RedisFaultProxy, startRedisFaultProxy } from "../../support/redis-fault-proxy.js";
import { signedRequest } from "../../support/signed-http.js";
import { type FaultyStore, faultyAzure, faultyS3 } from "../faults/faulty-store.js";

export type StoreName = "s3" | "azure";

export type ClusterOptions = {
  store: StoreName;
  bucket: string;
  keys: readonly string[];
  replicas: number;
  /** Every call of a replica to the store gives up after this long. */
  storeTimeoutMs: number;
  /** Every Redis command of a replica gives up after this long. */
  redisTimeoutMs: number;
};

export type Cluster = {
  store: FaultyStore;
  /** The Redis of the moment (a restart gives a new handle on the same port and directory). */
  redis: RedisServer;
  redisProxy: RedisFaultProxy;
  replicas: GatewayProcess[];
  /** Requests that commit one of the run's objects (the store's conditional writes). */
  commits: HttpMatch;
  /** Those, and the reads of the objects' state (what a write reads before and after its commit). */
  objectState: HttpMatch;
  stop(): Promise<void>;
};

export const SIGNING_KEY = "one-signing-key-for-every-replica-of-the-nemesis-run";

export async function startCluster(opts: ClusterOptions): Promise<Cluster> {
  const dirs: Array<{ cleanup(): void }> = [];
  const store = opts.store === "s3" ? await faultyS3() : await faultyAzure();
  let redis: RedisServer | undefined;
  let redisProxy: RedisFaultProxy | undefined;
  const replicas: GatewayProcess[] = [];
  const stop = async () => {
    for (const r of replicas) {
      try {
        process.kill(r.child.pid!, "SIGCONT");
      } catch {}
      await r.kill("SIGKILL");
    }
    await redisProxy?.close();
    await redis?.stop();
    await store.stop();
    for (const d of dirs) d.cleanup();
  };
  try {
    redis = await startRedis({ persistence: "aof" });
    redisProxy = await startRedisFaultProxy(redis.port);
    const confDir = tempDir("fencegate-nemesis-");
    dirs.push(confDir);
    const config = join(confDir.path, "replicas.yaml");
    // JSON is YAML: the configuration an operator would write for replicas on one Redis.
    const settings = {
      backend: store.backend({ requestTimeoutMs: opts.storeTimeoutMs }),
      leaseStore: {
        type: "redis",
        url: redisProxy.url,
        // The private test Redis runs without a maxmemory.
        unsafeSettings: "warn",
        commandTimeoutMs: opts.redisTimeoutMs,
      },
      leases: { minTtlMs: 500 },
    };
    writeFileSync(config, JSON.stringify(settings, null, 2));
    for (let i = 0; i < opts.replicas; i++) {
      const dir = tempDir("fencegate-nemesis-replica-");
      dirs.push(dir);
      replicas.push(
        await spawnGateway(dir.path, {
          FENCEGATE_CONFIG: config,
          FENCEGATE_GATEWAY_ID: `r${i}`,
          FENCEGATE_TOKEN_SIGNING_KEY: SIGNING_KEY,
          FENCEGATE_LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? "error",
        }),
      );
    }
    const created = await signedRequest(replicas[0]!.url, { method: "PUT", path: `/${opts.bucket}` });
    if (created.status !== 200) {
      throw new Error(`CreateBucket ${opts.bucket} answered ${created.status}: ${created.text}`);
    }
  } catch (e) {
    await stop();
    throw e;
  }
  const perKey = opts.keys.map((key) => store.commit(opts.bucket, key));
  const reads = opts.keys.map((key) => store.stateRead(opts.bucket, key));
  const on = (matches: HttpMatch[], p: string) =>
    matches.some((m) => typeof m.path === "function" && m.path(p));
  // The commit matchers' query test keeps Azure's other PUTs of a blob (its blocks) out.
  const query = perKey[0]?.query;
  const commits: HttpMatch = { method: "PUT", path: (p) => on(perKey, p), ...(query ? { query } : {}) };
  const objectState: HttpMatch = {
    method: ["PUT", "GET", "HEAD"],
    path: (p) => on(perKey, p) || on(reads, p),
    ...(query ? { query } : {}),
  };
  const cluster: Cluster = {
    store,
    redis: redis!,
    redisProxy: redisProxy!,
    replicas,
    commits,
    objectState,
    stop: async () => {
      // The handle of the moment owns Redis's directory after restarts.
      redis = cluster.redis;
      await stop();
    },
  };
  return cluster;
}
