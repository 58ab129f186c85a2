import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const fixture = fileURLToPath(new URL("./fixtures/log-burst.ts", import.meta.url));

/** Runs the fixture and returns the `i` of every line it printed. */
function run(n: number, how: string): Promise<number[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--import", "tsx", fixture, String(n), how], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (d: string) => {
      out += d;
    });
    child.on("error", reject);
    child.on("close", (code) => {
      if (code !== 0) return reject(new Error(`fixture exited with ${code}`));
      resolve(
        out
          .split("\n")
          .filter(Boolean)
          .map((line) => (JSON.parse(line) as { i: number }).i),
      );
    });
  });
}

describe("the logger's asynchronous stdout", () => {
  for (const how of ["return", "exit", "flush"]) {
    it(`loses no line when the process ends normally (${how})`, { timeout: 30_000 }, async () => {
      const n = 20_000;
      const seen = await run(n, how);
      expect(seen).toHaveLength(n);
      expect(seen.every((i, k) => i === k)).toBe(true);
    });
  }
});
