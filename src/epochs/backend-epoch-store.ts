import { Readable } from "node:stream";
import type { StorageBackend } from "../backends/storage-backend.js";
import { DomainError } from "../core/errors.js";
import { unfencedCommit } from "../fence/commit.js";
import { type EpochStore, MAX_EPOCH } from "../leases/redis/epoch-store.js";

export type BackendEpochStoreOptions = {
  backend: StorageBackend;
  /** A bucket of the storage backend that every replica reaches; it must exist. */
  bucket: string;
  /** Where the epoch records live in it. Default `.fencegate/redis-epochs/`. */
  prefix?: string;
};

const DIGITS = String(MAX_EPOCH).length;

/**
 * Token epochs as small objects in the storage backend every replica shares (S3, Azure):
 * `<prefix><epoch, zero-padded>`, each created once with If-None-Match: * (a conditional create
 * that exactly one replica wins). Zero-padding makes the listing's last key the highest epoch.
 */
export function createBackendEpochStore(opts: BackendEpochStoreOptions): EpochStore {
  const { backend, bucket } = opts;
  const prefix = opts.prefix ?? ".fencegate/redis-epochs/";
  const keyOf = (epoch: number) => `${prefix}${String(epoch).padStart(DIGITS, "0")}`;
  return {
    kind: `backend:${bucket}/${prefix}`,
    async highest() {
      let highest = -1;
      let startAfter: string | undefined;
      for (;;) {
        const page = await backend.listObjects({
          bucket,
          prefix,
          maxKeys: 1000,
          ...(startAfter !== undefined ? { startAfter } : {}),
        });
        for (const { key } of page.objects) {
          const n = key.slice(prefix.length);
          if (/^\d+$/.test(n)) highest = Math.max(highest, Number(n));
        }
        if (!page.isTruncated || !page.nextStartAfter) return highest;
        startAfter = page.nextStartAfter;
      }
    },
    async create(epoch) {
      const bytes = Buffer.from(`${JSON.stringify({ epoch, createdAt: new Date().toISOString() })}\n`);
      try {
        await backend.putObject(
          {
            bucket,
            key: keyOf(epoch),
            body: {
              stream: Readable.from([bytes]),
              digest: Promise.resolve({ size: bytes.length, checksums: {} }),
            },
            metadata: { headers: { contentType: "application/json" }, userMetadata: {} },
          },
          unfencedCommit({ conditions: { ifNoneMatch: "*" } }),
        );
        return true;
      } catch (e) {
        if (e instanceof DomainError && e.code === "PreconditionFailed") return false;
        throw e;
      }
    },
  };
}
