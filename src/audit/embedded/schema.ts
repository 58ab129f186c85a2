import type { EmbeddedDb } from "../../sqlite/db.js";

/**
 * The embedded audit log's tables. `seq` (AUTOINCREMENT, so never reused even after deletes) is
 * the commit order; `time_ms` mirrors `time` as an integer for range queries. The db handle is
 * shared with the storage backend and the lease store, hence the `audit_` prefix.
 *
 * Every index ends in seq, so that an equality on its column yields rows in seq order and a
 * page stops after `limit` rows (query-plan.ts). audit_meta holds one fact the planner needs:
 * whether record times have always followed seqs (then a time window is a seq range).
 */
const RECORDS_TABLE = `CREATE TABLE IF NOT EXISTS audit_records (
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
  decision TEXT NOT NULL CHECK (decision IN ('accepted', 'rejected', 'unknown')),
  reason TEXT,
  highest_token INTEGER,
  request_id TEXT,
  gateway TEXT NOT NULL,
  transaction_id TEXT,
  transaction_keys TEXT
);`;

/**
 * Columns added after the first release, each nullable (rows from before read as null):
 * the fenced transaction of a record, and the keys of a transaction's commit or abort (a JSON
 * array of strings, not indexed).
 */
const ADDED_COLUMNS: ReadonlyArray<[name: string, type: string]> = [
  ["transaction_id", "TEXT"],
  ["transaction_keys", "TEXT"],
];

/**
 * Made after ADDED_COLUMNS exist. Partial: records outside a transaction (most of them) cost it
 * nothing.
 */
const ADDED_INDEXES = `
CREATE INDEX IF NOT EXISTS audit_records_transaction ON audit_records (transaction_id, seq)
  WHERE transaction_id IS NOT NULL;
`;

const DDL = `
${RECORDS_TABLE}
CREATE INDEX IF NOT EXISTS audit_records_bucket ON audit_records (bucket, seq) WHERE bucket IS NOT NULL;
CREATE INDEX IF NOT EXISTS audit_records_key ON audit_records (key, seq) WHERE key IS NOT NULL;
CREATE INDEX IF NOT EXISTS audit_records_prefix ON audit_records (prefix, seq) WHERE prefix IS NOT NULL;
CREATE INDEX IF NOT EXISTS audit_records_lease ON audit_records (lease_id, seq) WHERE lease_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS audit_records_op ON audit_records (op, seq);
CREATE INDEX IF NOT EXISTS audit_records_decision ON audit_records (decision, seq);
CREATE INDEX IF NOT EXISTS audit_records_time ON audit_records (time_ms, seq);
-- Replaced by audit_records_key and audit_records_prefix (a key is rarely in two buckets, and
-- a bucket filter is then checked on the key's few rows).
DROP INDEX IF EXISTS audit_records_bucket_key;
DROP INDEX IF EXISTS audit_records_bucket_prefix;

-- The keys of records appended once (AuditLog.appendOnce): a write's outcome, whoever records it.
-- Kept ONCE_KEPT_MS (embedded-audit-log.ts), longer than a write's outcome stays unsettled.
CREATE TABLE IF NOT EXISTS audit_once (
  key TEXT PRIMARY KEY,
  time_ms INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS audit_meta (
  name TEXT PRIMARY KEY,
  value INTEGER NOT NULL
) WITHOUT ROWID;
`;

export function migrateAuditTables(db: EmbeddedDb): void {
  db.transaction(() => {
    allowUnknownDecisions(db);
    db.exec(DDL);
    const columns = new Set(
      db
        .prepare<[], { name: string }>("PRAGMA table_info(audit_records)")
        .all()
        .map((c) => c.name),
    );
    for (const [name, type] of ADDED_COLUMNS) {
      if (!columns.has(name)) db.exec(`ALTER TABLE audit_records ADD COLUMN ${name} ${type}`);
    }
    db.exec(ADDED_INDEXES);
    // Once per data directory (written before audit_meta existed, or new): are the times in
    // seq order? Adjacent pairs suffice: a sequence never steps back iff no step does.
    const known = db.prepare("SELECT value FROM audit_meta WHERE name = 'times_ordered'").get();
    if (!known) {
      const back = db
        .prepare(
          `SELECT 1 FROM (SELECT time_ms, LAG(time_ms) OVER (ORDER BY seq) AS previous FROM audit_records)
           WHERE time_ms < previous LIMIT 1`,
        )
        .get();
      db.prepare("INSERT INTO audit_meta (name, value) VALUES ('times_ordered', ?)").run(back ? 0 : 1);
    }
  }).immediate();
}

/**
 * Data directories written before writes could have an unknown outcome: their audit_records
 * table only allows 'accepted' and 'rejected'. SQLite cannot change a CHECK constraint in place,
 * so the table is rebuilt once with the same rows and seqs (and the AUTOINCREMENT high-water
 * mark, so that a seq is still never reused); the indexes are made again by the DDL. The old
 * table's own columns are copied (it has none of ADDED_COLUMNS: they came later).
 */
function allowUnknownDecisions(db: EmbeddedDb): void {
  const table = db
    .prepare<[], { sql: string }>(
      "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'audit_records'",
    )
    .get();
  if (!table || table.sql.includes("'unknown'")) return;
  const high = db
    .prepare<[], { seq: number }>("SELECT seq FROM sqlite_sequence WHERE name = 'audit_records'")
    .get();
  db.exec(RECORDS_TABLE.replace("audit_records (", "audit_records_next ("));
  const columns = db
    .prepare<[], { name: string }>("PRAGMA table_info(audit_records)")
    .all()
    .map((c) => c.name)
    .join(", ");
  db.exec(`INSERT INTO audit_records_next (${columns}) SELECT ${columns} FROM audit_records`);
  db.exec("DROP TABLE audit_records");
  db.exec("ALTER TABLE audit_records_next RENAME TO audit_records");
  if (high) {
    db.prepare("UPDATE sqlite_sequence SET seq = MAX(seq, ?) WHERE name = 'audit_records'").run(high.seq);
    db.prepare(
      "INSERT INTO sqlite_sequence (name, seq) SELECT 'audit_records', ? WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'audit_records')",
    ).run(high.seq);
  }
}
