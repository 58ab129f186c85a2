/**
 * Fenced PUT and GET of 4 KiB and 1 MiB objects through fencegate (embedded default: fs backend,
 * leases and audit log in its SQLite file) against the direct fsync+rename server
 * (benchmarks/direct-server.ts) and s3rver, 16 signing clients, alternating rounds, medians.
 * Bodies are sent with UNSIGNED-PAYLOAD to every target, so that none pays for a payload hash.
 *
 *   npx tsx benchmarks/put-get.ts [--seconds 3] [--rounds 3] [--sizes 4,1024 (KiB)]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Endpoint, objectPath } from "./lib/http-client.js";
import { alternate, closedLoop } from "./lib/load.js";
import { type Row, table } from "./lib/report.js";
import {
  cpuMsOf,
  FENCEGATE_CREDS,
  S3RVER_CREDS,
  type Server,
  startDirect,
  startFencegate,
  startS3rver,
} from "./lib/servers.js";

export type PutGetOptions = {
  seconds: number;
  rounds: number;
  concurrency: number;
  /** Object sizes, in KiB. */
  sizesKiB?: number[];
};

type Target = {
  name: "fencegate" | "direct" | "s3rver";
  ep: Endpoint;
  headers: Record<string, string>;
  pid: number;
};

const KiB = 1024;

async function leaseToken(gw: Endpoint): Promise<string> {
  const res = await gw.ok({
    method: "POST",
    path: "/_fence/v1/leases",
    headers: { "content-type": "application/json" },
    body: Buffer.from(JSON.stringify({ bucket: "bench", prefix: "", ttlMs: 3_600_000, owner: "bench" })),
  });
  return (JSON.parse(res.body.toString()) as { fencingToken: string }).fencingToken;
}

const put = (t: Target, key: string, body: Buffer) =>
  t.ep.ok({ method: "PUT", path: objectPath("bench", key), headers: t.headers, body, unsigned: true });

const get = (t: Target, key: string) =>
  t.ep.ok({ method: "GET", path: objectPath("bench", key), discard: true });

export async function putGetBench(opts: PutGetOptions): Promise<Row[]> {
  const dir = mkdtempSync(join(tmpdir(), "fencegate-bench-putget-"));
  const servers: Server[] = [];
  const endpoints: Endpoint[] = [];
  try {
    const [fg, direct, s3rver] = await Promise.all([
      startFencegate(join(dir, "fg")),
      startDirect(join(dir, "direct")),
      startS3rver(join(dir, "s3rver")),
    ]);
    servers.push(fg, direct, s3rver);
    const targets: Target[] = [
      {
        name: "fencegate",
        ep: new Endpoint("fencegate", fg.url, FENCEGATE_CREDS, opts.concurrency),
        headers: {},
        pid: fg.pid,
      },
      {
        name: "direct",
        ep: new Endpoint("direct", direct.url, FENCEGATE_CREDS, opts.concurrency),
        headers: {},
        pid: direct.pid,
      },
      {
        name: "s3rver",
        ep: new Endpoint("s3rver", s3rver.url, S3RVER_CREDS, opts.concurrency),
        headers: {},
        pid: s3rver.pid,
      },
    ];
    endpoints.push(...targets.map((t) => t.ep));
    for (const t of targets) await t.ep.ok({ method: "PUT", path: "/bench" });
    targets[0]!.headers = { "x-fence-token": await leaseToken(targets[0]!.ep) };
    const byName = Object.fromEntries(targets.map((t) => [t.name, t])) as Record<Target["name"], Target>;

    const rows: Row[] = [];
    for (const kib of opts.sizesKiB ?? [4, 1024]) {
      const size = kib * KiB;
      const label = kib >= 1024 ? `${kib / 1024} MiB` : `${kib} KiB`;
      const body = Buffer.alloc(size, 7);
      const keyOf = (client: number) => `${label.replace(" ", "")}/c${client}`;
      // Warm-up, and the objects the GETs read.
      for (const t of targets) {
        await closedLoop(opts.concurrency, 0.5, (c) => put(t, keyOf(c), body));
        await Promise.all(Array.from({ length: opts.concurrency }, (_, c) => put(t, keyOf(c), body)));
      }
      for (const op of ["PUT", "GET"] as const) {
        // Each server's CPU time per operation over all rounds: what the operation costs it.
        const cpu = { fencegate: { ms: 0, ops: 0 }, direct: { ms: 0, ops: 0 }, s3rver: { ms: 0, ops: 0 } };
        const results = await alternate(
          ["fencegate", "direct", "s3rver"] as const,
          opts.rounds,
          async (name) => {
            const t = byName[name];
            const before = cpuMsOf(t.pid);
            const rate = await closedLoop(opts.concurrency, opts.seconds, (c) =>
              op === "PUT" ? put(t, keyOf(c), body) : get(t, keyOf(c)),
            );
            cpu[name].ms += cpuMsOf(t.pid) - before;
            cpu[name].ops += rate.ops;
            return rate.perSecond;
          },
        );
        const perOp = (name: Target["name"]) => cpu[name].ms / cpu[name].ops;
        const fgRate = results.fencegate.median;
        const vsS3rver: Row = {
          name: `${op} ${label}${op === "PUT" ? " fenced" : ""}`,
          value: fgRate,
          unit: "ops/s",
          baselineName: "s3rver",
          baseline: results.s3rver.median,
        };
        const vsDirect: Row = {
          ...vsS3rver,
          baselineName: "direct fsync+rename",
          baseline: results.direct.median,
        };
        if (label === "4 KiB" && op === "PUT") {
          vsS3rver.target = { kind: "ratio>=", bound: 2 };
          vsDirect.target = { kind: "ratio>=", bound: 1.0 };
        }
        if (label === "4 KiB" && op === "GET") vsS3rver.target = { kind: "ratio>=", bound: 3 };
        rows.push(vsS3rver, vsDirect);
        if (label === "4 KiB") {
          const cpuRow: Row = {
            name: `server CPU time per ${op} ${label}`,
            value: perOp("fencegate"),
            unit: "ms",
            baselineName: "s3rver",
            baseline: perOp("s3rver"),
          };
          rows.push(cpuRow, { ...cpuRow, baselineName: "direct fsync+rename", baseline: perOp("direct") });
        }
      }
    }
    return rows;
  } finally {
    for (const ep of endpoints) ep.close();
    await Promise.all(servers.map((s) => s.stop()));
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.filename === process.argv[1]) {
  const { values } = parseArgs({
    options: {
      seconds: { type: "string", default: "3" },
      rounds: { type: "string", default: "3" },
      concurrency: { type: "string", default: "16" },
      sizes: { type: "string", default: "4,1024" },
    },
  });
  const rows = await putGetBench({
    sizesKiB: values.sizes.split(",").map(Number),
    seconds: Number(values.seconds),
    rounds: Number(values.rounds),
    concurrency: Number(values.concurrency),
  });
  console.log(table(rows));
}
