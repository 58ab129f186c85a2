/**
 * One large object streamed through fencegate (fenced PUT, then GET) against the direct
 * fsync+rename server, one client, alternating rounds, medians: 256 MiB and 1 GiB.
 * Target: >= 0.85x the direct server's MB/s.
 *
 *   npx tsx benchmarks/streaming.ts [--rounds 3] [--sizes 256,1024]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { parseArgs } from "node:util";
import { Endpoint, objectPath } from "./lib/http-client.js";
import { alternate } from "./lib/load.js";
import { type Row, table } from "./lib/report.js";
import { FENCEGATE_CREDS, type Server, startDirect, startFencegate } from "./lib/servers.js";

export type StreamingOptions = { rounds: number; sizesMiB: number[] };

const MiB = 1024 * 1024;

function bodyStream(mib: number): Readable {
  const chunk = Buffer.alloc(MiB, 0x62);
  return Readable.from(
    (function* chunks() {
      for (let i = 0; i < mib; i++) yield chunk;
    })(),
    { objectMode: false },
  );
}

export async function streamingBench(opts: StreamingOptions): Promise<Row[]> {
  const dir = mkdtempSync(join(tmpdir(), "fencegate-bench-stream-"));
  const servers: Server[] = [];
  const endpoints: Endpoint[] = [];
  try {
    const [fg, direct] = await Promise.all([
      startFencegate(join(dir, "fg")),
      startDirect(join(dir, "direct")),
    ]);
    servers.push(fg, direct);
    const targets = {
      fencegate: {
        ep: new Endpoint("fencegate", fg.url, FENCEGATE_CREDS, 1),
        headers: {} as Record<string, string>,
      },
      direct: {
        ep: new Endpoint("direct", direct.url, FENCEGATE_CREDS, 1),
        headers: {} as Record<string, string>,
      },
    };
    endpoints.push(targets.fencegate.ep, targets.direct.ep);
    for (const t of Object.values(targets)) await t.ep.ok({ method: "PUT", path: "/bench" });
    const lease = await targets.fencegate.ep.ok({
      method: "POST",
      path: "/_fence/v1/leases",
      headers: { "content-type": "application/json" },
      body: Buffer.from(JSON.stringify({ bucket: "bench", prefix: "", ttlMs: 3_600_000 })),
    });
    targets.fencegate.headers["x-fence-token"] = (
      JSON.parse(lease.body.toString()) as { fencingToken: string }
    ).fencingToken;

    const rows: Row[] = [];
    for (const mib of opts.sizesMiB) {
      const label = mib >= 1024 ? `${mib / 1024} GiB` : `${mib} MiB`;
      const key = `stream/${mib}`;
      for (const op of ["PUT", "GET"] as const) {
        const r = await alternate(["fencegate", "direct"] as const, opts.rounds, async (name) => {
          const t = targets[name];
          const started = performance.now();
          if (op === "PUT") {
            await t.ep.ok({
              method: "PUT",
              path: objectPath("bench", key),
              headers: { ...t.headers, "content-length": String(mib * MiB) },
              body: bodyStream(mib),
            });
          } else {
            const res = await t.ep.ok({ method: "GET", path: objectPath("bench", key), discard: true });
            if (res.bytes !== mib * MiB) throw new Error(`${name} GET ${key}: ${res.bytes} bytes`);
          }
          return (mib * MiB) / 1e6 / ((performance.now() - started) / 1000);
        });
        rows.push({
          name: `${op} ${label}${op === "PUT" ? " fenced" : ""}, streamed`,
          value: r.fencegate.median,
          unit: "MB/s",
          baselineName: "direct fsync+rename",
          baseline: r.direct.median,
          target: { kind: "ratio>=", bound: 0.85 },
        });
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
    options: { rounds: { type: "string", default: "3" }, sizes: { type: "string", default: "256,1024" } },
  });
  const rows = await streamingBench({
    rounds: Number(values.rounds),
    sizesMiB: values.sizes.split(",").map(Number),
  });
  console.log(table(rows));
}
