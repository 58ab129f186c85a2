// How long a client command takes to start: the median wall time of N runs of each command
// below, next to `node -e 0` measured in the same run (interleaved, so a busy machine slows
// both alike). Runs bin/fencegate.js as users do; its fast path needs `npm run build` first
// (without a fresh dist/ it goes through tsx, and this says so).
//
//   node benchmarks/cli-start.mjs [--runs N] [--build]
//
// --build runs `npm run build` first. The target: a client command starts in under 300 ms.
import { execFileSync, spawn } from "node:child_process";
import { statSync } from "node:fs";
import { createServer } from "node:http";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const { values } = parseArgs({
  options: { runs: { type: "string", default: "15" }, build: { type: "boolean" } },
});
const runs = Number(values.runs);
if (values.build) execFileSync("npm", ["run", "build"], { cwd: root, stdio: "ignore" });

const bin = join(root, "bin", "fencegate.js");
// A stand-in gateway that answers every call at once with no lease: the full client path (SDK
// loaded, request signed, sent, answered, printed) without the gateway's own work.
const server = createServer((_req, res) => {
  res.setHeader("content-type", "application/json");
  res.end('{"leases":[]}');
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const env = { ...process.env, FENCEGATE_ENDPOINT: `http://127.0.0.1:${server.address().port}` };
const cases = [
  ["node -e 0 (baseline)", ["-e", "0"]],
  ["fencegate --version", [bin, "--version"]],
  ["fencegate lease list --help", [bin, "lease", "list", "--help"]],
  ["fencegate lease list --output json (one call)", [bin, "lease", "list", "--output", "json"]],
  [
    "fencegate lease acquire --output json (one call)",
    [bin, "lease", "acquire", "--bucket", "b", "--key", "k", "--output", "json"],
  ],
];

const times = cases.map(() => []);
for (let i = 0; i < runs + 1; i++) {
  for (const [c, [name, args]] of cases.entries()) {
    const t = performance.now();
    const code = await new Promise((resolve, reject) => {
      const child = spawn(process.execPath, args, { cwd: root, env, stdio: "ignore" });
      child.once("error", reject);
      child.once("exit", resolve);
    });
    const ms = performance.now() - t;
    if (code !== 0) throw new Error(`${name} exited ${code}`);
    if (i > 0) times[c].push(ms); // the first round warms the file cache
  }
}
server.close();

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
let fresh = false;
try {
  fresh = statSync(join(root, "dist", "cli", "main.js")).isFile();
} catch {}
const baseline = median(times[0]);
console.log(
  `node ${process.version}, ${runs} runs each, compiled dist/ ${fresh ? "present" : "absent (tsx)"}`,
);
console.log("| command | median ms | over node -e 0 | under 300 ms |");
console.log("|---|---|---|---|");
const TARGET_MS = 300;
cases.forEach(([name], c) => {
  const m = median(times[c]);
  const over = c === 0 ? "" : `+${(m - baseline).toFixed(0)}`;
  console.log(`| ${name} | ${m.toFixed(0)} | ${over} | ${c === 0 ? "" : m < TARGET_MS ? "yes" : "no"} |`);
});
const slowest = Math.max(...cases.slice(1).map((_, c) => median(times[c + 1])));
console.log(
  `target: every command above starts and answers in under ${TARGET_MS} ms (median): ` +
    `${slowest < TARGET_MS ? "met" : "NOT met"} (slowest ${slowest.toFixed(0)} ms` +
    `${baseline > 150 ? `; node -e 0 alone took ${baseline.toFixed(0)} ms, the machine is busy` : ""})`,
);
