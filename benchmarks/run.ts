/**
 * Every benchmark of the suite, one after the other, printed as one table: each figure next to
 * its baseline from the same run (medians of alternating rounds where the figure is a rate).
 * Sized to finish in under 10 minutes on a 2-core machine. `npm run bench`.
 *
 *   npx tsx benchmarks/run.ts [--quick] [--only leases,lease-concurrency,put-get,growth,memory,streaming,audit-redis,cli-start,round-trips,transactions] [--out file.md]
 *
 * The lease suite compares with etcd and Redis (appendfsync always): scripts/bench-setup.sh
 * installs Debian's etcd-server and redis-server when missing (the suite runs it itself).
 *
 * --quick shortens every benchmark (one round, smaller states) to check that the suite runs.
 */
import { writeFileSync } from "node:fs";
import { cpus, loadavg, totalmem } from "node:os";
import { parseArgs } from "node:util";
import { auditRedisBench } from "./audit-redis.js";
import { cliStartBench } from "./cli-row.js";
import { growthBench } from "./growth.js";
import { leaseConcurrencyBench } from "./lease-concurrency.js";
import { leaseBench } from "./leases.js";
import { type Row, table } from "./lib/report.js";
import { memoryBench } from "./memory.js";
import { putGetBench } from "./put-get.js";
import { roundTripBench } from "./round-trips.js";
import { streamingBench } from "./streaming.js";
import { transactionBench } from "./transactions.js";

const { values } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    only: { type: "string" },
    out: { type: "string" },
  },
});
const quick = values.quick;
const only = values.only ? new Set(values.only.split(",")) : null;

const suites: Array<[string, () => Promise<Row[]>]> = [
  [
    "leases",
    () =>
      leaseBench({
        seconds: quick ? 1 : 3,
        rounds: quick ? 1 : 3,
        concurrency: 16,
        warmSeconds: quick ? 1 : 3,
      }),
  ],
  [
    "lease-concurrency",
    () => leaseConcurrencyBench({ seconds: quick ? 0.5 : 2, rounds: quick ? 1 : 3, callers: [256, 1024] }),
  ],
  [
    "put-get",
    () =>
      putGetBench({ seconds: quick ? 1 : 2, rounds: quick ? 1 : 3, concurrency: 16, sizesKiB: [4, 1024] }),
  ],
  [
    "growth",
    () =>
      growthBench({
        seconds: quick ? 1 : 2,
        rounds: quick ? 1 : 3,
        concurrency: 16,
        leases: quick ? 10_000 : 100_000,
        records: quick ? 100_000 : 1_000_000,
        objects: quick ? 100_000 : 1_000_000,
        queries: quick ? 5 : 20,
      }),
  ],
  [
    "memory",
    () => memoryBench({ clients: 32, mib: quick ? 8 : 64, stalled: 8, stallMs: quick ? 1000 : 3000 }),
  ],
  ["streaming", () => streamingBench({ rounds: quick ? 1 : 3, sizesMiB: quick ? [64] : [256, 1024] })],
  ["audit-redis", () => auditRedisBench({ records: quick ? 100_000 : 1_000_000, queries: quick ? 20 : 100 })],
  ["cli-start", () => cliStartBench({ runs: quick ? 3 : 10 })],
  ["round-trips", () => roundTripBench({ quick })],
  [
    "transactions",
    () =>
      transactionBench({
        rounds: quick ? 1 : 3,
        sizes: quick ? [1, 10] : [1, 10, 1000],
        concurrency: 16,
        backends: quick ? ["embedded"] : ["embedded", "s3"],
      }),
  ],
];

const machine = `${cpus().length} × ${cpus()[0]?.model.trim() ?? "cpu"}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`;
const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(" ");
const started = performance.now();
const loadBefore = load();
const rows: Row[] = [];
const timings: string[] = [];
const failed: string[] = [];
for (const [name, run] of suites) {
  if (only && !only.has(name)) continue;
  const t0 = performance.now();
  process.stderr.write(`bench: ${name}…\n`);
  let got: Row[];
  try {
    got = await run();
  } catch (e) {
    // The other suites still run and their table is printed; the exit status says it failed.
    failed.push(`${name}: ${(e as Error).message.split("\n")[0]}`);
    process.stderr.write(`bench: ${name} failed: ${(e as Error).stack ?? e}\n`);
    continue;
  }
  rows.push(...got);
  const s = ((performance.now() - t0) / 1000).toFixed(0);
  timings.push(`${name} ${s} s`);
  process.stderr.write(`${table(got)}\n(${name}: ${s} s)\n`);
}
const total = ((performance.now() - started) / 1000).toFixed(0);
const report = [
  `fencegate benchmarks, ${new Date().toISOString().slice(0, 10)}, ${machine}`,
  `load average before: ${loadBefore}, after: ${load()}; ${timings.join(", ")}; total ${total} s`,
  ...(failed.length > 0 ? [`FAILED: ${failed.join("; ")}`] : []),
  "",
  table(rows),
].join("\n");
console.log(report);
if (values.out) writeFileSync(values.out, `${report}\n`);
if (failed.length > 0) process.exitCode = 1;
