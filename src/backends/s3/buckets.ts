import { DomainError } from "../../core/errors.js";
import { prefixUpperBound } from "../../core/prefix-range.js";
import { compareKeys } from "../list-helper.js";
import type { BucketInfo } from "../storage-backend.js";
import type { S3Context } from "./context.js";
import { mapLimit } from "./map-limit.js";
import { type ObjectListing, startAfterFor } from "./object-listing.js";
import { noSuchBucket } from "./store-errors.js";
import type { UploadStore } from "./upload-store.js";

/**
 * Buckets. A gateway bucket is the store bucket of the same name.
 *
 * Deleting a bucket must not lose its HCTs (contract rule 2: they outlive deletes, and a
 * re-created bucket keeps them). The records hold them, inside the bucket. So a bucket without
 * live objects is deleted from the store only when no record in it carries an HCT and no plain
 * object is there (hidden by a tombstone): its meta objects are removed first (tombstones and
 * fencegate's objects do not count, as the fs backend's tombstones do not), then the bucket.
 * Otherwise it is deleted for fencegate only: a marker
 * `<m>deleted` makes it answer NoSuchBucket and drop out of listBuckets, its uploads are
 * removed, its blobs left to the collector; creating it again removes the marker, and the HCTs
 * are there. A tool reading the store directly still sees that bucket with its `<m>` objects.
 */
export class BucketOps {
  constructor(
    private readonly ctx: S3Context,
    private readonly listing: ObjectListing,
    private readonly uploads: UploadStore,
  ) {}

  async list(): Promise<BucketInfo[]> {
    const all = await this.ctx.store.listBuckets();
    const visible = await mapLimit(all, 8, async (bucket) => {
      try {
        return (await this.ctx.softDeleted(bucket.name)) ? null : bucket;
      } catch (e) {
        if (e instanceof DomainError && e.code === "NoSuchBucket") return null; // deleted meanwhile
        throw e;
      }
    });
    return visible.filter((b) => b !== null).sort((a, b) => compareKeys(a.name, b.name));
  }

  async create(bucket: string): Promise<void> {
    const state = await this.ctx.store.bucketState(bucket);
    if (state === "missing" && (await this.ctx.store.createBucket(bucket))) return;
    if (state === "ours" && (await this.ctx.softDeleted(bucket))) {
      // Deleted for fencegate only: it comes back with its HCTs.
      await this.ctx.store.delete(bucket, this.ctx.layout.deletedMarker);
      return;
    }
    throw new DomainError(
      "BucketAlreadyOwnedByYou",
      state === "foreign"
        ? "the bucket exists and belongs to another account"
        : "you already own this bucket",
      { bucket },
    );
  }

  /**
   * Makes sure the store bucket exists, to hold HCTs: a bucket missing from the store is created
   * deleted for fencegate (with its marker). One that exists, or that another writer created
   * meanwhile, is left as it is.
   */
  async keepForHcts(bucket: string): Promise<void> {
    if ((await this.ctx.store.bucketState(bucket)) !== "missing") return;
    if (!(await this.ctx.store.createBucket(bucket))) return;
    await this.markDeleted(bucket);
  }

  private async markDeleted(bucket: string): Promise<void> {
    await this.ctx.store.put(bucket, this.ctx.layout.deletedMarker, {
      body: Buffer.from(JSON.stringify({ deleted: this.ctx.clock() })),
      contentType: "application/json",
    });
  }

  async head(bucket: string): Promise<BucketInfo> {
    const [listed, deleted] = await Promise.all([
      this.ctx.store.listBuckets(bucket),
      this.ctx.softDeleted(bucket), // NoSuchBucket when the store has no such bucket
    ]);
    if (deleted) throw noSuchBucket(bucket);
    return listed.find((b) => b.name === bucket) ?? { name: bucket, creationDate: new Date(0) };
  }

  async delete(bucket: string): Promise<void> {
    await this.ctx.requireBucket(bucket);
    if ((await this.listing.list({ bucket, maxKeys: 1 })).objects.length > 0) throw notEmpty(bucket);
    for (const upload of await this.uploads.all(bucket)) await this.uploads.remove(bucket, upload.uploadId);
    // Kept in the store when records carry HCTs, or when plain objects are there (hidden by
    // tombstones, since the listing found none): fencegate never deletes bytes it did not write.
    if ((await this.keepsHcts(bucket)) || (await this.hasPlainObjects(bucket))) {
      await this.markDeleted(bucket);
      return;
    }
    for (const u of await this.ctx.store.listStoreUploads(bucket, this.ctx.layout.meta)) {
      await this.ctx.store.abortMultipart(bucket, u.name, u.uploadId);
    }
    for await (const page of this.ctx.store.listAll(bucket, this.ctx.layout.meta)) {
      await mapLimit(page.objects, 16, (o) => this.ctx.store.delete(bucket, o.name));
    }
    // Something landed since the check (a racing write): the store refuses, and so do we.
    if (!(await this.ctx.store.deleteBucket(bucket))) throw notEmpty(bucket);
  }

  /** Whether any object outside the meta prefix is in the store bucket (visible or not). */
  private async hasPlainObjects(bucket: string): Promise<boolean> {
    const first = await this.ctx.store.list(bucket, { maxKeys: 1 });
    const name = first.objects[0]?.name;
    if (name === undefined) return false;
    if (!this.ctx.layout.isMeta(name)) return true;
    const past = prefixUpperBound(this.ctx.layout.meta);
    if (past === null) return false;
    const after = startAfterFor("", { key: past, inclusive: true });
    return (
      (await this.ctx.store.list(bucket, { maxKeys: 1, ...(after ? { startAfter: after } : {}) })).objects
        .length > 0
    );
  }

  /** Whether any record of the bucket carries an HCT. */
  private async keepsHcts(bucket: string): Promise<boolean> {
    for (const prefix of [this.ctx.layout.records, this.ctx.layout.longRecords]) {
      for await (const page of this.ctx.store.listAll(bucket, prefix)) {
        const records = await mapLimit(page.objects, 16, (o) =>
          this.ctx.records.readListed(bucket, o.name, o.etag),
        );
        if (records.some((r) => r !== null && r.hct !== null)) return true;
      }
    }
    return false;
  }
}

const notEmpty = (bucket: string) =>
  new DomainError("BucketNotEmpty", "the bucket you tried to delete is not empty", { bucket });
