import { closeSync, fsyncSync, mkdirSync, openSync, readdirSync, writeSync } from "node:fs";
import { join } from "node:path";
import type { EpochStore } from "./epoch-store.js";

/**
 * Epochs as files of one directory (`<dataDir>/redis-epochs/<n>`), for a single gateway on the
 * fs backend: a file created with O_EXCL is the conditional create, fsynced with its directory
 * before it counts.
 */
export function createFileEpochStore(dir: string): EpochStore {
  mkdirSync(dir, { recursive: true });
  return {
    kind: "file",
    async highest() {
      let highest = -1;
      for (const name of readdirSync(dir)) {
        if (/^\d+$/.test(name)) highest = Math.max(highest, Number(name));
      }
      return highest;
    },
    async create(epoch) {
      let fd: number;
      try {
        fd = openSync(join(dir, String(epoch)), "wx");
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === "EEXIST") return false;
        throw e;
      }
      try {
        writeSync(fd, `${new Date().toISOString()}\n`);
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
      const dirFd = openSync(dir, "r");
      try {
        fsyncSync(dirFd);
      } finally {
        closeSync(dirFd);
      }
      return true;
    },
  };
}
