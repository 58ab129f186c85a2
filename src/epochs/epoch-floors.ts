import { readdirSync } from "node:fs";
import type { StorageBackend, SystemRecords } from "../backends/storage-backend.js";
import { DomainError } from "../core/errors.js";
import type { EpochStore } from "../leases/redis-shared/epoch-store.js";

/**
 * Epochs a store must stay above without writing there: the ones older versions kept elsewhere.
 * A floor answers the highest epoch it finds, or -1.
 */
export type EpochFloor = () => Promise<number>;

/** The highest epoch among names `<prefix><digits>`; anything else under the prefix is no epoch. */
export function highestEpochOf(names: Iterable<string>, prefix: string): number {
  let highest = -1;
  for (const name of names) {
    if (!name.startsWith(prefix)) continue;
    const digits = name.slice(prefix.length);
    if (/^\d+$/.test(digits)) highest = Math.max(highest, Number(digits));
  }
  return highest;
}

/** Epoch objects older versions wrote in the system bucket, deleted ones included. */
export function legacyRecordFloor(records: SystemRecords, prefix: string): EpochFloor {
  return async () => highestEpochOf(await records.legacyKeys(prefix), prefix);
}

/** An epoch directory an older version kept in the data directory (file-epoch-store.ts), if any. */
export function localDirFloor(dir: string): EpochFloor {
  return async () => {
    try {
      return highestEpochOf(readdirSync(dir), "");
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return -1;
      throw e;
    }
  };
}

/**
 * Epoch objects older versions wrote in a bucket of a backend without system records (fs: one
 * gateway), as its listing shows them (deleted ones no longer show).
 */
export function legacyObjectFloor(backend: StorageBackend, bucket: string, prefix: string): EpochFloor {
  return async () => {
    let highest = -1;
    let startAfter: string | undefined;
    for (;;) {
      let page: Awaited<ReturnType<StorageBackend["listObjects"]>>;
      try {
        page = await backend.listObjects({
          bucket,
          prefix,
          maxKeys: 1000,
          ...(startAfter !== undefined ? { startAfter } : {}),
        });
      } catch (e) {
        if (e instanceof DomainError && e.code === "NoSuchBucket") return highest;
        throw e;
      }
      highest = Math.max(
        highest,
        highestEpochOf(
          page.objects.map((o) => o.key),
          prefix,
        ),
      );
      if (!page.isTruncated || !page.nextStartAfter) return highest;
      startAfter = page.nextStartAfter;
    }
  };
}

/** `store`, whose highest() also counts the floors; epochs are created in `store` only. */
export function withFloors(store: EpochStore, floors: readonly EpochFloor[]): EpochStore {
  if (floors.length === 0) return store;
  return {
    kind: store.kind,
    async highest() {
      const found = await Promise.all([store.highest(), ...floors.map((floor) => floor())]);
      return Math.max(...found);
    },
    create: (epoch) => store.create(epoch),
  };
}
