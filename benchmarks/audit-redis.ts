/**
 * Filtered audit queries over 1,000,000 records in the Redis audit log: p95 latency of one page
 * (limit 100) for every filter of the contract, next to a raw XRANGE of the same page size on
 * the same Redis in the same run (the floor any Redis-backed page pays). Target: p95 < 100 ms.
 *
 *   npx tsx benchmarks/audit-redis.ts [--records 1000000] [--queries 200]
 *
 * Starts its own redis-server on a free port (never 6379), without persistence.
 */
import { parseArgs } from "node:util";
import { encodeCursor } from "../src/audit/audit-cursor.js";
import type { AuditDraft, AuditQuery } from "../src/audit/audit-log.js";
import { APPEND } from "../src/audit/redis/audit-scripts.js";
import { draftFields } from "../src/audit/redis/record-codec.js";
import { connectRedis, createRedisAuditLog } from "../src/audit/redis/redis-audit-log.js";
import { startRedis } from "../test/support/redis.js";
import { type Row, table } from "./lib/report.js";

export type AuditBenchOptions = { records: number; queries: number; budget?: number };

const PREFIX = "{bench}";
const T0 = Date.UTC(2026, 10, 1);
const OPS = ["PutObject", "PutObject", "PutObject", "DeleteObject", "CopyObject", "CompleteMultipartUpload"];

/** Record i of the synthetic log: 10 buckets, 100,000 keys in 1,000 folders, 50,000 leases. */
function recordDraft(i: number): { draft: AuditDraft; timeMs: number; gateway: string } {
  const lease = i % 10 < 2;
  const bucket = `b${i % 10}`;
  const folder = (i * 7919) % 1000;
  const key = `data/${folder}/${Math.floor(i / 1000) % 100}`;
  const leaseId = `L${(i * 31) % 50_000}`;
  const draft: AuditDraft = {
    op: lease ? (i % 2 ? "LeaseAcquired" : "LeaseReleased") : OPS[i % OPS.length]!,
    bucket,
    key: lease && i % 3 === 0 ? null : key,
    prefix: lease && i % 3 === 0 ? `data/${folder}/` : null,
    token: i + 1,
    leaseId,
    owner: lease ? `worker-${i % 64}` : null,
    principal: `AKID${i % 5}`,
    decision: i % 20 === 7 ? "rejected" : "accepted",
    reason: i % 20 === 7 ? "StaleFencingToken" : null,
    highestToken: i,
    requestId: `req-${i}`,
  };
  // Three replicas whose clocks differ by a few milliseconds.
  return { draft, timeMs: T0 + i + (i % 3) * 4, gateway: `gw-${i % 3}` };
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))]!;
}

export async function auditRedisBench(opts: AuditBenchOptions): Promise<Row[]> {
  const server = await startRedis();
  const redis = await connectRedis(server.url, 60_000);
  try {
    // Fill the log through the append script itself, pipelined.
    const started = Date.now();
    const sha = await APPEND.load(redis);
    // A new log starts its counter at 0 (the append script refuses while the counter is missing,
    // which is how it notices that Redis lost its data).
    await redis.set(`${PREFIX}:a:seq`, "0", "NX");
    for (let i = 0; i < opts.records; i += 2_000) {
      const pipeline = redis.pipeline();
      for (let j = i; j < Math.min(opts.records, i + 2_000); j++) {
        const { draft, timeMs, gateway } = recordDraft(j);
        pipeline.evalsha(sha, 1, PREFIX, ...draftFields(draft, timeMs, gateway));
      }
      const results = await pipeline.exec();
      const failed = results?.find(([e]) => e);
      if (failed) throw failed[0];
    }
    const memory = /used_memory:(\d+)/.exec((await redis.info("memory")) as string)![1]!;
    console.log(
      `filled ${opts.records} records in ${((Date.now() - started) / 1000).toFixed(1)} s; Redis uses ${(Number(memory) / 2 ** 20).toFixed(0)} MiB`,
    );

    const log = await createRedisAuditLog({
      redis,
      keyPrefix: PREFIX,
      gatewayId: "bench",
      ...(opts.budget ? { queryBudget: opts.budget } : {}),
    });
    const random = (n: number) => Math.floor(Math.random() * n);
    const at = (ms: number) => new Date(T0 + ms).toISOString();
    const n = opts.records;
    const filters: Array<[string, () => Omit<AuditQuery, "limit">]> = [
      ["no filter, first page", () => ({})],
      ["no filter, from a cursor", () => ({ cursor: encodeCursor(random(n)) })],
      ["bucket", () => ({ bucket: `b${random(10)}` })],
      ["key", () => ({ key: `data/${random(1000)}/${random(100)}` })],
      ["prefix (one folder)", () => ({ prefix: `data/${random(1000)}/` })],
      ["prefix (a tenth of the log)", () => ({ prefix: `data/${1 + random(9)}` })],
      ["leaseId", () => ({ leaseId: `L${random(50_000)}` })],
      ["decision=rejected", () => ({ decision: "rejected" })],
      ["op", () => ({ op: OPS[random(OPS.length)]! })],
      ["since (last tenth)", () => ({ since: at(n - random(n / 10)) })],
      ["since+until (one minute)", () => ({ since: at(random(n)), until: at(random(n) + 60_000) })],
      ["bucket+op+decision", () => ({ bucket: `b${random(10)}`, op: "PutObject", decision: "rejected" })],
      ["prefix+decision", () => ({ prefix: `data/${random(1000)}/`, decision: "rejected" })],
      ["leaseId+op", () => ({ leaseId: `L${random(50_000)}`, op: "LeaseAcquired" })],
      [
        "bucket+since+until",
        () => {
          const from = random(n);
          return { bucket: `b${random(10)}`, since: at(from), until: at(from + 120_000) };
        },
      ],
    ];

    // The baseline, taken alternately with the queries so that both see the same machine: a
    // raw page of 101 entries of the log's stream at a random place, what any page costs.
    const rawPage = async () => {
      const t = performance.now();
      await redis.xrange(`${PREFIX}:a`, `(0-${random(n)}`, "+", "COUNT", 101);
      return performance.now() - t;
    };
    // Warm-up: the scripts' first run compiles them.
    for (let q = 0; q < 10; q++) await log.query({ limit: 100, cursor: encodeCursor(random(n)) });

    const rows: Row[] = [];
    for (const [name, make] of filters) {
      const times: number[] = [];
      const raw: number[] = [];
      let returned = 0;
      for (let q = 0; q < opts.queries; q++) {
        raw.push(await rawPage());
        const query = { ...make(), limit: 100 };
        const t = performance.now();
        const page = await log.query(query);
        times.push(performance.now() - t);
        returned += page.records.length;
      }
      times.sort((a, b) => a - b);
      raw.sort((a, b) => a - b);
      console.log(
        `${name.padEnd(30)} p50 ${percentile(times, 50).toFixed(2)} ms  p95 ${percentile(times, 95).toFixed(2)} ms  max ${times.at(-1)!.toFixed(2)} ms  records/page ${(returned / opts.queries).toFixed(1)}  raw page p50 ${percentile(raw, 50).toFixed(2)} p95 ${percentile(raw, 95).toFixed(2)} ms`,
      );
      rows.push({
        name: `audit query p95: ${name}`,
        value: percentile(times, 95),
        unit: "ms",
        baselineName: "raw XRANGE page p95",
        baseline: percentile(raw, 95),
        target: { kind: "value<=", bound: 100 },
      });
    }
    await log.close();
    return rows;
  } finally {
    redis.disconnect();
    await server.stop();
  }
}

if (import.meta.filename === process.argv[1]) {
  const { values } = parseArgs({
    options: {
      records: { type: "string", default: "1000000" },
      queries: { type: "string", default: "200" },
      budget: { type: "string" },
    },
  });
  const rows = await auditRedisBench({
    records: Number(values.records),
    queries: Number(values.queries),
    ...(values.budget ? { budget: Number(values.budget) } : {}),
  });
  console.log(table(rows));
}
