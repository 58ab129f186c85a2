/**
 * Flat cost as state grows, each figure next to the same measurement on a small state, same run:
 * - lease acquire+release with 100,000 live leases (key and prefix leases, one bucket) against a
 *   store holding one, alternating rounds (target: within 1.2x, i.e. a rate ratio >= 0.83);
 * - audit queries over 1,000,000 records, p95 latency per filter, against 1,000 records
 *   (target: p95 < 100 ms), and the gateway's mean CPU time per query (the cost, less sensitive
 *   to other load on the machine);
 * - a ListObjectsV2 page from a bucket of 1,000,000 objects against one of 1,000.
 *
 *   npx tsx benchmarks/growth.ts [--seconds 3] [--rounds 3] [--leases 100000] [--records 1000000] [--objects 1000000]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { leasePair } from "./leases.js";
import { Endpoint } from "./lib/http-client.js";
import { alternate, closedLoop, percentile } from "./lib/load.js";
import { AUDIT_SHAPE, auditKey, populateAudit, populateLeases, populateObjects } from "./lib/populate.js";
import { type Row, table } from "./lib/report.js";
import { cpuMsOf, FENCEGATE_CREDS, type Server, startFencegate } from "./lib/servers.js";

export type GrowthOptions = {
  seconds: number;
  rounds: number;
  concurrency: number;
  leases: number;
  records: number;
  objects: number;
  /** Audit queries per filter and state. */
  queries: number;
};

/** Alternating key and prefix leases on the client's own resources, each released at once. */
async function mixedPair(gw: Endpoint, client: number, n: number): Promise<void> {
  if (n % 2 === 0) return leasePair(gw, client, n);
  const body = Buffer.from(
    JSON.stringify({ bucket: "bench", prefix: `c${client}/p${n % 64}/`, ttlMs: 30_000 }),
  );
  const acquired = await gw.ok({
    method: "POST",
    path: "/_fence/v1/leases",
    headers: { "content-type": "application/json" },
    body,
  });
  const { leaseId } = JSON.parse(acquired.body.toString()) as { leaseId: string };
  await gw.ok({ method: "DELETE", path: `/_fence/v1/leases/${leaseId}` });
}

async function withGateways<T>(
  dirs: string[],
  run: (eps: Endpoint[], servers: Server[]) => Promise<T>,
  concurrency: number,
): Promise<T> {
  const servers: Server[] = await Promise.all(dirs.map((d, i) => startFencegate(d, {}, `fencegate-${i}`)));
  const eps = servers.map((s) => new Endpoint(s.name, s.url, FENCEGATE_CREDS, concurrency));
  try {
    return await run(eps, servers);
  } finally {
    for (const ep of eps) ep.close();
    await Promise.all(servers.map((s) => s.stop()));
  }
}

async function leaseGrowth(dir: string, opts: GrowthOptions): Promise<Row> {
  const small = join(dir, "leases-1");
  const large = join(dir, "leases-many");
  populateLeases(small, "bench", 1);
  populateLeases(large, "bench", opts.leases);
  return withGateways(
    [small, large],
    async ([one, many]) => {
      for (const ep of [one!, many!]) await closedLoop(opts.concurrency, 1, (c, n) => mixedPair(ep, c, n));
      const r = await alternate(["one", "many"] as const, opts.rounds, async (t) => {
        const ep = t === "one" ? one! : many!;
        return (await closedLoop(opts.concurrency, opts.seconds, (c, n) => mixedPair(ep, c, n))).perSecond;
      });
      return {
        name: `lease acquire+release, ${opts.leases.toLocaleString("en")} live leases`,
        value: r.many.median,
        unit: "pairs/s",
        baselineName: "1 live lease",
        baseline: r.one.median,
        target: { kind: "ratio>=", bound: 0.83 },
      };
    },
    opts.concurrency,
  );
}

type AuditCase = { filter: string; query: () => Array<[string, string]> };

function auditCases(): AuditCase[] {
  let seed = 99;
  const random = () => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed / 0x7fffffff;
  };
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
  const time = () => new Date(AUDIT_SHAPE.startMs + Math.floor(random() * AUDIT_SHAPE.spanMs)).toISOString();
  const limit = (): [string, string] => ["limit", String(pick([10, 100, 1000]))];
  return [
    { filter: "bucket", query: () => [["bucket", pick(AUDIT_SHAPE.buckets)], limit()] },
    { filter: "key", query: () => [["key", auditKey(Math.floor(random() * AUDIT_SHAPE.keys))], limit()] },
    {
      filter: "bucket+key",
      query: () => [
        ["bucket", pick(AUDIT_SHAPE.buckets)],
        ["key", auditKey(Math.floor(random() * AUDIT_SHAPE.keys))],
        limit(),
      ],
    },
    {
      filter: "prefix",
      query: () => {
        const key = auditKey(Math.floor(random() * AUDIT_SHAPE.keys));
        const cut = pick([key.indexOf("/") + 1, key.lastIndexOf("/") + 1, key.length - 1]);
        return [["prefix", key.slice(0, cut)], limit()];
      },
    },
    { filter: "leaseId", query: () => [["leaseId", `lease-${Math.floor(random() * 200_000)}`], limit()] },
    { filter: "decision", query: () => [["decision", pick(["accepted", "rejected"])], limit()] },
    { filter: "op", query: () => [["op", pick(AUDIT_SHAPE.ops.map(([op]) => op))], limit()] },
    { filter: "since", query: () => [["since", time()], limit()] },
    { filter: "until", query: () => [["until", time()], limit()] },
    {
      filter: "since+until",
      query: () => {
        const [a, b] = [time(), time()].sort();
        return [["since", a!], ["until", b!], limit()];
      },
    },
  ];
}

/** Latencies (ms) of each query, and of the page after it when there is one (the cursor). */
async function auditLatencies(ep: Endpoint, c: AuditCase, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const query = c.query();
    let cursor: string | null = null;
    for (let page = 0; page < 2; page++) {
      const q: Array<[string, string]> = cursor ? [...query, ["cursor", cursor]] : query;
      const started = performance.now();
      const res = await ep.ok({ method: "GET", path: "/_fence/v1/audit", query: q });
      out.push(performance.now() - started);
      cursor = (JSON.parse(res.body.toString()) as { nextCursor: string | null }).nextCursor;
      if (!cursor) break;
    }
  }
  return out;
}

async function auditGrowth(dir: string, opts: GrowthOptions): Promise<Row[]> {
  const small = join(dir, "audit-small");
  const large = join(dir, "audit-large");
  populateAudit(small, 1_000);
  populateAudit(large, opts.records);
  return withGateways(
    [small, large],
    async ([few, many], [fewServer, manyServer]) => {
      const rows: Row[] = [];
      const cpu: Row[] = [];
      for (const c of auditCases()) {
        await auditLatencies(many!, c, 3); // warm the statements
        // The gateway's CPU time per query too: what a query costs, whatever else runs.
        let before = cpuMsOf(fewServer!.pid);
        const base = await auditLatencies(few!, c, opts.queries);
        const baseCpu = (cpuMsOf(fewServer!.pid) - before) / base.length;
        before = cpuMsOf(manyServer!.pid);
        const big = await auditLatencies(many!, c, opts.queries);
        const bigCpu = (cpuMsOf(manyServer!.pid) - before) / big.length;
        cpu.push({
          name: `audit query gateway CPU (mean), filter ${c.filter}`,
          value: bigCpu,
          unit: "ms",
          baselineName: "1,000 records",
          baseline: baseCpu,
        });
        rows.push({
          name: `audit query p95, filter ${c.filter}, ${opts.records.toLocaleString("en")} records`,
          value: percentile(big, 95),
          unit: "ms",
          baselineName: "1,000 records",
          baseline: percentile(base, 95),
          target: { kind: "value<=", bound: 100 },
        });
      }
      return [...rows, ...cpu];
    },
    1,
  );
}

async function listGrowth(dir: string, opts: GrowthOptions): Promise<Row> {
  const data = join(dir, "list");
  await populateObjects(data, "small", 1_000);
  await populateObjects(data, "large", opts.objects);
  return withGateways(
    [data],
    async ([gw]) => {
      // Every page holds 1,000 objects: the small bucket's only page, and a page of the large
      // one from a point spread over the whole bucket (start-after: a seek, then 1,000 rows).
      const page = (bucket: string, n: number): Promise<unknown> => {
        const startAfter: Array<[string, string]> =
          bucket === "large"
            ? [["start-after", `obj/${String((n * 7919) % (opts.objects - 1000)).padStart(8, "0")}`]]
            : [];
        return gw!.ok({
          method: "GET",
          path: `/${bucket}`,
          query: [["list-type", "2"], ["max-keys", "1000"], ["prefix", "obj/"], ...startAfter],
        });
      };
      for (const b of ["small", "large"]) await closedLoop(opts.concurrency, 1, (_, n) => page(b, n));
      const r = await alternate(["small", "large"] as const, opts.rounds, async (b) => {
        return (await closedLoop(opts.concurrency, opts.seconds, (_, n) => page(b, n))).perSecond;
      });
      return {
        name: `ListObjectsV2 page of 1,000, bucket of ${opts.objects.toLocaleString("en")}`,
        value: r.large.median,
        unit: "pages/s",
        baselineName: "bucket of 1,000",
        baseline: r.small.median,
        target: { kind: "ratio>=", bound: 0.83 },
      };
    },
    opts.concurrency,
  );
}

export async function growthBench(opts: GrowthOptions): Promise<Row[]> {
  const dir = mkdtempSync(join(tmpdir(), "fencegate-bench-growth-"));
  try {
    const rows: Row[] = [];
    rows.push(await leaseGrowth(dir, opts));
    rows.push(...(await auditGrowth(dir, opts)));
    rows.push(await listGrowth(dir, opts));
    return rows;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.filename === process.argv[1]) {
  const { values } = parseArgs({
    options: {
      seconds: { type: "string", default: "3" },
      rounds: { type: "string", default: "3" },
      concurrency: { type: "string", default: "16" },
      leases: { type: "string", default: "100000" },
      records: { type: "string", default: "1000000" },
      objects: { type: "string", default: "1000000" },
      queries: { type: "string", default: "30" },
    },
  });
  const rows = await growthBench({
    seconds: Number(values.seconds),
    rounds: Number(values.rounds),
    concurrency: Number(values.concurrency),
    leases: Number(values.leases),
    records: Number(values.records),
    objects: Number(values.objects),
    queries: Number(values.queries),
  });
  console.log(table(rows));
}
