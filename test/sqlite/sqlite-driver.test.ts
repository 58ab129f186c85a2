import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { SQLITE_DRIVER, sqliteDriverAdvice, sqliteDriverCandidates } from "../../src/sqlite/sqlite.js";
import { ROOT } from "../support/gateway.js";

/**
 * The embedded database driver on the Node that runs the tests: better-sqlite3 12 aborts the
 * process on Node 24.19 and later as soon as the garbage collector finalizes a statement; 13
 * cannot be loaded before Node 22.14.
 */
/** Whether a driver loads and opens a database on this Node, asked in a process of its own. */
function loads(name: string): boolean {
  const run = spawnSync(
    process.execPath,
    ["-e", `const D = require(${JSON.stringify(name)}); new D(":memory:").close(); console.log("loaded")`],
    { cwd: ROOT, encoding: "utf8", timeout: 30_000 },
  );
  return run.status === 0 && run.stdout.includes("loaded");
}

describe("the embedded database driver", () => {
  it("is 12 up to Node 22, 13 (Node-API 10) after it, 13 on Node 22.14+ only where 12 is missing", () => {
    expect(sqliteDriverCandidates(20, 9)).toEqual(["better-sqlite3"]);
    expect(sqliteDriverCandidates(22, 9)).toEqual(["better-sqlite3"]);
    expect(sqliteDriverCandidates(22, 10)).toEqual(["better-sqlite3", "better-sqlite3-napi"]);
    expect(sqliteDriverCandidates(24, 10)).toEqual(["better-sqlite3-napi"]);
    expect(sqliteDriverCandidates(26, 11)).toEqual(["better-sqlite3-napi"]);
    // The running Node gets its first choice whenever that one loads here. On Node 22, 12 may be
    // missing or built for another Node (node_modules installed by another Node, as CI's Node 22
    // run does); then, and only then, 13.
    const here = sqliteDriverCandidates(
      Number(process.versions.node.split(".")[0]),
      Number(process.versions.napi),
    );
    const loadable = here.filter(loads);
    expect(loadable.length, `none of ${here.join(", ")} loads on Node ${process.version}`).toBeGreaterThan(0);
    expect(SQLITE_DRIVER).toBe(loadable[0]);
  });

  it("suggests a newer Node only to a Node that cannot load 13", () => {
    expect(sqliteDriverAdvice(9)).toMatch(/C\+\+ toolchain.*or use Node 22\.14 or later$/);
    expect(sqliteDriverAdvice(10)).toMatch(/C\+\+ toolchain/);
    expect(sqliteDriverAdvice(10)).not.toMatch(/Node 22/);
  });

  it("survives the garbage collector finalizing statements while the process keeps working", () => {
    // Statements prepared and dropped on timers, as a gateway's queries are: the collector
    // finalizes them from its own tasks, which is where the wrong build aborts.
    const script = `
      const { Database } = await import(${JSON.stringify(pathToFileURL(join(ROOT, "src/sqlite/sqlite.ts")).href)});
      const db = new Database(":memory:");
      db.exec("CREATE TABLE t (a INTEGER)");
      let n = 0;
      const timer = setInterval(() => {
        for (let i = 0; i < 2000; i++) db.prepare("SELECT " + (n++ % 50) + " FROM t").all();
      }, 1);
      await new Promise((r) => setTimeout(r, 2500));
      clearInterval(timer);
      await new Promise((r) => setTimeout(r, 500));
      db.close();
      console.log("prepared " + n);
    `;
    const run = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
      cwd: ROOT,
      encoding: "utf8",
      timeout: 60_000,
    });
    expect(run.stderr).not.toMatch(/Assertion failed/);
    expect({ status: run.status, signal: run.signal }).toEqual({ status: 0, signal: null });
    // Enough statements that the collector has run many times.
    expect(Number(/prepared (\d+)/.exec(run.stdout)?.[1])).toBeGreaterThan(50_000);
  }, 60_000);
});
