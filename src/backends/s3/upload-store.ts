import type { UploadRef } from "../storage-backend.js";
import type { S3Context } from "./context.js";
import { EtagCache } from "./etag-cache.js";
import { UPLOAD_ID } from "./layout.js";
import { mapLimit } from "./map-limit.js";
import { noSuchUpload } from "./store-errors.js";
import { type PartManifest, parsePartManifest, parseUploadManifest, type UploadManifest } from "./uploads.js";

const READS_IN_PARALLEL = 16;

/** Upload and part manifests in the store (`<m>u/`), read through an ETag cache. */
export class UploadStore {
  private readonly uploads = new EtagCache<UploadManifest>(5_000);
  private readonly parts = new EtagCache<PartManifest>(20_000);

  constructor(private readonly ctx: S3Context) {}

  private get layout() {
    return this.ctx.layout;
  }

  /** The upload's manifest; NoSuchUpload when unknown, or addressed with another key. */
  async require(ref: UploadRef): Promise<UploadManifest> {
    const manifest = UPLOAD_ID.test(ref.uploadId) ? await this.manifest(ref.bucket, ref.uploadId) : null;
    if (!manifest || manifest.key !== ref.key) throw noSuchUpload(ref.uploadId);
    return manifest;
  }

  async manifest(bucket: string, uploadId: string, etag?: string): Promise<UploadManifest | null> {
    const name = this.layout.manifestName(uploadId);
    const cached = etag ? this.uploads.get(bucket, name, etag) : undefined;
    if (cached) return cached;
    const got = await this.ctx.store.getText(bucket, name);
    if (!got) return null;
    const manifest =
      this.uploads.get(bucket, name, got.etag) ?? parseUploadManifest(got.text, `${bucket}/${name}`);
    this.uploads.set(bucket, name, got.etag, manifest);
    return manifest;
  }

  async create(bucket: string, manifest: UploadManifest): Promise<void> {
    await this.ctx.store.put(bucket, this.layout.manifestName(manifest.uploadId), {
      body: Buffer.from(JSON.stringify(manifest)),
      contentType: "application/json",
    });
  }

  /** Every upload manifest of the bucket (the manifests, not their parts: listed with a delimiter). */
  async all(bucket: string): Promise<UploadManifest[]> {
    const found: UploadManifest[] = [];
    for await (const page of this.ctx.store.listAll(bucket, this.layout.uploads, "/")) {
      const manifests = await mapLimit(page.objects, READS_IN_PARALLEL, (o) =>
        this.manifest(bucket, o.name.slice(this.layout.uploads.length), o.etag),
      );
      for (const m of manifests) if (m) found.push(m);
    }
    return found;
  }

  async part(
    bucket: string,
    uploadId: string,
    partNumber: number,
    etag?: string,
  ): Promise<PartManifest | null> {
    const name = this.layout.partName(uploadId, partNumber);
    const cached = etag ? this.parts.get(bucket, name, etag) : undefined;
    if (cached) return cached;
    const got = await this.ctx.store.getText(bucket, name);
    if (!got) return null;
    const part = this.parts.get(bucket, name, got.etag) ?? parsePartManifest(got.text, `${bucket}/${name}`);
    this.parts.set(bucket, name, got.etag, part);
    return part;
  }

  async putPart(bucket: string, uploadId: string, part: PartManifest): Promise<void> {
    await this.ctx.store.put(bucket, this.layout.partName(uploadId, part.partNumber), {
      body: Buffer.from(JSON.stringify(part)),
      contentType: "application/json",
    });
  }

  /** The upload's parts after `after` in part number order, up to `limit` of them. */
  async partsAfter(bucket: string, uploadId: string, after: number, limit: number): Promise<PartManifest[]> {
    const prefix = this.layout.partsPrefix(uploadId);
    const found: PartManifest[] = [];
    let continuationToken: string | undefined;
    do {
      const page = await this.ctx.store.list(bucket, {
        prefix,
        ...(continuationToken
          ? { continuationToken }
          : after > 0
            ? { startAfter: this.layout.partName(uploadId, after) }
            : {}),
        maxKeys: Math.min(1000, limit - found.length),
      });
      const parts = await mapLimit(page.objects, READS_IN_PARALLEL, (o) =>
        this.part(bucket, uploadId, Number(o.name.slice(prefix.length)), o.etag),
      );
      for (const p of parts) if (p) found.push(p);
      continuationToken = page.next;
    } while (continuationToken && found.length < limit);
    return found;
  }

  /**
   * Removes an upload: its manifest first (from then on it is gone for every caller), then each
   * part's manifest and blob. Best effort past the manifest: what a failure leaves, the collector
   * removes.
   */
  async remove(bucket: string, uploadId: string): Promise<void> {
    await this.ctx.store.delete(bucket, this.layout.manifestName(uploadId));
    try {
      for (;;) {
        const parts = await this.partsAfter(bucket, uploadId, 0, 1000);
        await mapLimit(parts, READS_IN_PARALLEL, async (p) => {
          await this.ctx.removeBlob(bucket, p.blob);
          await this.ctx.store.delete(bucket, this.layout.partName(uploadId, p.partNumber));
        });
        if (parts.length < 1000) return;
      }
    } catch (err) {
      this.ctx.log?.warn({ err, bucket, uploadId }, "s3 backend: removing an upload's parts failed");
    }
  }
}
