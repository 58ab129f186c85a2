import { createRequire } from "node:module";
import type BetterSqlite3 from "better-sqlite3";

/**
 * better-sqlite3, in the build this Node can run. Both majors are installed:
 *
 * - 13 and later are Node-API modules built for Node-API 10, which Node has from 22.14 on; an
 *   older Node crashes loading them. Installed as `better-sqlite3-napi`.
 * - 12 is built against Node's own ABI; on Node 24.19 and later it aborts the process when a
 *   statement is garbage-collected (node::ObjectWrap's environment cleanup hook). It serves Node
 *   20 and Node 22 before 22.14. An optional dependency: where it cannot be built (Node 24
 *   without a compiler), it is not needed.
 *
 * The API the gateway uses is the same in both.
 */
export const SQLITE_DRIVER: string =
  Number(process.versions.napi ?? 0) >= 10 ? "better-sqlite3-napi" : "better-sqlite3";

function load(): typeof BetterSqlite3 {
  try {
    return createRequire(import.meta.url)(SQLITE_DRIVER) as typeof BetterSqlite3;
  } catch (e) {
    throw new Error(
      `the embedded database driver ${SQLITE_DRIVER} could not be loaded on Node ${process.version} ` +
        `(Node-API ${process.versions.napi}): ${(e as Error).message}; run npm ci again with a C++ ` +
        "toolchain (python3, make, g++) at hand, or use Node 22.14 or later",
      { cause: e },
    );
  }
}

/** The better-sqlite3 Database class (see above for which build). */
export const Database: typeof BetterSqlite3 = load();
export type Database = BetterSqlite3.Database;
