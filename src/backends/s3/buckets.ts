import { DomainError } from "../../core/errors.js";
import { deleteBucketSafely, type InFlightWrites } from "../../fence/bucket-deletion.js";
import { noSuchBucket } from "../backend-errors.js";
import { compareKeys } from "../list-helper.js";
import type { BucketInfo } from "../storage-backend.js";
import type { S3Context } from "./context.js";
import { mapLimit } from "./map-limit.js";
import type { S3ObjectPort } from "./object-port.js";

/**
 * Buckets. A gateway bucket is the store bucket of the same name.
 *
 * fencegate never deletes a store bucket, nor anything in it: a deleted bucket's HCTs live in
 * its records (contract rule 2: they outlive deletes, and a re-created bucket keeps them), and a
 * commit paused before the deletion must never land in a bucket that lost its records. DeleteBucket
 * marks the bucket instead (`<m>deleted`, bucket-marker.ts), through the protocol of
 * src/fence/bucket-deletion.ts, which makes it atomic with respect to every commit; the marked
 * bucket answers NoSuchBucket and drops out of listBuckets, its uploads are removed, its blobs
 * left to the collector; creating it again marks it live, and the HCTs are there. A tool reading
 * the store directly still sees that bucket with its `<m>` objects.
 */
export class BucketOps {
  constructor(
    private readonly ctx: S3Context,
    private readonly port: S3ObjectPort,
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

  async create(bucket: string, location = ""): Promise<void> {
    const state = await this.ctx.store.bucketState(bucket);
    if (state === "missing" && (await this.ctx.store.createBucket(bucket))) {
      if (location !== "") await this.keepLocation(bucket, location);
      return;
    }
    if (state === "ours") {
      const marker = await this.port.bucketState(bucket);
      // Deleted for fencegate only: it comes back with its HCTs, and the new location constraint.
      if (marker.phase === "deleted") {
        await this.keepLocation(bucket, location);
        if (await this.port.setBucketState(bucket, marker, "live")) return;
      }
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
    await this.port.setBucketState(bucket, { phase: "live", since: 0, version: null }, "deleted");
  }

  /**
   * The location constraint's record, `<m>location`, written before the bucket is answered as
   * created (or brought back), so that a bucket never shows another bucket's constraint.
   */
  private async keepLocation(bucket: string, location: string): Promise<void> {
    const name = this.ctx.layout.locationRecord;
    if (location === "") await this.ctx.store.delete(bucket, name);
    else
      await this.ctx.store.put(bucket, name, {
        body: Buffer.from(location, "utf8"),
        contentType: "text/plain",
      });
  }

  /** The bucket's location constraint, "" for none; NoSuchBucket. */
  async location(bucket: string): Promise<string> {
    const [record] = await Promise.all([
      this.ctx.store.getText(bucket, this.ctx.layout.locationRecord),
      this.head(bucket),
    ]);
    return record?.text ?? "";
  }

  async head(bucket: string): Promise<BucketInfo> {
    const [listed, deleted] = await Promise.all([
      this.ctx.store.listBuckets(bucket),
      this.ctx.softDeleted(bucket), // NoSuchBucket when the store has no such bucket
    ]);
    if (deleted) throw noSuchBucket(bucket);
    return listed.find((b) => b.name === bucket) ?? { name: bucket, creationDate: new Date(0) };
  }

  async delete(bucket: string, inFlight: InFlightWrites): Promise<void> {
    await deleteBucketSafely(this.port, bucket, inFlight);
  }
}
