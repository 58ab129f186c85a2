import { DomainError } from "../../core/errors.js";
import { newWriteId, runCommit, transactionOutcome } from "../../fence/commit-driver.js";
import type { ObjectRef } from "../../fence/commit-port.js";
import type { S3Context } from "./context.js";
import { BLOB_META, blobTime, decodeKey, UPLOAD_ID } from "./layout.js";
import { mapLimit } from "./map-limit.js";
import type { S3ObjectPort } from "./object-port.js";
import { liveOf, type ReadRecord } from "./records.js";
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
 * objects older than `graceMs` are looked at. Each blob finds its referrer through its own
 * metadata, so memory stays flat however many objects there are: a few requests per blob.
 *
 * A blob of an object version is removed only once no commit can name it any more. Its key's
 * record is read: the live version's blob stays. Otherwise the record is marked by compare-and-
 * swap (`gc`: blobs of this key staged before this time may be gone), and only then is the blob
 * removed. A commit in flight that staged the blob either read the record before the mark (its
 * conditional write then fails, and it reads again) or after it: it sees the mark and refuses to
 * commit a blob the mark covers (object-port.ts). No clock decides that: the mark names the
 * blob's own staging time. A part blob stays as long as its upload does (a part manifest may
 * still be on its way), and goes once the upload is gone.
 */
export async function collectGarbage(
  ctx: S3Context,
  port: S3ObjectPort,
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
      report.blobs += await unreferencedBlobs(ctx, port, uploads, bucket, cutoff);
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
      if (await uploadExists(uploads, bucket, uploadId, known)) return;
      await store.delete(bucket, o.name);
      removed++;
    });
  }
  return removed;
}

async function unreferencedBlobs(
  ctx: S3Context,
  port: S3ObjectPort,
  uploads: UploadStore,
  bucket: string,
  cutoff: number,
) {
  const { layout, store } = ctx;
  const known = new Map<string, Promise<boolean>>();
  let removed = 0;
  for await (const page of store.listAll(bucket, layout.blobs)) {
    const old = page.objects.filter((o) => o.lastModified.getTime() < cutoff);
    await mapLimit(old, IN_PARALLEL, async (o) => {
      const id = o.name.slice(layout.blobs.length);
      if (!(await isRemovable(ctx, port, uploads, bucket, o.name, id, known))) return;
      await store.delete(bucket, o.name);
      removed++;
    });
  }
  return removed;
}

async function isRemovable(
  ctx: S3Context,
  port: S3ObjectPort,
  uploads: UploadStore,
  bucket: string,
  name: string,
  id: string,
  known: Map<string, Promise<boolean>>,
): Promise<boolean> {
  const head = await ctx.store.head(bucket, name);
  if (!head) return false; // gone already: nothing to remove
  const meta = head.metadata;
  if (meta[BLOB_META.kind] === "part") {
    const uploadId = meta[BLOB_META.upload] ?? "";
    if (!UPLOAD_ID.test(uploadId)) return false;
    return !(await uploadExists(uploads, bucket, uploadId, known));
  }
  const encoded = meta[BLOB_META.key];
  if (encoded === undefined) {
    // Not written by fencegate as far as its metadata tells: left alone.
    ctx.log?.warn({ bucket, name }, "s3 backend: a blob without fencegate metadata; left in place");
    return false;
  }
  return condemn(ctx, port, { bucket, key: decodeKey(encoded) }, id);
}

/**
 * Marks the key's record so that no commit can name blob `id` any more; false when the blob is
 * the live version's. Once this answers true the blob may be removed.
 */
async function condemn(ctx: S3Context, port: S3ObjectPort, ref: ObjectRef, id: string): Promise<boolean> {
  const staged = blobTime(id);
  for (let attempt = 1; attempt <= MAX_MARKS; attempt++) {
    const now = await port.read(ref, { attempt, etag: false });
    const record = (now.raw as { read: ReadRecord | null }).read?.record ?? null;
    if (liveOf(record)?.blob === id) return false;
    const p = record?.p;
    if (p?.kind === "put" && p.live?.blob === id && now.pending) {
      // A transaction's staged write names it: kept while the transaction is open or committed
      // (it is, or will be, the live version); an aborted one's is dropped, then collected.
      if ((await transactionOutcome(port.transactions(ref.bucket), now.pending)) !== "aborted") return false;
      await runCommit(port, ref, { op: "settle" });
      continue;
    }
    if ((record?.gc ?? 0) > staged) return true;
    const next = port.nextRecord(
      ref.key,
      record,
      { kind: "keep", hct: now.hct, writeId: newWriteId() },
      staged + 1,
    );
    const answer = await ctx.records.put(ref.bucket, now.version, next);
    if (answer.outcome === "swapped") return true;
    // Lost (a commit came first: it may be this blob's) or unknown: read again.
  }
  return false;
}

/** Compare-and-swap passes of one mark before the collector leaves the blob for its next run. */
const MAX_MARKS = 8;

function uploadExists(
  uploads: UploadStore,
  bucket: string,
  uploadId: string,
  known: Map<string, Promise<boolean>>,
): Promise<boolean> {
  let exists = known.get(uploadId);
  if (!exists) {
    exists = uploads.manifest(bucket, uploadId).then((m) => m !== null);
    known.set(uploadId, exists);
  }
  return exists;
}
