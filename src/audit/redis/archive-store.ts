import { randomBytes } from "node:crypto";
import { mkdir, open, readdir, readFile, rename, rm } from "node:fs/promises";
import { join } from "node:path";

/**
 * Where audit records go when they leave Redis: immutable segment files, each written whole and
 * durable before Redis lets go of its records. Every gateway that answers audit queries reads
 * the same store, so with several replicas it must be shared (a network volume mounted by all).
 */
export interface AuditArchiveStore {
  /** Where the segments are, for people and logs. */
  readonly location: string;
  /** Writes a segment; resolves once it is durable. Writing the same name again replaces it. */
  put(name: string, body: Buffer): Promise<void>;
  get(name: string): Promise<Buffer>;
  remove(name: string): Promise<void>;
  list(): Promise<string[]>;
}

/**
 * Segments as files in one directory: written to a temporary file, fsync'ed, renamed into place
 * and the directory fsync'ed, so a crash leaves either the whole segment or none of it.
 */
export function createDirArchiveStore(dir: string): AuditArchiveStore {
  const ready = mkdir(dir, { recursive: true });
  const path = (name: string) => {
    if (!/^[A-Za-z0-9._-]+$/.test(name) || name.startsWith(".")) {
      throw new Error(`not an archive segment name: ${JSON.stringify(name)}`);
    }
    return join(dir, name);
  };
  return {
    location: dir,
    async put(name, body) {
      await ready;
      const final = path(name);
      const temp = join(dir, `.${name}.${randomBytes(6).toString("hex")}.tmp`);
      const file = await open(temp, "w");
      try {
        await file.writeFile(body);
        await file.sync();
      } finally {
        await file.close();
      }
      await rename(temp, final);
      const d = await open(dir, "r");
      try {
        await d.sync();
      } finally {
        await d.close();
      }
    },
    async get(name) {
      return readFile(path(name));
    },
    async remove(name) {
      await rm(path(name), { force: true });
    },
    async list() {
      await ready;
      return (await readdir(dir)).filter((n) => !n.startsWith("."));
    },
  };
}
