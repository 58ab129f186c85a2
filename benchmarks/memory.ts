/**
 * The gateway's memory under large concurrent transfers: RSS growth over its idle RSS while
 * 32 clients upload 64 MiB each, while 32 download them, and while 8 clients stall their GET of
 * a 64 MiB object (the gateway must not buffer what the client does not read). The direct server
 * runs the same loads in the same run, as the baseline. Target: growth < 150 MiB.
 *
 *   npx tsx benchmarks/memory.ts [--clients 32] [--mib 64]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { parseArgs } from "node:util";
import { Endpoint, objectPath } from "./lib/http-client.js";
import { type Row, table } from "./lib/report.js";
import { FENCEGATE_CREDS, rssOf, type Server, startDirect, startFencegate } from "./lib/servers.js";
import { sign, UNSIGNED_PAYLOAD } from "./lib/sigv4.js";

export type MemoryOptions = { clients: number; mib: number; stalled: number; stallMs: number };

const MiB = 1024 * 1024;

/**
 * Runs `work` while sampling the server's RSS; returns the peak growth, in MiB, over the RSS
 * just before (after a pause, so that the previous load's garbage is not counted).
 */
async function peakGrowth(pid: number, work: () => Promise<unknown>): Promise<number> {
  await new Promise((r) => setTimeout(r, 500));
  const idle = rssOf(pid);
  let peak = idle;
  const sample = () => {
    peak = Math.max(peak, rssOf(pid));
  };
  const timer = setInterval(sample, 20);
  try {
    await work();
  } finally {
    clearInterval(timer);
  }
  sample();
  return (peak - idle) / MiB;
}

/** `mib` MiB of a repeated 1 MiB chunk, streamed (the client holds one chunk). */
function bodyStream(mib: number): Readable {
  const chunk = Buffer.alloc(MiB, 0x61);
  return Readable.from(
    (function* chunks() {
      for (let i = 0; i < mib; i++) yield chunk;
    })(),
    { objectMode: false },
  );
}

/** A GET whose response the client never reads, held for `ms`, then dropped. */
function stalledGet(url: string, path: string, ms: number): Promise<void> {
  const u = new URL(url);
  const signed = sign(
    { method: "GET", host: `${u.hostname}:${u.port}`, path, payloadHash: UNSIGNED_PAYLOAD },
    FENCEGATE_CREDS,
  );
  return new Promise((resolve, reject) => {
    const req = request(
      { host: u.hostname, port: u.port, path: signed.target, headers: signed.headers, agent: false },
      (res) => {
        res.pause();
        setTimeout(() => {
          res.destroy();
          req.destroy();
          resolve();
        }, ms);
      },
    );
    req.on("error", reject);
    req.end();
  });
}

async function measure(server: Server, opts: MemoryOptions, headers: Record<string, string>) {
  const ep = new Endpoint(server.name, server.url, FENCEGATE_CREDS, opts.clients);
  try {
    const keys = Array.from({ length: opts.clients }, (_, i) => `big/${i}`);
    // Warm up (code paths, buffers) before anything is measured.
    await ep.ok({
      method: "PUT",
      path: objectPath("bench", "warm"),
      headers,
      body: Buffer.alloc(MiB),
      unsigned: true,
    });
    await ep.ok({ method: "GET", path: objectPath("bench", "warm"), discard: true });
    const upload = await peakGrowth(server.pid, () =>
      Promise.all(
        keys.map((key) =>
          ep.ok({
            method: "PUT",
            path: objectPath("bench", key),
            headers: { ...headers, "content-length": String(opts.mib * MiB) },
            body: bodyStream(opts.mib),
          }),
        ),
      ),
    );
    const download = await peakGrowth(server.pid, () =>
      Promise.all(keys.map((key) => ep.ok({ method: "GET", path: objectPath("bench", key), discard: true }))),
    );
    const stalled = await peakGrowth(server.pid, () =>
      Promise.all(
        keys
          .slice(0, opts.stalled)
          .map((key) => stalledGet(server.url, objectPath("bench", key), opts.stallMs)),
      ),
    );
    return { upload, download, stalled };
  } finally {
    ep.close();
  }
}

export async function memoryBench(opts: MemoryOptions): Promise<Row[]> {
  const dir = mkdtempSync(join(tmpdir(), "fencegate-bench-memory-"));
  const servers: Server[] = [];
  try {
    const fg = await startFencegate(join(dir, "fg"));
    servers.push(fg);
    const gw = new Endpoint("fencegate", fg.url, FENCEGATE_CREDS);
    await gw.ok({ method: "PUT", path: "/bench" });
    const lease = await gw.ok({
      method: "POST",
      path: "/_fence/v1/leases",
      headers: { "content-type": "application/json" },
      body: Buffer.from(JSON.stringify({ bucket: "bench", prefix: "", ttlMs: 3_600_000 })),
    });
    gw.close();
    const token = (JSON.parse(lease.body.toString()) as { fencingToken: string }).fencingToken;
    const fgGrowth = await measure(fg, opts, { "x-fence-token": token });
    await fg.stop();
    rmSync(join(dir, "fg"), { recursive: true, force: true });

    const direct = await startDirect(join(dir, "direct"));
    servers.push(direct);
    const directGrowth = await measure(direct, opts, {});

    const row = (name: string, value: number, baseline: number): Row => ({
      name,
      value,
      unit: "MiB",
      baselineName: "direct server",
      baseline,
      target: { kind: "value<=", bound: 150 },
    });
    const n = `${opts.clients} × ${opts.mib} MiB`;
    return [
      row(`RSS growth, ${n} concurrent uploads`, fgGrowth.upload, directGrowth.upload),
      row(`RSS growth, ${n} concurrent downloads`, fgGrowth.download, directGrowth.download),
      row(
        `RSS growth, ${opts.stalled} GETs of ${opts.mib} MiB not read`,
        fgGrowth.stalled,
        directGrowth.stalled,
      ),
    ];
  } finally {
    await Promise.all(servers.map((s) => s.stop()));
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.filename === process.argv[1]) {
  const { values } = parseArgs({
    options: {
      clients: { type: "string", default: "32" },
      mib: { type: "string", default: "64" },
      stalled: { type: "string", default: "8" },
      "stall-ms": { type: "string", default: "3000" },
    },
  });
  const rows = await memoryBench({
    clients: Number(values.clients),
    mib: Number(values.mib),
    stalled: Number(values.stalled),
    stallMs: Number(values["stall-ms"]),
  });
  console.log(table(rows));
}
