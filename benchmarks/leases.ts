/**
 * Lease acquire+release pairs per second, and the server CPU time each pair costs, against what a
 * user who needs a durable lease with a fencing token would pick instead. 16 clients, each
 * acquiring and releasing a lease on its own keys, every target durable before it answers,
 * alternating rounds, medians:
 *
 * - fencegate, embedded default: a signed POST /_fence/v1/leases and a signed DELETE (SQLite,
 *   group commit with fsync, audit record per grant and release);
 * - fencegate with its lease store (and audit log) on Redis with `appendfsync always`: the same
 *   two signed calls through one gateway;
 * - etcd (Debian's etcd-server, default fsync): lease grant + txn create-if-absent of the key
 *   attached to the lease (its revision is the token) + revoke, through the `etcd3` client;
 * - Redis with `appendfsync always`, called directly: one Lua SET NX PX + INCR of a fence counter,
 *   one Lua compare-and-delete (ioredis, EVALSHA) — the same Redis the gateway above uses;
 * - the ceiling of a lease pair through the lease API: two signed GETs of a live lease (the same
 *   authentication and answer, none of the grant, release, audit records or commits).
 *
 * Server CPU per pair is read from /proc/<pid>/stat (utime + stime) of each server process and
 * its children: the gateway's, etcd's, redis-server's (for the Redis store: gateway + Redis).
 *
 *   npx tsx benchmarks/leases.ts [--seconds 3] [--rounds 3] [--concurrency 16]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Redis } from "ioredis";
import { Endpoint } from "./lib/http-client.js";
import { alternate, closedLoop } from "./lib/load.js";
import { etcdPair, REDIS_ACQUIRE, REDIS_RELEASE, startDurableRedis, startEtcd } from "./lib/peers.js";
import { type Row, table } from "./lib/report.js";
import { cpuMsOfTree, FENCEGATE_CREDS, startFencegate } from "./lib/servers.js";

export type LeaseBenchOptions = {
  seconds: number;
  rounds: number;
  concurrency: number;
  /** Warm-up of each gateway target before the rounds (default 3 s). */
  warmSeconds?: number;
};

/** Acquires a lease on a key of the bench bucket through the lease API; answers its id. */
async function acquireLease(gw: Endpoint, key: string, ttlMs: number): Promise<string> {
  const acquired = await gw.ok({
    method: "POST",
    path: "/_fence/v1/leases",
    headers: { "content-type": "application/json" },
    body: Buffer.from(JSON.stringify({ bucket: "bench", key, ttlMs })),
  });
  return (JSON.parse(acquired.body.toString()) as { leaseId: string }).leaseId;
}

/** One acquire and one release of a lease on the client's own key. */
export async function leasePair(gw: Endpoint, client: number, n: number): Promise<void> {
  const leaseId = await acquireLease(gw, `c${client}/k${n % 64}`, 30_000);
  await gw.ok({ method: "DELETE", path: `/_fence/v1/leases/${leaseId}` });
}

/** Two signed reads of a live lease: the lease API's own cost for two calls, without the lease work. */
async function readPair(gw: Endpoint, leaseId: string): Promise<void> {
  await gw.ok({ method: "GET", path: `/_fence/v1/leases/${leaseId}` });
  await gw.ok({ method: "GET", path: `/_fence/v1/leases/${leaseId}` });
}

/** Commands a Redis has run so far (the sum of INFO commandstats' calls). */
async function redisCalls(redis: { command(...args: string[]): Promise<unknown> }): Promise<number> {
  const info = String(await redis.command("INFO", "commandstats"));
  let calls = 0;
  for (const m of info.matchAll(/^cmdstat_[^:]+:calls=(\d+)/gm)) calls += Number(m[1]);
  return calls;
}

type LuaRedis = Redis & {
  fenceAcquire(key: string, counter: string, owner: string, ttlMs: number): Promise<number | null>;
  fenceRelease(key: string, owner: string): Promise<number>;
};

const TARGETS = ["fencegate", "redis-gateway", "etcd", "redis-lua", "reads"] as const;
type Target = (typeof TARGETS)[number];

export async function leaseBench(opts: LeaseBenchOptions): Promise<Row[]> {
  const dir = mkdtempSync(join(tmpdir(), "fencegate-bench-leases-"));
  const [etcd, redis] = await Promise.all([startEtcd(), startDurableRedis()]);
  const [fg, fgRedis] = await Promise.all([
    startFencegate(join(dir, "fg")),
    startFencegate(
      join(dir, "fg-redis"),
      {
        FENCEGATE_REDIS_URL: redis.url,
        FENCEGATE_TOKEN_SIGNING_KEY: "bench-signing-key-for-replicas",
        FENCEGATE_GATEWAY_ID: "gw-redis",
      },
      "fencegate-redis",
    ),
  ]);
  const gw = new Endpoint("fencegate", fg.url, FENCEGATE_CREDS, opts.concurrency);
  const gwRedis = new Endpoint("fencegate-redis", fgRedis.url, FENCEGATE_CREDS, opts.concurrency);
  const lua = new Redis(redis.url, { lazyConnect: false }) as LuaRedis;
  lua.defineCommand("fenceAcquire", { numberOfKeys: 2, lua: REDIS_ACQUIRE });
  lua.defineCommand("fenceRelease", { numberOfKeys: 1, lua: REDIS_RELEASE });
  const luaPair = async (client: number, n: number) => {
    const key = `lua:c${client}/k${n % 64}`;
    const owner = `${client}:${n}`;
    const token = await lua.fenceAcquire(key, `fence:${key}`, owner, 30_000);
    if (!(typeof token === "number" && token > 0)) throw new Error(`redis: ${key} still held`);
    if ((await lua.fenceRelease(key, owner)) !== 1) throw new Error(`redis: ${key} not released`);
  };
  try {
    await gw.ok({ method: "PUT", path: "/bench" });
    await gwRedis.ok({ method: "PUT", path: "/bench" });
    // One long lease per client for the signed reads.
    const readIds: string[] = [];
    for (let client = 0; client < opts.concurrency; client++) {
      readIds.push(await acquireLease(gw, `read/${client}`, 3_600_000));
    }
    const run: Record<Target, (c: number, n: number) => Promise<void>> = {
      fencegate: (c, n) => leasePair(gw, c, n),
      "redis-gateway": (c, n) => leasePair(gwRedis, c, n),
      etcd: (c, n) => etcdPair(etcd.client, `etcd/c${c}/k${n % 64}`),
      "redis-lua": luaPair,
      reads: (c) => readPair(gw, readIds[c]!),
    };
    // The servers each target costs CPU on.
    const pids: Record<Target, number[]> = {
      fencegate: [fg.pid],
      "redis-gateway": [fgRedis.pid, redis.pid],
      etcd: [etcd.pid],
      "redis-lua": [redis.pid],
      reads: [fg.pid],
    };
    // Warm every target (prepared statements, script cache, connections) before measuring; the
    // gateways longest: V8 keeps compiling their hot paths for the first thousands of requests,
    // and that one-off cost is not what a pair costs a running gateway.
    for (const t of TARGETS) {
      const gateway = t === "fencegate" || t === "redis-gateway" || t === "reads";
      await closedLoop(opts.concurrency, gateway ? (opts.warmSeconds ?? 3) : 0.5, run[t]);
    }
    const cpu = Object.fromEntries(TARGETS.map((t) => [t, { ms: 0, ops: 0, redisMs: 0 }])) as Record<
      Target,
      { ms: number; ops: number; redisMs: number }
    >;
    const cpuNow = (t: Target) => pids[t].map(cpuMsOfTree);
    // Commands Redis ran for the gateway's pairs and for the direct ones (INFO commandstats, which
    // counts the calls a script makes as well as the EVALSHA).
    const commands = { "redis-gateway": 0, "redis-lua": 0 };
    const results = await alternate(TARGETS, opts.rounds, async (t) => {
      const counted = t === "redis-gateway" || t === "redis-lua";
      const calls0 = counted ? await redisCalls(redis) : 0;
      const before = cpuNow(t);
      const rate = await closedLoop(opts.concurrency, opts.seconds, run[t]);
      const after = cpuNow(t);
      if (counted) commands[t] += (await redisCalls(redis)) - calls0 - 1; // less the INFO itself
      cpu[t].ms += after.reduce((a, v, i) => a + v - before[i]!, 0);
      if (t === "redis-gateway") cpu[t].redisMs += after[1]! - before[1]!;
      cpu[t].ops += rate.ops;
      return rate.perSecond;
    });
    const us = (t: Target) => (cpu[t].ms * 1000) / cpu[t].ops;
    const etcdRate = results.etcd.median;
    return [
      {
        name: "lease pairs/s, embedded default",
        value: results.fencegate.median,
        unit: "pairs/s",
        baselineName: "etcd",
        baseline: etcdRate,
        target: { kind: "ratio>=", bound: 2 },
      },
      {
        name: "server CPU per lease pair, embedded default (gateway)",
        value: us("fencegate"),
        unit: "µs",
        baselineName: "etcd server",
        baseline: us("etcd"),
        target: { kind: "ratio<=", bound: 0.5 },
      },
      {
        name: "lease pairs/s, one gateway on the Redis lease store",
        value: results["redis-gateway"].median,
        unit: "pairs/s",
        baselineName: "etcd",
        baseline: etcdRate,
        target: { kind: "ratio>=", bound: 1 },
      },
      {
        name: "gateway + Redis CPU per lease pair, Redis lease store",
        value: us("redis-gateway"),
        unit: "µs",
        baselineName: "Redis CPU per direct Lua pair",
        baseline: us("redis-lua"),
        target: { kind: "ratio<=", bound: 4 },
      },
      {
        name: "  of which Redis CPU per lease pair, Redis lease store",
        value: (cpu["redis-gateway"].redisMs * 1000) / cpu["redis-gateway"].ops,
        unit: "µs",
        baselineName: "Redis CPU per direct Lua pair",
        baseline: us("redis-lua"),
      },
      {
        name: "  Redis commands per lease pair (scripts' own calls included)",
        value: commands["redis-gateway"] / cpu["redis-gateway"].ops,
        unit: "commands",
        baselineName: "per direct Lua pair",
        baseline: commands["redis-lua"] / cpu["redis-lua"].ops,
      },
      {
        name: "direct Redis Lua pairs/s (appendfsync always)",
        value: results["redis-lua"].median,
        unit: "pairs/s",
        baselineName: "etcd",
        baseline: etcdRate,
      },
      {
        name: "ceiling: pairs of signed lease GETs/s, embedded default",
        value: results.reads.median,
        unit: "pairs/s",
        baselineName: "lease pairs/s, embedded default",
        baseline: results.fencegate.median,
      },
      {
        name: "gateway CPU per pair of signed lease GETs",
        value: us("reads"),
        unit: "µs",
        baselineName: "per lease pair, embedded default",
        baseline: us("fencegate"),
      },
    ];
  } finally {
    gw.close();
    gwRedis.close();
    lua.disconnect();
    await Promise.all([fg.stop(), fgRedis.stop()]);
    await Promise.all([etcd.stop(), redis.stop()]);
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.filename === process.argv[1]) {
  const { values } = parseArgs({
    options: {
      seconds: { type: "string", default: "3" },
      rounds: { type: "string", default: "3" },
      concurrency: { type: "string", default: "16" },
    },
  });
  const rows = await leaseBench({
    seconds: Number(values.seconds),
    rounds: Number(values.rounds),
    concurrency: Number(values.concurrency),
  });
  console.log(table(rows));
}
