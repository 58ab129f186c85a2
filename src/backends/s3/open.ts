import { systemClock } from "../../core/clock.js";
import { CapabilityGate } from "./capability.js";
import { S3Context } from "./context.js";
import { EtagCache } from "./etag-cache.js";
import { Layout } from "./layout.js";
import { ObjectListing } from "./object-listing.js";
import { S3ObjectPort } from "./object-port.js";
import {
  DEFAULTS,
  MAX_BLOB_PART,
  MIN_BLOB_PART,
  type ResolvedOptions,
  type S3BackendOptions,
} from "./options.js";
import { RecordStore } from "./record-store.js";
import type { ObjectRecord } from "./records.js";
import { S3Backend } from "./s3-backend.js";
import { S3MultipartStore } from "./s3-multipart.js";
import { Store } from "./store.js";
import { UploadStore } from "./upload-store.js";

/**
 * Opens an S3 backend. Nothing is read from the store here: the capability check starts in the
 * background (against `verifyBucket`, when given) and every write awaits its verdict.
 */
export function createS3Backend(options: S3BackendOptions): S3Backend {
  const partSizeBytes = options.partSizeBytes ?? DEFAULTS.partSizeBytes;
  if (
    !Number.isSafeInteger(partSizeBytes) ||
    partSizeBytes < MIN_BLOB_PART ||
    partSizeBytes > MAX_BLOB_PART
  ) {
    throw new Error(`partSizeBytes must be an integer from ${MIN_BLOB_PART} to ${MAX_BLOB_PART}`);
  }
  const requestTimeoutMs = options.requestTimeoutMs ?? DEFAULTS.requestTimeoutMs;
  if (!(requestTimeoutMs > 0)) throw new Error("requestTimeoutMs must be positive");
  const metaPrefix = options.metaPrefix ?? DEFAULTS.metaPrefix;
  if (metaPrefix === "" || !metaPrefix.endsWith("/")) {
    throw new Error("metaPrefix must be a non-empty prefix ending with '/'");
  }
  const resolved: ResolvedOptions = {
    partSizeBytes,
    gcGraceMs: options.gcGraceMs ?? DEFAULTS.gcGraceMs,
    gcIntervalMs: options.gcIntervalMs ?? 0,
    multipartMaxAgeMs: options.multipartMaxAgeMs ?? DEFAULTS.multipartMaxAgeMs,
    ...(options.verifyBucket !== undefined ? { verifyBucket: options.verifyBucket } : {}),
  };

  const store = new Store({
    ...(options.endpoint ? { endpoint: options.endpoint } : {}),
    region: options.region,
    ...(options.credentials ? { credentials: options.credentials } : {}),
    forcePathStyle: options.forcePathStyle ?? false,
    requestTimeoutMs,
    ...(options.observeCall ? { observeCall: options.observeCall } : {}),
  });
  const layout = new Layout(metaPrefix);
  const records = new RecordStore(store, layout, new EtagCache<ObjectRecord>());
  const gate = new CapabilityGate(store, layout, {
    verify: options.verify ?? true,
    ...(options.verifyBucket !== undefined ? { verifyBucket: options.verifyBucket } : {}),
    ...(options.log ? { log: options.log } : {}),
  });
  const ctx = new S3Context(
    store,
    layout,
    records,
    gate,
    options.clock ?? systemClock,
    options.hooks,
    options.log,
  );
  const uploads = new UploadStore(ctx);
  const listing = new ObjectListing(store, layout, records, (bucket, record) => ctx.visible(bucket, record));
  const port = new S3ObjectPort(
    ctx,
    uploads,
    async (bucket) => (await listing.list({ bucket, maxKeys: 1 })).objects.length === 0,
  );
  // A reader that found a committed transaction's write not yet rolled forward rolls it forward.
  const settling = new Set<string>();
  ctx.settleLater = (bucket, key) => {
    const id = `${bucket}\n${key}`;
    // One roll-forward per key at a time, however many readers found it.
    if (ctx.closed || settling.has(id)) return;
    settling.add(id);
    port
      .transactions(bucket)
      .settle(key)
      .finally(() => settling.delete(id))
      .catch((err) =>
        ctx.log?.debug?.({ err, bucket, key }, "s3 backend: rolling a transaction write forward failed"),
      );
  };
  const multipart = new S3MultipartStore(ctx, uploads, port, {
    partSizeBytes,
    maxAgeMs: resolved.multipartMaxAgeMs,
  });
  const backend = new S3Backend(ctx, multipart, uploads, listing, port, resolved);
  gate.start();
  backend.startGarbageCollection(resolved.gcIntervalMs);
  return backend;
}
