import { Readable } from "node:stream";
import type { AuditArchiveStore } from "../audit/redis/archive-store.js";
import type { StorageBackend } from "../backends/storage-backend.js";
import { unfencedCommit } from "../fence/commit.js";

type BackendArchiveStoreOptions = {
  backend: StorageBackend;
  /** A bucket every replica reaches (S3 bucket, Azure container); it must exist. */
  bucket: string;
  /** Where the segments live in it. Default `.fencegate/audit/`. */
  prefix?: string;
};

/**
 * The audit archive as objects in the storage backend every replica already shares (S3, Azure):
 * `<prefix><segment name>`, written whole (the backend's put resolves once the object is
 * committed) and never changed. Readable in place by tools that read JSON Lines from object
 * stores (DuckDB's httpfs, Athena).
 */
export function createBackendArchiveStore(opts: BackendArchiveStoreOptions): AuditArchiveStore {
  const { backend, bucket } = opts;
  const prefix = opts.prefix ?? ".fencegate/audit/";
  return {
    location: `${backend.kind}:${bucket}/${prefix}`,
    async put(name, body) {
      await backend.putObject(
        {
          bucket,
          key: prefix + name,
          body: {
            stream: Readable.from([body]),
            digest: Promise.resolve({ size: body.length, checksums: {} }),
          },
          metadata: { headers: { contentType: "application/x-ndjson" }, userMetadata: {} },
        },
        unfencedCommit(),
      );
    },
    async get(name) {
      // A segment is bounded (segmentRecords records), so it is read whole.
      const { body } = await backend.getObject(bucket, prefix + name);
      const chunks: Buffer[] = [];
      for await (const chunk of body) chunks.push(Buffer.from(chunk as Uint8Array));
      return Buffer.concat(chunks);
    },
    async remove(name) {
      await backend.deleteObject({ bucket, key: prefix + name }, unfencedCommit());
    },
    async list() {
      const names: string[] = [];
      let startAfter: string | undefined;
      for (;;) {
        const page = await backend.listObjects({
          bucket,
          prefix,
          maxKeys: 1000,
          ...(startAfter !== undefined ? { startAfter } : {}),
        });
        for (const { key } of page.objects) names.push(key.slice(prefix.length));
        if (!page.isTruncated || !page.nextStartAfter) return names;
        startAfter = page.nextStartAfter;
      }
    },
  };
}
