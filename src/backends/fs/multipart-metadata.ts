import type { EmbeddedDb } from "../../sqlite/db.js";
import { noSuchUpload, partReplaced } from "../backend-errors.js";
import type { SeekFrom } from "../list-helper.js";
import type { CreateUploadInput, MultipartUpload, ObjectMetadata, UploadRef } from "../storage-backend.js";

/**
 * Multipart upload and part rows of the fs backend (tables `fs_uploads`, `fs_parts`) in the
 * shared SQLite database. Like FsMetadataStore, every method is synchronous, and the ones that
 * change rows run inside a step of the database's domain: each check and the change it guards
 * are one transaction, and a completion's HCT check, object row and removal of the upload
 * commit together or not at all.
 */

const SCHEMA = `
CREATE TABLE IF NOT EXISTS fs_uploads (
  upload_id TEXT PRIMARY KEY,
  bucket TEXT NOT NULL,
  key TEXT NOT NULL,
  metadata TEXT NOT NULL,
  token INTEGER,
  lease_id TEXT,
  initiator TEXT,
  initiated INTEGER NOT NULL,
  transaction_id TEXT
) WITHOUT ROWID;

-- Upload ids start with the initiation time, so this order is S3's: by key, then by initiation.
CREATE UNIQUE INDEX IF NOT EXISTS fs_uploads_listing ON fs_uploads (bucket, key, upload_id);
CREATE INDEX IF NOT EXISTS fs_uploads_age ON fs_uploads (initiated);

CREATE TABLE IF NOT EXISTS fs_parts (
  upload_id TEXT NOT NULL,
  part_number INTEGER NOT NULL,
  blob TEXT NOT NULL,
  size INTEGER NOT NULL,
  md5 TEXT NOT NULL,
  last_modified INTEGER NOT NULL,
  PRIMARY KEY (upload_id, part_number)
) WITHOUT ROWID;

-- The startup sweep asks, for each blob file, whether a live upload's part references it.
CREATE UNIQUE INDEX IF NOT EXISTS fs_parts_blob ON fs_parts (blob);
`;

type UploadRow = {
  upload_id: string;
  bucket: string;
  key: string;
  metadata: string;
  token: number | null;
  lease_id: string | null;
  initiator: string | null;
  initiated: number;
  transaction_id: string | null;
};

export type PartRow = {
  upload_id: string;
  part_number: number;
  blob: string;
  size: number;
  md5: string;
  last_modified: number;
};

type NewUpload = CreateUploadInput & { uploadId: string; initiated: number };

type NewPart = {
  ref: UploadRef;
  partNumber: number;
  blob: string;
  size: number;
  md5: string;
  lastModified: number;
};

export class FsMultipartMetadata {
  private readonly stmts;

  constructor(db: EmbeddedDb) {
    db.exec(SCHEMA);
    // Uploads recorded before transactions existed have no transaction_id column.
    const columns = db.prepare<[], { name: string }>("PRAGMA table_info(fs_uploads)").all();
    if (!columns.some((c) => c.name === "transaction_id")) {
      db.exec("ALTER TABLE fs_uploads ADD COLUMN transaction_id TEXT");
    }
    this.stmts = {
      upload: db.prepare<[string], UploadRow>("SELECT * FROM fs_uploads WHERE upload_id = ?"),
      insertUpload: db.prepare(
        `INSERT INTO fs_uploads (upload_id, bucket, key, metadata, token, lease_id, initiator, initiated, transaction_id)
         VALUES (@uploadId, @bucket, @key, @metadata, @token, @leaseId, @initiator, @initiated, @transactionId)`,
      ),
      deleteUpload: db.prepare("DELETE FROM fs_uploads WHERE upload_id = ?"),
      part: db.prepare<[string, number], PartRow>(
        "SELECT * FROM fs_parts WHERE upload_id = ? AND part_number = ?",
      ),
      parts: db.prepare<[string], PartRow>("SELECT * FROM fs_parts WHERE upload_id = ? ORDER BY part_number"),
      partsAfter: db.prepare<[string, number, number], PartRow>(
        "SELECT * FROM fs_parts WHERE upload_id = ? AND part_number > ? ORDER BY part_number LIMIT ?",
      ),
      upsertPart: db.prepare(
        `INSERT INTO fs_parts (upload_id, part_number, blob, size, md5, last_modified)
         VALUES (@uploadId, @partNumber, @blob, @size, @md5, @lastModified)
         ON CONFLICT (upload_id, part_number) DO UPDATE SET blob = excluded.blob, size = excluded.size,
           md5 = excluded.md5, last_modified = excluded.last_modified`,
      ),
      deleteParts: db.prepare("DELETE FROM fs_parts WHERE upload_id = ?"),
      blobReferenced: db.prepare<[string], { one: number }>("SELECT 1 AS one FROM fs_parts WHERE blob = ?"),
      uploadsFrom: db.prepare<[string, string], UploadRow>(
        "SELECT * FROM fs_uploads WHERE bucket = ? AND key >= ? ORDER BY key, upload_id",
      ),
      uploadsAfterKey: db.prepare<[string, string], UploadRow>(
        "SELECT * FROM fs_uploads WHERE bucket = ? AND key > ? ORDER BY key, upload_id",
      ),
      uploadsAfterUpload: db.prepare<[string, string, string], UploadRow>(
        "SELECT * FROM fs_uploads WHERE bucket = ? AND (key, upload_id) > (?, ?) ORDER BY key, upload_id",
      ),
      initiatedBefore: db.prepare<[number, number], { upload_id: string }>(
        "SELECT upload_id FROM fs_uploads WHERE initiated < ? ORDER BY initiated LIMIT ?",
      ),
    };
  }

  /** In a step (with the commit's HCT check, see multipart-store.ts): records a new upload. */
  insertUpload(upload: NewUpload): void {
    this.stmts.insertUpload.run({
      uploadId: upload.uploadId,
      bucket: upload.bucket,
      key: upload.key,
      metadata: JSON.stringify(upload.metadata),
      token: upload.token,
      leaseId: upload.leaseId,
      initiator: upload.initiator,
      initiated: upload.initiated,
      transactionId: upload.transactionId ?? null,
    });
  }

  /** The upload's row; NoSuchUpload when it is unknown or addressed with another bucket or key. */
  requireUpload(ref: UploadRef): UploadRow {
    const row = this.stmts.upload.get(ref.uploadId);
    if (!row || row.bucket !== ref.bucket || row.key !== ref.key) {
      throw noSuchUpload(ref.uploadId);
    }
    return row;
  }

  /**
   * In a step (with the commit's HCT check): records a part; the upload must still exist.
   * Returns the blob of the part it replaced (the caller unlinks it).
   */
  recordPart(part: NewPart): string | null {
    const upload = this.requireUpload(part.ref);
    const replaced = this.stmts.part.get(upload.upload_id, part.partNumber);
    this.stmts.upsertPart.run({
      uploadId: upload.upload_id,
      partNumber: part.partNumber,
      blob: part.blob,
      size: part.size,
      md5: part.md5,
      lastModified: part.lastModified,
    });
    return replaced?.blob ?? null;
  }

  parts(uploadId: string): PartRow[] {
    return this.stmts.parts.all(uploadId);
  }

  partsAfter(uploadId: string, after: number, limit: number): PartRow[] {
    return this.stmts.partsAfter.all(uploadId, after, limit);
  }

  /**
   * In the completion's commit step, before the object row changes: the upload is still there
   * with the same part blobs, and goes. Returns the part blobs to unlink.
   */
  completeInStep(ref: UploadRef, used: ReadonlyArray<{ partNumber: number; blob: string }>): string[] {
    const upload = this.requireUpload(ref);
    for (const part of used) {
      if (this.stmts.part.get(upload.upload_id, part.partNumber)?.blob !== part.blob) {
        throw partReplaced(part.partNumber);
      }
    }
    return this.removeRows(upload.upload_id);
  }

  /** In a step: removes an upload and its part rows; returns the part blobs to unlink. NoSuchUpload. */
  remove(ref: UploadRef): string[] {
    return this.removeRows(this.requireUpload(ref).upload_id);
  }

  /** In a step: like remove, for the age sweep: an upload that is already gone removes nothing. */
  removeById(uploadId: string): string[] {
    return this.stmts.upload.get(uploadId) ? this.removeRows(uploadId) : [];
  }

  initiatedBefore(time: number, limit: number): string[] {
    return this.stmts.initiatedBefore.all(time, limit).map((row) => row.upload_id);
  }

  isBlobReferenced(id: string): boolean {
    return this.stmts.blobReferenced.get(id) !== undefined;
  }

  /**
   * Uploads of a bucket in listing order from `from`, read lazily. Seeking just after the key
   * marker with an upload id marker continues within that key, after that upload.
   */
  seek(
    bucket: string,
    from: SeekFrom,
    marker?: { key: string; uploadId: string },
  ): IterableIterator<UploadRow> {
    if (from.inclusive) return this.stmts.uploadsFrom.iterate(bucket, from.key);
    if (marker && marker.key === from.key) {
      return this.stmts.uploadsAfterUpload.iterate(bucket, marker.key, marker.uploadId);
    }
    return this.stmts.uploadsAfterKey.iterate(bucket, from.key);
  }

  private removeRows(uploadId: string): string[] {
    const blobs = this.stmts.parts.all(uploadId).map((part) => part.blob);
    this.stmts.deleteParts.run(uploadId);
    this.stmts.deleteUpload.run(uploadId);
    return blobs;
  }
}

export function toUpload(row: UploadRow): MultipartUpload {
  return {
    uploadId: row.upload_id,
    bucket: row.bucket,
    key: row.key,
    metadata: JSON.parse(row.metadata) as ObjectMetadata,
    token: row.token,
    leaseId: row.lease_id,
    ...(row.transaction_id ? { transactionId: row.transaction_id } : {}),
    initiator: row.initiator,
    initiated: new Date(row.initiated),
  };
}
