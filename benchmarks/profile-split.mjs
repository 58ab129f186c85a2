// Where a gateway's time goes, by layer: HTTP parsing and writing, routing, SigV4, the lease API
// handler and JSON, the lease store and SQLite, audit, group commit, logging, metrics, GC, the
// JIT. Reads either a V8 CPU profile (`node --cpu-prof`: wall-clock samples of the main thread)
// or a `perf record -g` file of a gateway started with `--perf-basic-prof` (on-CPU samples of
// every thread, kernel included). Each sample is walked from its leaf towards the root; the
// first frame that belongs to a layer names it.
//
//   FENCEGATE_BENCH_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" npx tsx benchmarks/leases.ts
//   node benchmarks/profile-split.mjs /tmp/prof/CPU.*.cpuprofile
//
//   FENCEGATE_BENCH_NODE_ARGS=--perf-basic-prof npx tsx benchmarks/leases.ts &
//   perf record -F 499 -g -p <gateway pid> -o /tmp/gw.perf -- sleep 10
//   node benchmarks/profile-split.mjs /tmp/gw.perf
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";

/** Layer of a frame (function name and script URL, or a perf symbol line), or undefined. */
const LAYERS = [
  ["logging (pino)", /pino|sonic-boom|thread-stream|core\/log/],
  ["metrics (prom-client)", /prom-client|(?:src|dist)\/metrics\//],
  ["audit", /(?:src|dist)\/audit\//],
  ["group commit", /(?:src|dist)\/embedded\//],
  ["lease store", /(?:src|dist)\/leases\/embedded|overlap-queries/],
  ["lease service", /(?:src|dist)\/(?:leases|epochs)\//],
  ["SigV4", /(?:src|dist)\/http\/sigv4|request-auth|http\/authenticator/],
  ["lease API handler, JSON", /(?:src|dist)\/api\/|^JSON\.|^(?:parse|stringify) /],
  ["gateway routing, middleware", /(?:src|dist)\/(?:server|http)\//],
  ["Hono (router, context)", /node_modules\/hono\//],
  ["@hono/node-server adapter", /@hono\/node-server/],
  ["node:http parsing, writing", /node:_http|HTTPParser|llhttp|node:internal\/http/],
  [
    "sockets, streams, events",
    /node:net|node:internal\/streams|node:stream|node:events|stream_base|StreamBase|LibuvStreamWrap/,
  ],
  ["SQLite (native)", /better_sqlite3|sqlite3/],
  ["GC", /garbage collector|Scavenge|MarkCompact|Heap::|GCTracer|Sweeper|ConcurrentMarking/],
  ["JIT compiler", /compiler::|Compile|Maglev|Turbofan/],
  ["fsync, libuv thread pool", /uv__fs|uv__work|fsync/],
];
const layerOf = (frame) => LAYERS.find(([, re]) => re.test(frame))?.[0];

const file = process.argv[2];
if (!file) {
  console.error("usage: node benchmarks/profile-split.mjs <file.cpuprofile | perf.data>");
  process.exit(2);
}
const counts = new Map();
let total = 0;
const count = (layer, weight) => {
  counts.set(layer, (counts.get(layer) ?? 0) + weight);
  total += weight;
};

if (file.endsWith(".cpuprofile")) {
  const profile = JSON.parse(readFileSync(file, "utf8"));
  const nodes = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  for (let i = 0; i < profile.samples.length; i++) {
    let id = profile.samples[i];
    if (nodes.get(id).callFrame.functionName === "(idle)") continue;
    let layer;
    for (; id !== undefined && !layer; id = parent.get(id)) {
      const { functionName, url } = nodes.get(id).callFrame;
      layer = layerOf(`${functionName} ${url}`);
    }
    count(layer ?? "other", profile.timeDeltas[i] ?? 0);
  }
} else {
  const script = execFileSync("perf", ["script", "-i", file, "-F", "pid,tid,ip,sym,dso"], {
    maxBuffer: 1 << 30,
    stdio: ["ignore", "pipe", "ignore"],
  }).toString();
  for (const block of script.split("\n\n")) {
    const lines = block.split("\n").filter(Boolean);
    if (lines.length === 0) continue;
    const [pid, tid] = lines[0].trim().split(/\s+/)[0].split("/");
    const frames = lines.slice(1).map((l) => l.trim().replace(/^[0-9a-f]+\s+/, ""));
    const layer = frames.map(layerOf).find((l) => l !== undefined);
    count(`${tid === pid ? "" : "other threads: "}${layer ?? "other"}`, 1);
  }
}
console.log(`${file}: ${total} ${file.endsWith(".cpuprofile") ? "µs busy" : "samples"}`);
for (const [layer, weight] of [...counts].sort((a, b) => b[1] - a[1])) {
  console.log(`${((100 * weight) / total).toFixed(1).padStart(5)}%  ${layer}`);
}
