import type { EmbeddedDb } from "../../sqlite/db.js";

/**
 * Tables of the embedded lease store. The db handle is shared with the storage backend and the
 * audit log, hence the `lease_` prefix on every name.
 *
 * - lease_counter holds the last token granted. It is bumped in the same transaction that
 *   inserts the lease, so a token is durable (synchronous=FULL) before anyone learns it and is
 *   never handed out twice, even across kill -9.
 * - lease_leases holds every lease the store still remembers. `ended_at` is set when the lease
 *   is seen to end (released, or expiry reported); retention works from it.
 * - lease_intents holds commits in flight against a backend outside this database (see
 *   src/fence/commit.ts): a grant over an object with an intent fences it first.
 */
const DDL = `
CREATE TABLE IF NOT EXISTS lease_counter (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  value INTEGER NOT NULL
);
INSERT OR IGNORE INTO lease_counter (id, value) VALUES (1, 0);

CREATE TABLE IF NOT EXISTS lease_leases (
  lease_id TEXT PRIMARY KEY,
  bucket TEXT NOT NULL,
  key TEXT,
  prefix TEXT,
  owner TEXT NOT NULL,
  token INTEGER NOT NULL UNIQUE,
  ttl_ms INTEGER NOT NULL,
  acquired_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  released_at INTEGER,
  broken_at INTEGER,
  expiry_reported INTEGER NOT NULL DEFAULT 0,
  ended_at INTEGER,
  CHECK ((key IS NULL) <> (prefix IS NULL))
);

-- Overlap lookups never scan every lease of a bucket (see overlap-queries.ts): key leases by key
-- (an exact key, or the key range under a prefix), prefix leases by prefix (each prefix of a key
-- or prefix is one seek, and the prefixes under a prefix are a range). Each twice: every lease
-- with its token (for "a newer overlapping lease"), and the open ones alone (for "an active
-- overlapping lease"), so that a grant does not wade through a day of ended leases.
CREATE INDEX IF NOT EXISTS lease_leases_key ON lease_leases (bucket, key, token) WHERE key IS NOT NULL;
CREATE INDEX IF NOT EXISTS lease_leases_open_key ON lease_leases (bucket, key)
  WHERE key IS NOT NULL AND released_at IS NULL AND expiry_reported = 0;
CREATE INDEX IF NOT EXISTS lease_leases_prefix_path ON lease_leases (bucket, prefix, token) WHERE prefix IS NOT NULL;
CREATE INDEX IF NOT EXISTS lease_leases_open_prefix_path ON lease_leases (bucket, prefix)
  WHERE prefix IS NOT NULL AND released_at IS NULL AND expiry_reported = 0;
-- Replaced by the two prefix_path indexes: they listed a bucket's prefix leases for a scan.
DROP INDEX IF EXISTS lease_leases_prefix;
DROP INDEX IF EXISTS lease_leases_open_prefix;
-- Leases not yet seen to end: active ones, and expired ones still to be reported.
CREATE INDEX IF NOT EXISTS lease_leases_open ON lease_leases (expires_at)
  WHERE released_at IS NULL AND expiry_reported = 0;
CREATE INDEX IF NOT EXISTS lease_leases_ended ON lease_leases (ended_at) WHERE ended_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS lease_intents (
  intent_id TEXT PRIMARY KEY,
  lease_id TEXT,
  token INTEGER,
  bucket TEXT NOT NULL,
  key TEXT NOT NULL,
  created_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS lease_intents_object ON lease_intents (bucket, key);

-- Delegates of leases (LeaseStore.addDelegate); listed only while their lease is remembered.
CREATE TABLE IF NOT EXISTS lease_delegates (
  delegate_id TEXT PRIMARY KEY,
  lease_id TEXT NOT NULL,
  created_by TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  seq INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS lease_delegates_lease ON lease_delegates (lease_id, seq);
`;

export function migrateLeaseTables(db: EmbeddedDb): void {
  db.transaction(() => {
    db.exec(DDL);
    // Added after the first release: the access key that acquired the lease.
    const columns = db.prepare<[], { name: string }>("PRAGMA table_info(lease_leases)").all();
    if (!columns.some((c) => c.name === "principal"))
      db.exec("ALTER TABLE lease_leases ADD COLUMN principal TEXT");
    // Added later: when an administrator broke the lease (leases broken before read as released).
    if (!columns.some((c) => c.name === "broken_at"))
      db.exec("ALTER TABLE lease_leases ADD COLUMN broken_at INTEGER");
    // Defence in depth: the counter can never sit below a token already granted.
    db.prepare(
      "UPDATE lease_counter SET value = MAX(value, (SELECT COALESCE(MAX(token), 0) FROM lease_leases)) WHERE id = 1",
    ).run();
  }).immediate();
}
