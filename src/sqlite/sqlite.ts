import { createRequire } from "node:module";
import type BetterSqlite3 from "better-sqlite3";

/**
 * better-sqlite3, in the build this Node can run. Both majors are installed:
 *
 * - 12 (`better-sqlite3`) is built against Node's own ABI. It is the faster of the two (on Node
 *   22 a lease grant and release cost about a third less CPU in SQLite than with 13), but on Node
 *   24.19 and later it aborts the process as soon as the garbage collector finalizes a statement
 *   (node::ObjectWrap's environment cleanup hook). An optional dependency: where it cannot be
 *   built (no compiler and no prebuilt binary), the gateway does without it.
 * - 13 (`better-sqlite3-napi`) is a Node-API module built for Node-API 10, which Node has from
 *   22.14 on; an older Node crashes loading it.
 *
 * So: 12 up to Node 22, 13 after it, and 13 on Node 22 where 12 was not installed. The API the
 * gateway uses is the same in both.
 */
export function sqliteDriverCandidates(nodeMajor: number, napiVersion: number): string[] {
  if (nodeMajor > 22) return ["better-sqlite3-napi"];
  return napiVersion >= 10 ? ["better-sqlite3", "better-sqlite3-napi"] : ["better-sqlite3"];
}

/** What to do when no driver loads: a Node without Node-API 10 can only run 12, which must be built. */
export function sqliteDriverAdvice(napiVersion: number): string {
  const rebuild = "Run npm ci again with a C++ toolchain (python3, make, g++) at hand";
  return napiVersion >= 10 ? rebuild : `${rebuild}, or use Node 22.14 or later`;
}

function load(): { name: string; driver: typeof BetterSqlite3 } {
  const require = createRequire(import.meta.url);
  const napiVersion = Number(process.versions.napi ?? 0);
  const candidates = sqliteDriverCandidates(Number(process.versions.node.split(".")[0]), napiVersion);
  const failures: string[] = [];
  for (const name of candidates) {
    try {
      const driver = require(name) as typeof BetterSqlite3;
      // better-sqlite3 12 loads its native part on first use: open a database to know it works.
      new driver(":memory:").close();
      return { name, driver };
    } catch (e) {
      failures.push(`${name}: ${(e as Error).message}`);
    }
  }
  throw new Error(
    `no embedded database driver could be loaded on Node ${process.version} (Node-API ` +
      `${process.versions.napi}): ${failures.join("; ")}. ${sqliteDriverAdvice(napiVersion)}`,
  );
}

const loaded = load();

/** The driver in use: "better-sqlite3" (12) or "better-sqlite3-napi" (13). */
export const SQLITE_DRIVER: string = loaded.name;

/** The better-sqlite3 Database class (see above for which build). */
export const Database: typeof BetterSqlite3 = loaded.driver;
export type Database = BetterSqlite3.Database;
