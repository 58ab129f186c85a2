import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Database } from "./sqlite.js";

export type EmbeddedDb = Database;

type OpenEmbeddedDbOptions = {
  dataDir: string;
  /** File name inside the data directory. */
  file?: string;
  /** Called with every statement SQLite runs (tests count reads with it). */
  trace?: (sql: string) => void;
};

/**
 * Opens the embedded state database (object metadata, leases, token counter, audit log)
 * and takes the data directory for this process.
 *
 * synchronous=FULL: a commit returns only after the WAL is fsync'ed, so an acknowledged
 * write, a granted token and an audit record survive kill -9 and power loss alike. The domain
 * of the stores (domain.ts) switches to synchronous=NORMAL and fsyncs the WAL itself, off the
 * event loop, before it answers anyone: the same promise, one fsync for many commits.
 * locking_mode=EXCLUSIVE: the file lock is held until the process exits (the kernel drops it
 * on kill -9), so a second gateway on the same directory cannot open it.
 */
export function openEmbeddedDb({ dataDir, file = "fencegate.db", trace }: OpenEmbeddedDbOptions): EmbeddedDb {
  mkdirSync(dataDir, { recursive: true });
  const path = join(dataDir, file);
  const db = new Database(path, {
    timeout: 0,
    ...(trace ? { verbose: (sql: unknown) => trace(String(sql)) } : {}),
  });
  try {
    db.pragma("locking_mode = EXCLUSIVE");
    db.pragma("journal_mode = WAL");
    db.pragma("synchronous = FULL");
    // Taking a write lock now makes a second process fail here, not on its first request.
    db.exec("BEGIN EXCLUSIVE; COMMIT;");
  } catch (e) {
    db.close();
    if (isBusy(e)) {
      const holder = readPidFile(dataDir);
      throw new Error(
        `data directory ${dataDir} is in use by another fencegate process${holder ? ` (pid ${holder})` : ""}; ` +
          "run one gateway per data directory, or give this one its own FENCEGATE_DATA_DIR",
      );
    }
    throw e;
  }
  writeFileSync(join(dataDir, "fencegate.pid"), `${process.pid}\n`);
  return db;
}

function isBusy(e: unknown): boolean {
  const code = (e as { code?: string }).code;
  return code === "SQLITE_BUSY" || code === "SQLITE_LOCKED";
}

function readPidFile(dataDir: string): string | null {
  try {
    return readFileSync(join(dataDir, "fencegate.pid"), "utf8").trim() || null;
  } catch {
    return null;
  }
}

// The domain (group commit) lives in its own file; importers of the database get it from here.
export { closeEmbeddedDb, EmbeddedDomain, embeddedDomain } from "./domain.js";
