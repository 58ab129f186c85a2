/**
 * Lease acquire+release pairs per second through the lease API, against the gateway's own health
 * GET and a Hono hello-world on the same machine, 16 signing clients, alternating rounds; and the
 * gateway's CPU time per pair next to its CPU time per health GET (what each costs the gateway,
 * less sensitive to other load on the machine than the rates).
 *
 * Beside them, the ceiling of any lease pair: pairs of signed GETs of a live lease. They are the
 * same two signed lease API calls, authenticated and answered with the lease, with none of the
 * grant, release, audit records or commits; a lease pair cannot go faster than they do.
 *
 *   npx tsx benchmarks/leases.ts [--seconds 4] [--rounds 3]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Endpoint } from "./lib/http-client.js";
import { alternate, closedLoop } from "./lib/load.js";
import { type Row, table } from "./lib/report.js";
import { cpuMsOf, FENCEGATE_CREDS, startFencegate, startHonoHello } from "./lib/servers.js";

export type LeaseBenchOptions = { seconds: number; rounds: number; concurrency: number };

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

export async function leaseBench(opts: LeaseBenchOptions): Promise<Row[]> {
  const dir = mkdtempSync(join(tmpdir(), "fencegate-bench-leases-"));
  const fg = await startFencegate(join(dir, "fg"));
  const hono = await startHonoHello();
  const gw = new Endpoint("fencegate", fg.url, FENCEGATE_CREDS, opts.concurrency);
  const hello = new Endpoint("hono", hono.url, FENCEGATE_CREDS, opts.concurrency);
  try {
    await gw.ok({ method: "PUT", path: "/bench" });
    // One long lease per client for the signed reads.
    const readIds: string[] = [];
    for (let client = 0; client < opts.concurrency; client++) {
      readIds.push(await acquireLease(gw, `read/${client}`, 3_600_000));
    }
    // Warm both servers (JIT, prepared statements) before anything is measured.
    await closedLoop(opts.concurrency, 1, (c, n) => leasePair(gw, c, n));
    await closedLoop(opts.concurrency, 0.5, () => hello.ok({ method: "GET", path: "/" }));
    // The gateway's CPU time per operation, over all rounds: what a pair costs it next to what a
    // health GET costs it, whatever else the machine is doing.
    const cpu = { pairs: { ms: 0, ops: 0 }, reads: { ms: 0, ops: 0 }, health: { ms: 0, ops: 0 } };
    const targets = ["pairs", "reads", "health", "hono"] as const;
    const results = await alternate(targets, opts.rounds, async (target) => {
      const before = cpuMsOf(fg.pid);
      let rate: Awaited<ReturnType<typeof closedLoop>>;
      if (target === "pairs") {
        rate = await closedLoop(opts.concurrency, opts.seconds, (c, n) => leasePair(gw, c, n));
      } else if (target === "reads") {
        rate = await closedLoop(opts.concurrency, opts.seconds, (c) => readPair(gw, readIds[c]!));
      } else {
        const ep = target === "health" ? gw : hello;
        const path = target === "health" ? "/_fence/v1/health" : "/";
        rate = await closedLoop(opts.concurrency, opts.seconds, () => ep.ok({ method: "GET", path }));
      }
      if (target !== "hono") {
        cpu[target].ms += cpuMsOf(fg.pid) - before;
        cpu[target].ops += rate.ops;
      }
      return rate.perSecond;
    });
    const perHealthGet = (name: string, spent: { ms: number; ops: number }): Row => ({
      name,
      value: spent.ms / spent.ops,
      unit: "ms",
      baselineName: "per health GET",
      baseline: cpu.health.ms / cpu.health.ops,
    });
    return [
      {
        name: "lease acquire+release",
        value: results.pairs.median,
        unit: "pairs/s",
        baselineName: "gateway health GET/s",
        baseline: results.health.median,
        target: { kind: "ratio>=", bound: 0.3 },
      },
      {
        name: "lease acquire+release",
        value: results.pairs.median,
        unit: "pairs/s",
        baselineName: "Hono hello-world GET/s",
        baseline: results.hono.median,
      },
      perHealthGet("gateway CPU time per lease acquire+release pair", cpu.pairs),
      {
        name: "ceiling: pairs of signed lease GETs",
        value: results.reads.median,
        unit: "pairs/s",
        baselineName: "gateway health GET/s",
        baseline: results.health.median,
      },
      {
        name: "lease acquire+release",
        value: results.pairs.median,
        unit: "pairs/s",
        baselineName: "pairs of signed lease GETs/s",
        baseline: results.reads.median,
      },
      perHealthGet("gateway CPU time per pair of signed lease GETs", cpu.reads),
    ];
  } finally {
    gw.close();
    hello.close();
    await Promise.all([fg.stop(), hono.stop()]);
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
  const rows = await leaseBench({
    seconds: Number(values.seconds),
    rounds: Number(values.rounds),
    concurrency: Number(values.concurrency),
  });
  console.log(table(rows));
}
