import type { EmbeddedDb } from "../../embedded/db.js";

/**
 * The embedded audit log's table. `seq` (AUTOINCREMENT, so never reused even after deletes) is
 * the commit order; `time_ms` mirrors `time` as an integer for range queries. The db handle is
 * shared with the storage backend and the lease store, hence the `audit_` prefix.
 */
const DDL = `
CREATE TABLE IF NOT EXISTS audit_records (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  time TEXT NOT NULL,
  time_ms INTEGER NOT NULL,
  op TEXT NOT NULL,
  bucket TEXT,
  key TEXT,
  prefix TEXT,
  token INTEGER,
  lease_id TEXT,
  owner TEXT,
  principal TEXT,
  decision TEXT NOT NULL CHECK (decision IN ('accepted', 'rejected')),
  reason TEXT,
  highest_token INTEGER,
  request_id TEXT,
  gateway TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_records_bucket_key ON audit_records (bucket, key, seq);
CREATE INDEX IF NOT EXISTS audit_records_bucket_prefix ON audit_records (bucket, prefix, seq) WHERE prefix IS NOT NULL;
CREATE INDEX IF NOT EXISTS audit_records_lease ON audit_records (lease_id, seq) WHERE lease_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS audit_records_time ON audit_records (time_ms, seq);
`;

export function migrateAuditTables(db: EmbeddedDb): void {
  db.exec(DDL);
}
