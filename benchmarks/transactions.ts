/**
 * Fenced transactions on the embedded default and on the S3 backend: for transactions of 1, 10 and 1,000 objects of
 * 4 KiB, the commit's latency (the one POST .../commit, every staged write made visible in one
 * durable step) against one single fenced PUT's latency, and the whole job's throughput (stage
 * the objects with 16 clients, then commit) against the same objects written as single fenced
 * PUTs by 16 clients. Alternating rounds, medians.
 *
 *   npx tsx benchmarks/transactions.ts [--rounds 3] [--sizes 1,10,1000] [--backends embedded,s3]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Endpoint, objectPath } from "./lib/http-client.js";
import { alternate, median } from "./lib/load.js";
import { type Row, table } from "./lib/report.js";
import { FENCEGATE_CREDS, type Server, startFencegate } from "./lib/servers.js";

export type TransactionBenchOptions = {
  rounds: number;
  sizes: number[];
  concurrency: number;
  /** embedded: the default (fs backend, one SQLite file); s3: the S3 backend, in front of a fencegate on fs as the store. */
  backends?: Array<"embedded" | "s3">;
};

const BODY = Buffer.alloc(4096, 7);
const json = { "content-type": "application/json" };

type Lease = { leaseId: string; fencingToken: string };

async function acquire(ep: Endpoint, prefix: string): Promise<Lease> {
  const res = await ep.ok({
    method: "POST",
    path: "/_fence/v1/leases",
    headers: json,
    body: Buffer.from(JSON.stringify({ bucket: "bench", prefix, ttlMs: 600_000, owner: "bench" })),
  });
  return JSON.parse(res.body.toString()) as Lease;
}

const release = (ep: Endpoint, lease: Lease) =>
  ep.ok({ method: "DELETE", path: `/_fence/v1/leases/${lease.leaseId}` });

/** Runs `work(i)` for i in 0..n-1 with `concurrency` at a time. */
async function pool(n: number, concurrency: number, work: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(n, concurrency) }, async () => {
      while (next < n) await work(next++);
    }),
  );
}

const put = (ep: Endpoint, key: string, headers: Record<string, string>) =>
  ep.ok({ method: "PUT", path: objectPath("bench", key), headers, body: BODY, unsigned: true });

/** One transaction of n objects: [ms of the whole job, ms of the commit alone]. */
async function transactionJob(
  ep: Endpoint,
  n: number,
  run: string,
  concurrency: number,
): Promise<[number, number]> {
  const lease = await acquire(ep, `${run}/`);
  const started = performance.now();
  const opened = await ep.ok({
    method: "POST",
    path: `/_fence/v1/leases/${lease.leaseId}/transactions`,
    headers: json,
    body: Buffer.from("{}"),
  });
  const { transactionId } = JSON.parse(opened.body.toString()) as { transactionId: string };
  const headers = { "x-fence-token": lease.fencingToken, "x-fence-transaction": transactionId };
  await pool(n, concurrency, (i) => put(ep, `${run}/obj-${i}`, headers));
  const commitStarted = performance.now();
  await ep.ok({ method: "POST", path: `/_fence/v1/transactions/${transactionId}/commit` });
  const done = performance.now();
  await release(ep, lease);
  return [done - started, done - commitStarted];
}

/** The same n objects as single fenced PUTs: [ms of the whole job, median ms of one PUT]. */
async function singleJob(
  ep: Endpoint,
  n: number,
  run: string,
  concurrency: number,
): Promise<[number, number]> {
  const lease = await acquire(ep, `${run}/`);
  const headers = { "x-fence-token": lease.fencingToken };
  const latencies: number[] = [];
  const started = performance.now();
  await pool(n, concurrency, async (i) => {
    const t = performance.now();
    await put(ep, `${run}/obj-${i}`, headers);
    latencies.push(performance.now() - t);
  });
  const done = performance.now();
  // One PUT alone, as the commit's yardstick: a durable step with nothing else in flight.
  const t = performance.now();
  await put(ep, `${run}/alone`, headers);
  const alone = performance.now() - t;
  await release(ep, lease);
  return [done - started, alone];
}

export async function transactionBench(opts: TransactionBenchOptions): Promise<Row[]> {
  const rows: Row[] = [];
  for (const backend of opts.backends ?? ["embedded"]) rows.push(...(await benchBackend(backend, opts)));
  return rows;
}

async function benchBackend(backend: "embedded" | "s3", opts: TransactionBenchOptions): Promise<Row[]> {
  const dir = mkdtempSync(join(tmpdir(), "fencegate-bench-tx-"));
  const servers: Server[] = [];
  const rows: Row[] = [];
  let ep: Endpoint | undefined;
  try {
    if (backend === "s3") {
      const store = await startFencegate(join(dir, "store"), { FENCEGATE_FENCING: "optional" }, "store");
      servers.push(store);
      servers.push(
        await startFencegate(
          join(dir, "gateway"),
          {
            FENCEGATE_BACKEND: "s3",
            FENCEGATE_S3_ENDPOINT: store.url,
            FENCEGATE_S3_ACCESS_KEY_ID: FENCEGATE_CREDS.accessKeyId,
            FENCEGATE_S3_SECRET_ACCESS_KEY: FENCEGATE_CREDS.secretAccessKey,
            FENCEGATE_S3_FORCE_PATH_STYLE: "true",
          },
          "gateway on s3",
        ),
      );
      await new Endpoint("store", store.url, FENCEGATE_CREDS, 1).ok({ method: "PUT", path: "/bench" });
    } else {
      servers.push(await startFencegate(join(dir, "fg")));
    }
    ep = new Endpoint("fencegate", servers.at(-1)!.url, FENCEGATE_CREDS, opts.concurrency);
    if (backend === "embedded") await ep.ok({ method: "PUT", path: "/bench" });
    const where = backend === "s3" ? "S3 backend" : "embedded";
    // Warm the gateway's hot paths before measuring.
    await transactionJob(ep, 50, "warm-tx", opts.concurrency);
    await singleJob(ep, 50, "warm-single", opts.concurrency);
    let run = 0;
    for (const n of opts.sizes) {
      const commitMs: number[] = [];
      const aloneMs: number[] = [];
      const results = await alternate(["transaction", "single"] as const, opts.rounds, async (target) => {
        const [jobMs, latency] =
          target === "transaction"
            ? await transactionJob(ep!, n, `tx-${n}-${run++}`, opts.concurrency)
            : await singleJob(ep!, n, `single-${n}-${run++}`, opts.concurrency);
        (target === "transaction" ? commitMs : aloneMs).push(latency);
        return n / (jobMs / 1000);
      });
      rows.push({
        name: `transaction of ${n} × 4 KiB (${where}): commit latency (median)`,
        value: median(commitMs),
        baselineName: "one fenced PUT alone",
        baseline: median(aloneMs),
        unit: "ms",
      });
      rows.push({
        name: `transaction of ${n} × 4 KiB (${where}): objects/s, staged by ${opts.concurrency} clients + commit`,
        value: results.transaction.median,
        baselineName: `single fenced PUTs, ${opts.concurrency} clients`,
        baseline: results.single.median,
        unit: "obj/s",
      });
    }
  } finally {
    ep?.close();
    for (const s of servers.reverse()) await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  return rows;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({
    options: {
      rounds: { type: "string", default: "3" },
      sizes: { type: "string", default: "1,10,1000" },
      backends: { type: "string", default: "embedded,s3" },
    },
  });
  const rows = await transactionBench({
    rounds: Number(values.rounds),
    sizes: values.sizes!.split(",").map(Number),
    concurrency: 16,
    backends: values.backends!.split(",") as Array<"embedded" | "s3">,
  });
  console.log(table(rows));
}
