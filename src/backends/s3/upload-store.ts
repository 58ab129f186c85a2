import { randomBytes } from "node:crypto";
import { DomainError } from "../../core/errors.js";
import { OutcomeUnknownError, type Settled } from "../../fence/commit-driver.js";
import { noSuchUpload } from "../backend-errors.js";
import type { UploadRef } from "../storage-backend.js";
import type { S3Context } from "./context.js";
import { EtagCache } from "./etag-cache.js";
import { UPLOAD_ID } from "./layout.js";
import { mapLimit } from "./map-limit.js";
import { type PartManifest, parsePartManifest, parseUploadManifest, type UploadManifest } from "./uploads.js";

const READS_IN_PARALLEL = 16;
/** Sends of one manifest creation while its answer stays lost and the manifest absent. */
const SENDS = 3;

/** A manifest written in place of a creation whose outcome was settled as not landed. */
function isDeadManifest(text: string): boolean {
  try {
    return (JSON.parse(text) as { dead?: unknown }).dead === true;
  } catch {
    return false;
  }
}

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
    if (!got || isDeadManifest(got.text)) return null;
    const manifest =
      this.uploads.get(bucket, name, got.etag) ?? parseUploadManifest(got.text, `${bucket}/${name}`);
    this.uploads.set(bucket, name, got.etag, manifest);
    return manifest;
  }

  /**
   * Creates the upload's manifest, once (If-None-Match: *: a copy sent again never lands twice).
   * A lost answer is settled by reading the manifest back: there, the creation landed; absent, the
   * same request is sent again. When even that cannot tell, the outcome is unknown, and settling
   * it later either finds the manifest or writes a dead one in its place, after which a copy still
   * on its way can no longer land.
   */
  async create(bucket: string, manifest: UploadManifest): Promise<void> {
    const name = this.layout.manifestName(manifest.uploadId);
    const body = Buffer.from(JSON.stringify(manifest));
    let cause: unknown;
    for (let send = 1; send <= SENDS; send++) {
      const put = await this.ctx.store.putConditional(bucket, name, {
        body,
        contentType: "application/json",
        ifNoneMatch: "*",
      });
      if (put.outcome === "written") return;
      if (put.outcome === "unknown") cause = put.error;
      const there = await this.readCreated(bucket, name).catch((e: unknown) => {
        cause ??= e;
        return undefined;
      });
      if (there === "ours") return;
      if (there === "dead") break;
      // Absent: nothing landed yet; the same request again.
    }
    throw new OutcomeUnknownError(
      { bucket, key: manifest.key },
      () => this.settleCreate(bucket, name),
      cause,
      `the creation of upload ${manifest.uploadId}`,
    );
  }

  /** Whether the manifest at `name` is there (a live upload), dead, or absent. */
  private async readCreated(bucket: string, name: string): Promise<"ours" | "dead" | "absent"> {
    const got = await this.ctx.store.getText(bucket, name);
    if (!got) return "absent";
    return isDeadManifest(got.text) ? "dead" : "ours";
  }

  private async settleCreate(bucket: string, name: string): Promise<Settled> {
    for (;;) {
      const there = await this.readCreated(bucket, name);
      if (there === "ours") return "landed";
      if (there === "dead") return "not-landed";
      const dead = Buffer.from(JSON.stringify({ v: 1, dead: true, initiated: Date.now() }));
      const put = await this.ctx.store.putConditional(bucket, name, {
        body: dead,
        contentType: "application/json",
        ifNoneMatch: "*",
      });
      if (put.outcome === "written") return "not-landed";
      // Lost (the creation landed meanwhile) or unknown: look again.
    }
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
    if (!got || isDeadManifest(got.text)) return null;
    const part = this.parts.get(bucket, name, got.etag) ?? parsePartManifest(got.text, `${bucket}/${name}`);
    this.parts.set(bucket, name, got.etag, part);
    return part;
  }

  /**
   * Records a part, replacing the manifest of its number if there is one: a compare-and-swap on
   * the manifest (each names its own blob, so its ETag is its own), so that a copy of an earlier
   * send that arrives late can never overwrite a later one. Returns the manifest it replaced.
   */
  async putPart(
    bucket: string,
    uploadId: string,
    part: PartManifest,
    key: string,
  ): Promise<PartManifest | null> {
    const name = this.layout.partName(uploadId, part.partNumber);
    const body = Buffer.from(JSON.stringify(part));
    /** The manifest the last unanswered send was conditioned on (its ETag), if any. */
    let uncertain: { etag: string | null; cause: unknown } | undefined;
    for (let attempt = 1; attempt <= 16; attempt++) {
      let current: { part: PartManifest | null; etag: string } | null;
      try {
        current = await this.partEntry(bucket, name);
      } catch (e) {
        if (!uncertain) throw e;
        throw this.unknownPart(bucket, key, name, part, uncertain.etag, uncertain.cause ?? e);
      }
      if (current?.part?.blob === part.blob) return null; // an earlier send landed
      if (uncertain && (current?.etag ?? null) !== uncertain.etag) uncertain = undefined; // it never will
      const put = await this.ctx.store.putConditional(bucket, name, {
        body,
        contentType: "application/json",
        ...(current ? { ifMatch: current.etag } : { ifNoneMatch: "*" }),
      });
      if (put.outcome === "written") return current?.part ?? null;
      if (put.outcome === "unknown") uncertain = { etag: current?.etag ?? null, cause: put.error };
    }
    if (uncertain) throw this.unknownPart(bucket, key, name, part, uncertain.etag, uncertain.cause);
    throw new DomainError(
      "SlowDown",
      `part ${part.partNumber} of upload ${uploadId} keeps changing; please retry`,
      {
        retryAfterSeconds: 1,
      },
    );
  }

  private unknownPart(
    bucket: string,
    key: string,
    name: string,
    part: PartManifest,
    basis: string | null,
    cause: unknown,
  ): OutcomeUnknownError {
    const settle = async (): Promise<Settled> => {
      for (;;) {
        const current = await this.partEntry(bucket, name);
        if (current?.part?.blob === part.blob) return "landed";
        if ((current?.etag ?? null) !== basis) return "not-landed";
        if (!current) {
          // Still absent: a dead manifest in its place (an upload's listing skips it).
          const dead = Buffer.from(JSON.stringify({ v: 1, dead: true }));
          const put = await this.ctx.store.putConditional(bucket, name, { body: dead, ifNoneMatch: "*" });
          if (put.outcome === "written") return "not-landed";
          continue;
        }
        // Still the manifest it was conditioned on: the same manifest again under a new ETag.
        const again = Buffer.from(
          JSON.stringify({ ...current.part, n: randomBytes(6).toString("base64url") }),
        );
        const put = await this.ctx.store.putConditional(bucket, name, { body: again, ifMatch: current.etag });
        if (put.outcome === "written") return "not-landed";
      }
    };
    return new OutcomeUnknownError({ bucket, key }, settle, cause, `part ${part.partNumber}`);
  }

  /** A part's manifest with its store ETag; null when absent or dead. */
  private async partEntry(
    bucket: string,
    name: string,
  ): Promise<{ part: PartManifest; etag: string } | null> {
    const got = await this.ctx.store.getText(bucket, name);
    if (!got || isDeadManifest(got.text)) return null;
    return { part: parsePartManifest(got.text, `${bucket}/${name}`), etag: got.etag };
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
