import { DomainError } from "../../core/errors.js";
import type { S3Context } from "./context.js";
import { BLOB_META, decodeKey, UPLOAD_ID } from "./layout.js";
import { mapLimit } from "./map-limit.js";
import { liveOf } from "./records.js";
import type { UploadStore } from "./upload-store.js";

export type GarbageReport = {
  /** Blobs removed: written but never committed, replaced but not deleted, parts of gone uploads. */
  blobs: number;
  /** Part manifests removed whose upload is gone (a part recorded while its upload was aborted). */
  parts: number;
  /** Uploads aborted for their age (filled in by the caller). */
  uploads: number;
  /** Blob uploads left open in the store (a crash in the middle of a large body). */
  storeUploads: number;
};

const IN_PARALLEL = 8;

/**
 * Removes what crashes, refusals and failed deletes leave behind, in the given buckets. Only
 * objects older than `graceMs` are looked at: a write in flight has a blob that no record names
 * yet (and a commit that took longer than half the grace period is refused, see
 * commit-version.ts). Each blob finds its referrer through its own metadata: the record of the
 * key it was written for (its live blob must be this one) or, for a part, its part manifest. So
 * memory stays flat however many objects there are: a few requests per blob, no global set.
 * Ages compare the store's LastModified with this host's clock.
 */
export async function collectGarbage(
  ctx: S3Context,
  uploads: UploadStore,
  buckets: string[],
  graceMs: number,
): Promise<GarbageReport> {
  const report: GarbageReport = { blobs: 0, parts: 0, uploads: 0, storeUploads: 0 };
  const cutoff = Date.now() - graceMs;
  for (const bucket of buckets) {
    try {
      report.storeUploads += await openBlobUploads(ctx, bucket, cutoff);
      report.parts += await orphanedParts(ctx, uploads, bucket, cutoff);
      report.blobs += await unreferencedBlobs(ctx, uploads, bucket, cutoff);
    } catch (e) {
      if (e instanceof DomainError && e.code === "NoSuchBucket") continue; // deleted meanwhile
      throw e;
    }
  }
  return report;
}

async function openBlobUploads(ctx: S3Context, bucket: string, cutoff: number) {
  let removed = 0;
  for (const u of await ctx.store.listStoreUploads(bucket, ctx.layout.blobs)) {
    if (u.initiated.getTime() >= cutoff) continue;
    await ctx.store.abortMultipart(bucket, u.name, u.uploadId);
    removed++;
  }
  return removed;
}

async function orphanedParts(ctx: S3Context, uploads: UploadStore, bucket: string, cutoff: number) {
  const { layout, store } = ctx;
  const known = new Map<string, Promise<boolean>>();
  let removed = 0;
  for await (const page of store.listAll(bucket, layout.uploads)) {
    await mapLimit(page.objects, IN_PARALLEL, async (o) => {
      const rest = o.name.slice(layout.uploads.length);
      const slash = rest.indexOf("/");
      if (slash < 0 || o.lastModified.getTime() >= cutoff) return;
      const uploadId = rest.slice(0, slash);
      if (!UPLOAD_ID.test(uploadId)) return;
      let exists = known.get(uploadId);
      if (!exists) {
        exists = uploads.manifest(bucket, uploadId).then((m) => m !== null);
        known.set(uploadId, exists);
      }
      if (await exists) return;
      await store.delete(bucket, o.name);
      removed++;
    });
  }
  return removed;
}

async function unreferencedBlobs(ctx: S3Context, uploads: UploadStore, bucket: string, cutoff: number) {
  const { layout, store } = ctx;
  let removed = 0;
  for await (const page of store.listAll(bucket, layout.blobs)) {
    const old = page.objects.filter((o) => o.lastModified.getTime() < cutoff);
    await mapLimit(old, IN_PARALLEL, async (o) => {
      const id = o.name.slice(layout.blobs.length);
      if (await isReferenced(ctx, uploads, bucket, o.name, id)) return;
      await store.delete(bucket, o.name);
      removed++;
    });
  }
  return removed;
}

async function isReferenced(
  ctx: S3Context,
  uploads: UploadStore,
  bucket: string,
  name: string,
  id: string,
): Promise<boolean> {
  const head = await ctx.store.head(bucket, name);
  if (!head) return true; // gone already: nothing to remove
  const meta = head.metadata;
  if (meta[BLOB_META.kind] === "part") {
    const uploadId = meta[BLOB_META.upload] ?? "";
    const partNumber = Number(meta[BLOB_META.part]);
    if (!UPLOAD_ID.test(uploadId) || !Number.isSafeInteger(partNumber)) return true;
    return (await uploads.part(bucket, uploadId, partNumber))?.blob === id;
  }
  const encoded = meta[BLOB_META.key];
  if (encoded === undefined) {
    // Not written by fencegate as far as its metadata tells: left alone.
    ctx.log?.warn({ bucket, name }, "s3 backend: a blob without fencegate metadata; left in place");
    return true;
  }
  const read = await ctx.records.read(bucket, decodeKey(encoded));
  return liveOf(read?.record ?? null)?.blob === id;
}
