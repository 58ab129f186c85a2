/**
 * Lease acquire+release pairs per second with the lease store (and audit log) on one Redis:
 * through one gateway replica, through three replicas (clients spread over them), and, in the
 * same run on the same Redis, the raw EVALSHA baseline: the same acquire and release scripts
 * called directly (createRedisLeaseStore in this process, no HTTP, no signatures, no audit).
 * 16 clients, alternating rounds, medians.
 *
 *   npx tsx benchmarks/leases-redis.ts [--seconds 4] [--rounds 3] [--concurrency 16]
 *
 * Starts its own redis-server on a free port (never 6379), without persistence.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { createRedisLeaseStore } from "../src/leases/redis/redis-lease-store.js";
import { createFileEpochStore } from "../src/leases/redis-shared/file-epoch-store.js";
import { startRedis } from "../test/support/redis.js";
import { leasePair } from "./leases.js";
import { Endpoint } from "./lib/http-client.js";
import { alternate, closedLoop } from "./lib/load.js";
import { type Row, table } from "./lib/report.js";
import { FENCEGATE_CREDS, startFencegate } from "./lib/servers.js";

export type RedisLeaseBenchOptions = { seconds: number; rounds: number; concurrency: number };

export async function redisLeaseBench(opts: RedisLeaseBenchOptions): Promise<Row[]> {
  const dir = mkdtempSync(join(tmpdir(), "fencegate-bench-redis-leases-"));
  const redis = await startRedis();
  const env = {
    FENCEGATE_REDIS_URL: redis.url,
    FENCEGATE_TOKEN_SIGNING_KEY: "bench-signing-key-for-replicas",
  };
  const gateways = await Promise.all(
    [0, 1, 2].map((i) =>
      startFencegate(join(dir, `gw${i}`), { ...env, FENCEGATE_GATEWAY_ID: `gw${i}` }, `gw${i}`),
    ),
  );
  const endpoints = gateways.map((g) => new Endpoint(g.name, g.url, FENCEGATE_CREDS, opts.concurrency));
  const direct = createRedisLeaseStore({
    url: redis.url,
    keyPrefix: "{bench-direct}",
    epochs: createFileEpochStore(join(dir, "direct-epochs")),
  });
  try {
    if (!(await direct.ready(5_000))) throw new Error("Redis not reachable");
    await endpoints[0]!.ok({ method: "PUT", path: "/bench" });
    const rawPair = async (client: number, n: number) => {
      const r = await direct.tryAcquire({
        resource: { bucket: "bench", key: `c${client}/k${n % 64}` },
        ttlMs: 30_000,
        owner: "bench",
      });
      if (!r.granted) throw new Error("not granted");
      await direct.release(r.lease.leaseId);
    };
    // Warm-up: JIT, script cache, connections.
    await closedLoop(opts.concurrency, 1, (c, n) => leasePair(endpoints[0]!, c, n));
    await closedLoop(opts.concurrency, 0.5, rawPair);
    const results = await alternate(["one", "three", "raw"] as const, opts.rounds, async (target) => {
      const rate =
        target === "raw"
          ? await closedLoop(opts.concurrency, opts.seconds, rawPair)
          : await closedLoop(opts.concurrency, opts.seconds, (c, n) =>
              leasePair(target === "one" ? endpoints[0]! : endpoints[c % 3]!, c, n),
            );
      return rate.perSecond;
    });
    return [
      {
        name: "lease acquire+release pairs/s, one replica on one Redis",
        value: results.one.median,
        unit: "pairs/s",
        baselineName: "raw EVALSHA of the same scripts",
        baseline: results.raw.median,
      },
      {
        name: "lease acquire+release pairs/s, three replicas on one Redis",
        value: results.three.median,
        unit: "pairs/s",
        baselineName: "raw EVALSHA of the same scripts",
        baseline: results.raw.median,
      },
    ];
  } finally {
    for (const e of endpoints) e.close();
    await direct.close();
    await Promise.all(gateways.map((g) => g.stop()));
    await redis.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.filename === process.argv[1]) {
  const { values } = parseArgs({
    options: {
      seconds: { type: "string", default: "4" },
      rounds: { type: "string", default: "3" },
      concurrency: { type: "string", default: "16" },
    },
  });
  const rows = await redisLeaseBench({
    seconds: Number(values.seconds),
    rounds: Number(values.rounds),
    concurrency: Number(values.concurrency),
  });
  console.log(table(rows));
}
