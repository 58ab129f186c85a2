/**
 * The client command's start time as a row of the benchmark table: runs benchmarks/cli-start.mjs
 * (which times `bin/fencegate.js` commands against a stand-in gateway, next to `node -e 0`) in a
 * child process, after `npm run build` (users run the compiled package), and takes from its
 * table the command that makes one lease API call: `lease acquire` when it measures that,
 * otherwise `lease list --output json`. Target: it starts and answers in under 300 ms.
 */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import type { Row } from "./lib/report.js";
import { ROOT } from "./lib/servers.js";

export async function cliStartBench(opts: { runs: number }): Promise<Row[]> {
  const { stdout } = await promisify(execFile)(
    process.execPath,
    [join(ROOT, "benchmarks/cli-start.mjs"), "--build", "--runs", String(opts.runs)],
    { cwd: ROOT, maxBuffer: 1 << 20 },
  );
  // | name | median ms | ...
  const rows = [...stdout.matchAll(/^\|\s*([^|]+?)\s*\|\s*(\d+(?:\.\d+)?)\s*\|/gm)].map(
    (m) => [m[1]!, Number(m[2])] as const,
  );
  const baseline = rows.find(([name]) => name.startsWith("node -e 0"));
  const command =
    rows.find(([name]) => name.includes("lease acquire")) ??
    rows.find(([name]) => name.includes("lease list --output json"));
  if (!baseline || !command) throw new Error(`cli-start.mjs printed no figures:\n${stdout}`);
  return [
    {
      name: `client command start: ${command[0]}`,
      value: command[1],
      unit: "ms",
      baselineName: "node -e 0",
      baseline: baseline[1],
      target: { kind: "value<=", bound: 300 },
    },
  ];
}
