import { DomainError } from "../../core/errors.js";
import type { FenceState, NextState } from "../../fence/commit-port.js";
import type { EmbeddedDb } from "../../sqlite/db.js";
import { noSuchBucket, noSuchKey } from "../backend-errors.js";
import type { SeekFrom } from "../list-helper.js";
import type { Checksums, ObjectMetadata, WriteState } from "../storage-backend.js";

/**
 * Object and bucket metadata of the fs backend in the shared SQLite database (tables
 * prefixed `fs_`). Every method is synchronous. The commit methods run inside a step of the
 * database's domain (FsBackend calls them through EmbeddedDomain.run): the HCT rule, the write
 * conditions, FencedCommit.atomic and the row change are then one transaction.
 *
 * A row outlives its object as a tombstone (deleted = 1) when it carries an HCT, and rows are
 * keyed by bucket name without a foreign key, so an HCT survives deletes, bucket deletion and
 * re-creation, and restarts (contract rule 2).
 */

const SCHEMA = `
CREATE TABLE IF NOT EXISTS fs_buckets (
  name TEXT PRIMARY KEY,
  created_at INTEGER NOT NULL,
  location TEXT
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS fs_objects (
  bucket TEXT NOT NULL,
  key TEXT NOT NULL,
  blob TEXT,
  size INTEGER NOT NULL DEFAULT 0,
  etag TEXT,
  last_modified INTEGER,
  metadata TEXT,
  hct INTEGER,
  deleted INTEGER NOT NULL DEFAULT 0,
  inline_id INTEGER,
  PRIMARY KEY (bucket, key)
) WITHOUT ROWID;

-- Bodies of small objects (up to the backend's inline threshold), kept with their row instead of
-- in a blob file: one durable step per write. A rowid table, so that the bodies' pages do not
-- widen the fs_objects b-tree; fs_objects.inline_id points here.
CREATE TABLE IF NOT EXISTS fs_bodies (
  id INTEGER PRIMARY KEY,
  data BLOB NOT NULL
);

-- Listings and the BucketNotEmpty check read live rows only, from this index alone (it covers
-- the listed columns), however many tombstones a bucket has collected.
CREATE INDEX IF NOT EXISTS fs_objects_live ON fs_objects (bucket, key, size, etag, last_modified)
  WHERE deleted = 0;
-- The startup sweep asks, for each blob file, whether a row references it.
CREATE UNIQUE INDEX IF NOT EXISTS fs_objects_blob ON fs_objects (blob) WHERE blob IS NOT NULL;
`;

export type ObjectRow = {
  bucket: string;
  key: string;
  /** The blob file of a large body; null for an inline body (or no object). */
  blob: string | null;
  size: number;
  etag: string | null;
  last_modified: number | null;
  metadata: string | null;
  hct: number | null;
  deleted: 0 | 1;
  /** The fs_bodies row of an inline body. */
  inline_id: number | null;
};

/** A live object's row: its body is a blob file or an inline body. */
export type LiveRow = ObjectRow & { etag: string; last_modified: number; metadata: string };

/** A live object's row with its inline body, if it has one, read in the same statement. */
type ReadRow = LiveRow & { inline_data: Buffer | null };

type ListRow = { key: string; size: number; etag: string; last_modified: number };

/**
 * The stored form of an object's metadata (the `metadata` column, JSON); `upload`: the multipart
 * upload whose completion made the object.
 */
export type StoredMetadata = ObjectMetadata & { checksums?: Checksums; upload?: string };

/** Where a committed body is: a blob file, or the bytes themselves (stored in fs_bodies). */
export type BodyRef = { blob: string; inline?: undefined } | { inline: Buffer; blob?: undefined };

/**
 * A version staged for a commit: its body (a blob file, or bytes for an inline row) and its row.
 * `inStep`: the backend's own checks and changes in the commit's step (a completion's upload).
 */
export type FsVersion = {
  body: BodyRef;
  size: number;
  etag: string;
  lastModified: number;
  metadata: StoredMetadata;
  inStep?: () => void;
};

/** An object's row joined with its bucket: one read answers NoSuchBucket and the object's state. */
type StateRow = { bucket_name: string } & Partial<ObjectRow>;

export class FsMetadataStore {
  private readonly stmts;

  constructor(db: EmbeddedDb) {
    db.exec(SCHEMA);
    migrate(db);
    this.stmts = {
      bucket: db.prepare<[string], { name: string; created_at: number }>(
        "SELECT name, created_at FROM fs_buckets WHERE name = ?",
      ),
      buckets: db.prepare<[], { name: string; created_at: number }>(
        "SELECT name, created_at FROM fs_buckets ORDER BY name",
      ),
      insertBucket: db.prepare(
        "INSERT OR IGNORE INTO fs_buckets (name, created_at, location) VALUES (?, ?, ?)",
      ),
      bucketLocation: db.prepare<[string], { location: string | null }>(
        "SELECT location FROM fs_buckets WHERE name = ?",
      ),
      deleteBucket: db.prepare("DELETE FROM fs_buckets WHERE name = ?"),
      anyLive: db.prepare<[string], { one: number }>(
        "SELECT 1 AS one FROM fs_objects INDEXED BY fs_objects_live WHERE bucket = ? AND deleted = 0 LIMIT 1",
      ),
      row: db.prepare<[string, string], ObjectRow>("SELECT * FROM fs_objects WHERE bucket = ? AND key = ?"),
      state: db.prepare<{ bucket: string; key: string }, StateRow>(
        `SELECT b.name AS bucket_name, o.* FROM fs_buckets b
         LEFT JOIN fs_objects o ON o.bucket = b.name AND o.key = @key WHERE b.name = @bucket`,
      ),
      // The GET read: the row, its bucket and its inline body in one statement.
      read: db.prepare<{ bucket: string; key: string }, StateRow & { inline_data: Buffer | null }>(
        `SELECT b.name AS bucket_name, o.*, d.data AS inline_data FROM fs_buckets b
         LEFT JOIN fs_objects o ON o.bucket = b.name AND o.key = @key
         LEFT JOIN fs_bodies d ON d.id = o.inline_id
         WHERE b.name = @bucket`,
      ),
      upsertLive: db.prepare(
        `INSERT INTO fs_objects (bucket, key, blob, inline_id, size, etag, last_modified, metadata, hct, deleted)
         VALUES (@bucket, @key, @blob, @inlineId, @size, @etag, @lastModified, @metadata, @hct, 0)
         ON CONFLICT (bucket, key) DO UPDATE SET blob = excluded.blob, inline_id = excluded.inline_id,
           size = excluded.size, etag = excluded.etag, last_modified = excluded.last_modified,
           metadata = excluded.metadata, hct = excluded.hct, deleted = 0`,
      ),
      upsertTombstone: db.prepare(
        `INSERT INTO fs_objects (bucket, key, blob, inline_id, size, etag, last_modified, metadata, hct, deleted)
         VALUES (@bucket, @key, NULL, NULL, 0, NULL, @lastModified, NULL, @hct, 1)
         ON CONFLICT (bucket, key) DO UPDATE SET blob = NULL, inline_id = NULL, size = 0, etag = NULL,
           last_modified = excluded.last_modified, metadata = NULL, hct = excluded.hct, deleted = 1`,
      ),
      insertBody: db.prepare<[Buffer]>("INSERT INTO fs_bodies (data) VALUES (?)"),
      deleteBody: db.prepare<[number]>("DELETE FROM fs_bodies WHERE id = ?"),
      raiseHct: db.prepare("UPDATE fs_objects SET hct = @hct WHERE bucket = @bucket AND key = @key"),
      deleteRow: db.prepare("DELETE FROM fs_objects WHERE bucket = ? AND key = ?"),
      blobReferenced: db.prepare<[string], { one: number }>("SELECT 1 AS one FROM fs_objects WHERE blob = ?"),
      listFrom: db.prepare<[string, string], ListRow>(
        `SELECT key, size, etag, last_modified FROM fs_objects INDEXED BY fs_objects_live
         WHERE bucket = ? AND deleted = 0 AND key >= ? ORDER BY key`,
      ),
      listAfter: db.prepare<[string, string], ListRow>(
        `SELECT key, size, etag, last_modified FROM fs_objects INDEXED BY fs_objects_live
         WHERE bucket = ? AND deleted = 0 AND key > ? ORDER BY key`,
      ),
    };
  }

  bucket(name: string): { name: string; creationDate: Date } | null {
    const row = this.stmts.bucket.get(name);
    return row ? { name: row.name, creationDate: new Date(row.created_at) } : null;
  }

  requireBucket(name: string): { name: string; creationDate: Date } {
    const bucket = this.bucket(name);
    if (!bucket) throw noSuchBucket(name);
    return bucket;
  }

  buckets(): { name: string; creationDate: Date }[] {
    return this.stmts.buckets
      .all()
      .map((row) => ({ name: row.name, creationDate: new Date(row.created_at) }));
  }

  /** False when the bucket already exists. */
  createBucket(name: string, now: number, location = ""): boolean {
    return this.stmts.insertBucket.run(name, now, location === "" ? null : location).changes === 1;
  }

  /** The bucket's LocationConstraint, "" for none; NoSuchBucket. */
  bucketLocation(name: string): string {
    const row = this.stmts.bucketLocation.get(name);
    if (!row) throw noSuchBucket(name);
    return row.location ?? "";
  }

  /** In a step: NoSuchBucket, BucketNotEmpty (tombstones do not count). */
  deleteBucket(name: string): void {
    this.requireBucket(name);
    if (this.stmts.anyLive.get(name)) {
      throw new DomainError("BucketNotEmpty", "the bucket you tried to delete is not empty", {
        bucket: name,
      });
    }
    this.stmts.deleteBucket.run(name);
  }

  /** The row of a live object; NoSuchBucket / NoSuchKey otherwise. */
  liveRow(bucket: string, key: string): LiveRow {
    const row = this.current(bucket, key);
    if (!isLive(row)) throw noSuchKey(bucket, key);
    return row as LiveRow;
  }

  /** A live object's row with its inline body (null for a blob file), in one read. */
  readRow(bucket: string, key: string): ReadRow {
    const row = this.stmts.read.get({ bucket, key });
    if (!row) throw noSuchBucket(bucket);
    if (row.key === null || row.key === undefined || row.deleted !== 0) throw noSuchKey(bucket, key);
    return row as ReadRow;
  }

  /** A live object's row, or null (whatever the bucket). */
  currentLive(bucket: string, key: string): LiveRow | null {
    const row = this.stmts.row.get(bucket, key);
    return isLive(row) ? (row as LiveRow) : null;
  }

  /** The blob a live object currently points at, or null. */
  currentBlob(bucket: string, key: string): string | null {
    return liveBlob(this.stmts.row.get(bucket, key));
  }

  highestToken(bucket: string, key: string): number | null {
    return this.stmts.row.get(bucket, key)?.hct ?? null;
  }

  /** The object's HCT and live ETag, with its bucket, in one read. NoSuchBucket. */
  writeState(bucket: string, key: string): WriteState {
    const row = this.current(bucket, key);
    return { highestToken: row?.hct ?? null, etag: isLive(row) ? row.etag : null };
  }

  /**
   * In a step: the object's current row (undefined when there is none) after one read that also
   * checks the bucket exists (NoSuchBucket), so that a bucket deleted since the write began is
   * never written into.
   */
  current(bucket: string, key: string): ObjectRow | undefined {
    const row = this.stmts.state.get({ bucket, key });
    if (!row) throw noSuchBucket(bucket);
    return row.key === null || row.key === undefined ? undefined : (row as ObjectRow);
  }

  /**
   * In a step: the object's row and its fencing state. With `write`, one read that also checks
   * the bucket exists (NoSuchBucket), so that a bucket deleted since the write began is never
   * written into; without (an HCT raise), the row whatever the bucket.
   */
  stateOf(bucket: string, key: string, write: boolean): { row: ObjectRow | undefined; state: FenceState } {
    const row = write ? this.current(bucket, key) : this.stmts.row.get(bucket, key);
    return {
      row,
      state: {
        hct: row?.hct ?? null,
        etag: isLive(row) ? row.etag : null,
        deleted: row?.deleted === 1,
        stored: row !== undefined,
        writes: [],
      },
    };
  }

  /**
   * In a step: makes the object what `next` says, over `row` (as stateOf read it). Returns the
   * blob file the change replaced, which the caller unlinks after the step.
   */
  apply(
    bucket: string,
    key: string,
    row: ObjectRow | undefined,
    next: NextState<FsVersion>,
    now: number,
  ): string | null {
    if (next.kind === "keep") {
      if (row) this.stmts.raiseHct.run({ bucket, key, hct: next.hct });
      else this.stmts.upsertTombstone.run({ bucket, key, lastModified: now, hct: next.hct });
      return null;
    }
    this.dropInlineBody(row);
    if (next.kind === "delete") {
      // The HCT outlives the object: a tombstone, even when there was nothing to delete.
      if (next.hct !== null) {
        this.stmts.upsertTombstone.run({ bucket, key, lastModified: now, hct: next.hct });
      } else if (row) {
        this.stmts.deleteRow.run(bucket, key);
      }
      return liveBlob(row);
    }
    const v = next.version;
    const inlineId =
      v.body.inline === undefined ? null : Number(this.stmts.insertBody.run(v.body.inline).lastInsertRowid);
    this.stmts.upsertLive.run({
      bucket,
      key,
      blob: v.body.blob ?? null,
      inlineId,
      size: v.size,
      etag: v.etag,
      lastModified: v.lastModified,
      metadata: JSON.stringify(v.metadata),
      hct: next.hct,
    });
    return liveBlob(row);
  }

  /** In a step, before a row stops pointing at its inline body: the body goes with it. */
  private dropInlineBody(row: ObjectRow | undefined): void {
    if (row?.inline_id !== null && row?.inline_id !== undefined) this.stmts.deleteBody.run(row.inline_id);
  }

  isBlobReferenced(id: string): boolean {
    return this.stmts.blobReferenced.get(id) !== undefined;
  }

  /** Live rows of a bucket in key order (UTF-8 byte order: SQLite's BINARY collation), read lazily. */
  seek(bucket: string, from: SeekFrom): IterableIterator<ListRow> {
    return (from.inclusive ? this.stmts.listFrom : this.stmts.listAfter).iterate(bucket, from.key);
  }
}

/**
 * Data directories written before inline bodies existed: their fs_objects has no inline_id
 * column yet. Adding it keeps every row (all of them blob files) as it is.
 */
function migrate(db: EmbeddedDb): void {
  const columns = db.prepare<[], { name: string }>("PRAGMA table_info(fs_objects)").all();
  if (!columns.some((c) => c.name === "inline_id"))
    db.exec("ALTER TABLE fs_objects ADD COLUMN inline_id INTEGER");
  const bucketColumns = db.prepare<[], { name: string }>("PRAGMA table_info(fs_buckets)").all();
  if (!bucketColumns.some((c) => c.name === "location"))
    db.exec("ALTER TABLE fs_buckets ADD COLUMN location TEXT");
}

const isLive = (row: ObjectRow | undefined): row is ObjectRow => row !== undefined && row.deleted === 0;

const liveBlob = (row: ObjectRow | undefined): string | null => (isLive(row) ? row.blob : null);
