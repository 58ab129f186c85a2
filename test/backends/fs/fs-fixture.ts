import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createFsBackend, type FsBackend, type FsBackendOptions } from "../../../src/backends/fs/index.js";
import type { fakeClock } from "../../../src/core/clock.js";
import { type EmbeddedDb, openEmbeddedDb } from "../../../src/sqlite/db.js";
import type { MultipartFixture } from "../multipart.contract.js";

export type FsFixtureOptions = Omit<FsBackendOptions, "dataDir" | "db" | "clock"> & {
  clock?: ReturnType<typeof fakeClock>;
};

export type FsFixture = MultipartFixture & {
  dataDir: string;
  db: () => EmbeddedDb;
  current: () => FsBackend;
  reopen: () => Promise<FsBackend>;
  leftovers: () => Promise<string[]>;
  storedParts: () => Promise<number>;
};

/** An fs backend on a fresh data directory and database, reopenable on the same state. */
export async function fsFixture(options: FsFixtureOptions = {}): Promise<FsFixture> {
  const dataDir = await mkdtemp(join(tmpdir(), "fencegate-fs-"));
  const open = (db: EmbeddedDb) => createFsBackend({ ...options, dataDir, db });
  let db = openEmbeddedDb({ dataDir });
  let backend = await open(db);
  const blobsDir = join(dataDir, "blobs");
  return {
    dataDir,
    get backend() {
      return backend;
    },
    ...(options.clock ? { clock: options.clock } : {}),
    db: () => db,
    current: () => backend,
    async reopen() {
      await backend.close();
      db.close();
      db = openEmbeddedDb({ dataDir });
      backend = await open(db);
      return backend;
    },
    /** Temp files, and blobs that neither an object nor a live upload's part references. */
    async leftovers() {
      const found = (await readdir(join(blobsDir, "tmp"))).map((name) => `tmp/${name}`);
      const object = db.prepare("SELECT 1 FROM fs_objects WHERE blob = ?");
      const part = db.prepare("SELECT 1 FROM fs_parts WHERE blob = ?");
      for (const shard of await readdir(blobsDir)) {
        if (shard === "tmp") continue;
        for (const name of await readdir(join(blobsDir, shard))) {
          if (!object.get(name) && !part.get(name)) found.push(`${shard}/${name}`);
        }
      }
      return found;
    },
    sweepAbandoned: () => backend.multipart.sweepAbandoned(),
    async storedParts() {
      return (db.prepare("SELECT COUNT(*) AS n FROM fs_parts").get() as { n: number }).n;
    },
    async cleanup() {
      await backend.close();
      db.close();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
