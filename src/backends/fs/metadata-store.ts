import { DomainError, StaleTokenError } from "../../core/errors.js";
import type { EmbeddedDb } from "../../embedded/db.js";
import { etagListMatches } from "../etag.js";
import type { SeekFrom } from "../list-helper.js";
import type { CommitHooks, ObjectMetadata, WriteConditions, WriteFence } from "../storage-backend.js";

/**
 * Object and bucket metadata of the fs backend in the shared SQLite database (tables
 * prefixed `fs_`). Every method is synchronous: better-sqlite3 runs a transaction to the end
 * before any other JavaScript runs, so the token check and the commit it guards are one step.
 *
 * A row outlives its object as a tombstone (deleted = 1) when it carries an HCT, and rows are
 * keyed by bucket name without a foreign key, so an HCT survives deletes, bucket deletion and
 * re-creation, and restarts (contract rule 2).
 */

const SCHEMA = `
CREATE TABLE IF NOT EXISTS fs_buckets (
  name TEXT PRIMARY KEY,
  created_at INTEGER NOT NULL
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
  PRIMARY KEY (bucket, key)
) WITHOUT ROWID;

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
  blob: string | null;
  size: number;
  etag: string | null;
  last_modified: number | null;
  metadata: string | null;
  hct: number | null;
  deleted: 0 | 1;
};

/** A live object's row. */
export type LiveRow = ObjectRow & { blob: string; etag: string; last_modified: number; metadata: string };

export type ListRow = { key: string; size: number; etag: string; last_modified: number };

export type CommitPutInput = {
  bucket: string;
  key: string;
  blob: string;
  size: number;
  etag: string;
  lastModified: number;
  metadata: ObjectMetadata;
  fence: WriteFence;
  conditions?: WriteConditions;
  /** Runs inside the transaction after the row update (the audit record joins the commit). */
  inCommit?: CommitHooks["inCommit"];
};

export type CommitResult = {
  /** The blob the commit replaced or deleted; the caller unlinks it. */
  replacedBlob: string | null;
  existed: boolean;
  highestToken: number | null;
};

export class FsMetadataStore {
  private readonly stmts;
  private readonly commitPutTx: (input: CommitPutInput) => CommitResult;
  private readonly commitDeleteTx: (
    bucket: string,
    key: string,
    fence: WriteFence,
    now: number,
    inCommit?: CommitHooks["inCommit"],
  ) => CommitResult;
  private readonly deleteBucketTx: (name: string) => void;

  constructor(db: EmbeddedDb) {
    db.exec(SCHEMA);
    this.stmts = {
      bucket: db.prepare<[string], { name: string; created_at: number }>(
        "SELECT name, created_at FROM fs_buckets WHERE name = ?",
      ),
      buckets: db.prepare<[], { name: string; created_at: number }>(
        "SELECT name, created_at FROM fs_buckets ORDER BY name",
      ),
      insertBucket: db.prepare("INSERT OR IGNORE INTO fs_buckets (name, created_at) VALUES (?, ?)"),
      deleteBucket: db.prepare("DELETE FROM fs_buckets WHERE name = ?"),
      anyLive: db.prepare<[string], { one: number }>(
        "SELECT 1 AS one FROM fs_objects INDEXED BY fs_objects_live WHERE bucket = ? AND deleted = 0 LIMIT 1",
      ),
      row: db.prepare<[string, string], ObjectRow>("SELECT * FROM fs_objects WHERE bucket = ? AND key = ?"),
      upsertLive: db.prepare(
        `INSERT INTO fs_objects (bucket, key, blob, size, etag, last_modified, metadata, hct, deleted)
         VALUES (@bucket, @key, @blob, @size, @etag, @lastModified, @metadata, @hct, 0)
         ON CONFLICT (bucket, key) DO UPDATE SET blob = excluded.blob, size = excluded.size,
           etag = excluded.etag, last_modified = excluded.last_modified, metadata = excluded.metadata,
           hct = excluded.hct, deleted = 0`,
      ),
      upsertTombstone: db.prepare(
        `INSERT INTO fs_objects (bucket, key, blob, size, etag, last_modified, metadata, hct, deleted)
         VALUES (@bucket, @key, NULL, 0, NULL, @lastModified, NULL, @hct, 1)
         ON CONFLICT (bucket, key) DO UPDATE SET blob = NULL, size = 0, etag = NULL,
           last_modified = excluded.last_modified, metadata = NULL, hct = excluded.hct, deleted = 1`,
      ),
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

    this.commitPutTx = db.transaction((input: CommitPutInput): CommitResult => {
      const row = this.checkWrite(input.bucket, input.key, input.fence, input.conditions);
      const highestToken = nextHighestToken(row, input.fence);
      this.stmts.upsertLive.run({
        bucket: input.bucket,
        key: input.key,
        blob: input.blob,
        size: input.size,
        etag: input.etag,
        lastModified: input.lastModified,
        metadata: JSON.stringify(input.metadata),
        hct: highestToken,
      });
      input.inCommit?.({ highestToken });
      return { replacedBlob: liveBlob(row), existed: isLive(row), highestToken };
    });

    this.commitDeleteTx = db.transaction(
      (bucket: string, key: string, fence: WriteFence, now: number, inCommit?: CommitHooks["inCommit"]) => {
        const row = this.checkWrite(bucket, key, fence);
        const highestToken = nextHighestToken(row, fence);
        if (highestToken !== null) {
          // A fenced delete records its token even when there was nothing to delete.
          this.stmts.upsertTombstone.run({ bucket, key, lastModified: now, hct: highestToken });
        } else if (row) {
          this.stmts.deleteRow.run(bucket, key);
        }
        inCommit?.({ highestToken });
        return { replacedBlob: liveBlob(row), existed: isLive(row), highestToken };
      },
    );

    this.deleteBucketTx = db.transaction((name: string) => {
      this.requireBucket(name);
      if (this.stmts.anyLive.get(name)) {
        throw new DomainError("BucketNotEmpty", "the bucket you tried to delete is not empty", {
          bucket: name,
        });
      }
      this.stmts.deleteBucket.run(name);
    });
  }

  bucket(name: string): { name: string; creationDate: Date } | null {
    const row = this.stmts.bucket.get(name);
    return row ? { name: row.name, creationDate: new Date(row.created_at) } : null;
  }

  requireBucket(name: string): { name: string; creationDate: Date } {
    const bucket = this.bucket(name);
    if (!bucket)
      throw new DomainError("NoSuchBucket", "the specified bucket does not exist", { bucket: name });
    return bucket;
  }

  buckets(): { name: string; creationDate: Date }[] {
    return this.stmts.buckets
      .all()
      .map((row) => ({ name: row.name, creationDate: new Date(row.created_at) }));
  }

  /** False when the bucket already exists. */
  createBucket(name: string, now: number): boolean {
    return this.stmts.insertBucket.run(name, now).changes === 1;
  }

  deleteBucket(name: string): void {
    this.deleteBucketTx(name);
  }

  /** The row of a live object; NoSuchBucket / NoSuchKey otherwise. */
  liveRow(bucket: string, key: string): LiveRow {
    this.requireBucket(bucket);
    const row = this.stmts.row.get(bucket, key);
    if (!row || row.deleted) {
      throw new DomainError("NoSuchKey", "the specified key does not exist", { bucket, key });
    }
    return row as LiveRow;
  }

  /** The blob a live object currently points at, or null. */
  currentBlob(bucket: string, key: string): string | null {
    return liveBlob(this.stmts.row.get(bucket, key));
  }

  highestToken(bucket: string, key: string): number | null {
    return this.stmts.row.get(bucket, key)?.hct ?? null;
  }

  /**
   * Throws what the commit of this write would throw (NoSuchBucket, StaleTokenError,
   * PreconditionFailed) and returns the current row. Used inside the commit transaction, and
   * before a body is received so that a doomed write is refused early.
   */
  checkWrite(
    bucket: string,
    key: string,
    fence: WriteFence,
    conditions?: WriteConditions,
  ): ObjectRow | undefined {
    this.requireBucket(bucket);
    const row = this.stmts.row.get(bucket, key);
    if (fence && row?.hct != null && fence.token < row.hct) throw new StaleTokenError(fence.token, row.hct);
    const live = isLive(row) ? row : undefined;
    if (conditions?.ifMatch !== undefined && !(live && etagListMatches(conditions.ifMatch, live.etag))) {
      throw new DomainError(
        "PreconditionFailed",
        "At least one of the pre-conditions you specified did not hold",
        {
          condition: "If-Match",
        },
      );
    }
    if (conditions?.ifNoneMatch !== undefined && live && etagListMatches(conditions.ifNoneMatch, live.etag)) {
      throw new DomainError(
        "PreconditionFailed",
        "At least one of the pre-conditions you specified did not hold",
        {
          condition: "If-None-Match",
        },
      );
    }
    return row;
  }

  commitPut(input: CommitPutInput): CommitResult {
    return this.commitPutTx(input);
  }

  commitDelete(
    bucket: string,
    key: string,
    fence: WriteFence,
    now: number,
    inCommit?: CommitHooks["inCommit"],
  ): CommitResult {
    return this.commitDeleteTx(bucket, key, fence, now, inCommit);
  }

  isBlobReferenced(id: string): boolean {
    return this.stmts.blobReferenced.get(id) !== undefined;
  }

  /** Live rows of a bucket in key order (UTF-8 byte order: SQLite's BINARY collation), read lazily. */
  seek(bucket: string, from: SeekFrom): IterableIterator<ListRow> {
    return (from.inclusive ? this.stmts.listFrom : this.stmts.listAfter).iterate(bucket, from.key);
  }
}

const isLive = (row: ObjectRow | undefined): row is ObjectRow => row !== undefined && row.deleted === 0;

const liveBlob = (row: ObjectRow | undefined): string | null => (isLive(row) ? row.blob : null);

/** HCT := max(HCT, token) for a fenced write; an unfenced write leaves it as it is. */
function nextHighestToken(row: ObjectRow | undefined, fence: WriteFence): number | null {
  const current = row?.hct ?? null;
  if (!fence) return current;
  return current === null ? fence.token : Math.max(current, fence.token);
}
