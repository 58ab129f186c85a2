import { randomBytes } from "node:crypto";
import { type Clock, systemClock } from "../../core/clock.js";
import { DomainError } from "../../core/errors.js";
import { prefixUpperBound } from "../../core/prefix-range.js";
import type { EmbeddedDb } from "../../embedded/db.js";
import { overlaps, resourceOf } from "../lease-rules.js";
import type {
  AcquireInput,
  AcquireResult,
  LeaseEventHook,
  LeaseRecord,
  LeaseResource,
  LeaseStore,
} from "../lease-store.js";
import { createRetentionSweep } from "./retention.js";
import { ACTIVE_SQL, isActiveRow, LEASE_COLUMNS, type LeaseRow, rowResource, toLeaseRecord } from "./rows.js";
import { migrateLeaseTables } from "./schema.js";

export type EmbeddedLeaseStoreOptions = {
  /** The shared state database (src/embedded/db.ts); not closed by the store. */
  db: EmbeddedDb;
  clock?: Clock;
  /** How long an ended lease stays answerable by get/findNewerOverlapping. Default 24h. */
  retainMs?: number;
  /** Minimum interval between retention sweeps, run opportunistically. Default 1 min. */
  sweepEveryMs?: number;
};

export type EmbeddedLeaseStore = LeaseStore & {
  /** Forgets ended leases older than retainMs now; returns how many. Runs by itself too. */
  sweep(): number;
};

const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * The lease store kept in the gateway's own SQLite file. Every operation is one synchronous
 * better-sqlite3 transaction, so operations are serialized without locks of our own, and the db
 * is the only state (no cache that could disagree with it after a crash).
 */
export function createEmbeddedLeaseStore({
  db,
  clock = systemClock,
  retainMs = DAY_MS,
  sweepEveryMs = 60_000,
}: EmbeddedLeaseStoreOptions): EmbeddedLeaseStore {
  migrateLeaseTables(db);

  const nextToken = db.prepare<[], { value: number }>(
    "UPDATE lease_counter SET value = value + 1 WHERE id = 1 RETURNING value",
  );
  const insertLease = db.prepare(
    `INSERT INTO lease_leases (lease_id, bucket, key, prefix, owner, token, ttl_ms, acquired_at, expires_at)
     VALUES (@leaseId, @bucket, @key, @prefix, @owner, @token, @ttlMs, @acquiredAt, @expiresAt)`,
  );
  const byId = db.prepare<[string], LeaseRow>(`SELECT ${LEASE_COLUMNS} FROM lease_leases WHERE lease_id = ?`);
  const extend = db.prepare(
    "UPDATE lease_leases SET expires_at = @expiresAt, ttl_ms = @ttlMs WHERE lease_id = @id",
  );
  const markReleased = db.prepare(
    `UPDATE lease_leases SET released_at = @now, ended_at = MIN(@now, expires_at)
     WHERE lease_id = @id`,
  );
  const activeAll = db.prepare<{ now: number }, LeaseRow>(
    `SELECT ${LEASE_COLUMNS} FROM lease_leases WHERE ${ACTIVE_SQL}`,
  );
  const activeInBucket = db.prepare<{ now: number; bucket: string }, LeaseRow>(
    `SELECT ${LEASE_COLUMNS} FROM lease_leases WHERE ${ACTIVE_SQL} AND bucket = @bucket`,
  );
  const reportExpired = db.prepare<{ now: number }, LeaseRow>(
    `UPDATE lease_leases SET expiry_reported = 1, ended_at = expires_at
     WHERE released_at IS NULL AND expiry_reported = 0 AND expires_at <= @now
     RETURNING ${LEASE_COLUMNS}`,
  );
  const selectOne = db.prepare("SELECT 1");

  // Overlap lookups, in two halves: key leases through the key index (exact key, or the key
  // range under a prefix), and the bucket's prefix leases, checked with overlaps(). The SQL only
  // narrows the candidates; overlaps() decides, so the rule lives in one place.
  const statements = new Map<string, ReturnType<EmbeddedDb["prepare"]>>();
  const prepared = (sql: string) => {
    let stmt = statements.get(sql);
    if (!stmt) {
      stmt = db.prepare(sql);
      statements.set(sql, stmt);
    }
    return stmt;
  };

  /** Remembered leases overlapping `resource` that satisfy `where` (binding @now/@token). */
  function overlapping(resource: LeaseResource, where: string, params: { now?: number; token?: number }) {
    const keyPart =
      resource.key !== undefined
        ? { sql: "key = @key", params: { key: resource.key } }
        : keyRange(resource.prefix);
    const keyRows = prepared(
      `SELECT ${LEASE_COLUMNS} FROM lease_leases WHERE bucket = @bucket AND key IS NOT NULL AND ${keyPart.sql} AND ${where}`,
    ).all({ bucket: resource.bucket, ...keyPart.params, ...params }) as LeaseRow[];
    const prefixRows = prepared(
      `SELECT ${LEASE_COLUMNS} FROM lease_leases WHERE bucket = @bucket AND prefix IS NOT NULL AND ${where}`,
    ).all({ bucket: resource.bucket, ...params }) as LeaseRow[];
    return [...keyRows, ...prefixRows]
      .filter((row) => overlaps(rowResource(row), resource))
      .sort((a, b) => a.token - b.token);
  }

  function findActiveOverlapping(resource: LeaseResource, now: number): LeaseRow | undefined {
    return overlapping(resource, ACTIVE_SQL, { now })[0];
  }

  const acquire = db.transaction(
    (input: AcquireInput, now: number, inCommit?: LeaseEventHook): AcquireResult => {
      const held = findActiveOverlapping(input.resource, now);
      if (held) return { granted: false, heldBy: toLeaseRecord(held) };
      const { value: token } = nextToken.get()!;
      const lease: LeaseRecord = {
        leaseId: randomBytes(16).toString("base64url"),
        ...resourceOf(input.resource),
        owner: input.owner,
        token,
        ttlMs: input.ttlMs,
        acquiredAt: now,
        expiresAt: now + input.ttlMs,
      };
      insertLease.run({ ...lease, key: lease.key ?? null, prefix: lease.prefix ?? null });
      inCommit?.(lease);
      return { granted: true, lease };
    },
  );

  const renewTx = db.transaction(
    (leaseId: string, ttlMs: number, now: number, inCommit?: LeaseEventHook): LeaseRecord => {
      const row = byId.get(leaseId);
      if (!row) throw notFound(leaseId);
      if (row.released_at !== null) {
        throw new DomainError("LeaseLost", `lease ${leaseId} was released`, { leaseId, reason: "released" });
      }
      if (!isActiveRow(row, now)) {
        throw new DomainError(
          "LeaseLost",
          `lease ${leaseId} expired at ${new Date(row.expires_at).toISOString()}`,
          {
            leaseId,
            reason: "expired",
          },
        );
      }
      const expiresAt = now + ttlMs;
      extend.run({ id: leaseId, expiresAt, ttlMs });
      const lease = toLeaseRecord({ ...row, expires_at: expiresAt, ttl_ms: ttlMs });
      inCommit?.(lease);
      return lease;
    },
  );

  const releaseTx = db.transaction((leaseId: string, now: number, inCommit?: LeaseEventHook): LeaseRecord => {
    const row = byId.get(leaseId);
    if (!row || row.released_at !== null) throw notFound(leaseId);
    markReleased.run({ id: leaseId, now });
    const lease = toLeaseRecord(byId.get(leaseId)!);
    inCommit?.(lease);
    return lease;
  });

  const collectTx = db.transaction((now: number, inCommit?: LeaseEventHook): LeaseRecord[] => {
    const reported = reportExpired
      .all({ now })
      .sort((a, b) => a.token - b.token)
      .map(toLeaseRecord);
    // Marked reported and audited in one step: an expiry is never reported without its record.
    if (inCommit) for (const lease of reported) inCommit(lease);
    return reported;
  });

  const sweepTx = db.transaction(createRetentionSweep(db, retainMs));

  let lastSweepAt = Number.NEGATIVE_INFINITY;
  let closed = false;

  function open(): number {
    if (closed || !db.open) throw new DomainError("ServiceUnavailable", "the embedded lease store is closed");
    return clock();
  }

  function maybeSweep(now: number): void {
    // A clock that stepped back must not postpone sweeping until it catches up again.
    if (now - lastSweepAt < sweepEveryMs && now >= lastSweepAt) return;
    lastSweepAt = now;
    sweepTx.immediate(now);
  }

  return {
    kind: "embedded",

    async tryAcquire(input, inCommit) {
      const now = open();
      validateAcquire(input);
      maybeSweep(now);
      return acquire.immediate(input, now, inCommit);
    },

    async get(leaseId) {
      open();
      const row = byId.get(leaseId);
      return row ? toLeaseRecord(row) : null;
    },

    async renew(leaseId, ttlMs, inCommit) {
      const now = open();
      validateTtl(ttlMs);
      return renewTx.immediate(leaseId, ttlMs, now, inCommit);
    },

    async release(leaseId, inCommit) {
      const now = open();
      return releaseTx.immediate(leaseId, now, inCommit);
    },

    async list({ bucket, prefix }) {
      const now = open();
      const rows = bucket === undefined ? activeAll.all({ now }) : activeInBucket.all({ now, bucket });
      return rows
        .filter((row) => prefix === undefined || (row.key ?? row.prefix ?? "").startsWith(prefix))
        .sort((a, b) => a.token - b.token)
        .map(toLeaseRecord);
    },

    async findActiveCovering(bucket, key) {
      const now = open();
      const row = findActiveOverlapping({ bucket, key }, now);
      return row ? toLeaseRecord(row) : null;
    },

    async findNewerOverlapping(lease) {
      open();
      const row = overlapping(resourceOf(lease), "token > @token", { token: lease.token })[0];
      return row ? toLeaseRecord(row) : null;
    },

    async collectExpired(inCommit) {
      const now = open();
      const reported = collectTx.immediate(now, inCommit);
      maybeSweep(now);
      return reported;
    },

    async ping() {
      open();
      selectOne.get();
    },

    async close() {
      // The db belongs to whoever opened it (it is shared with the backend and the audit log).
      closed = true;
    },

    sweep() {
      const now = open();
      lastSweepAt = now;
      return sweepTx.immediate(now);
    },
  };
}

/** `key` within the range of strings starting with `prefix` (an index range, not LIKE). */
function keyRange(prefix: string): { sql: string; params: Record<string, string> } {
  const upper = prefixUpperBound(prefix);
  return upper === null
    ? { sql: "key >= @lower", params: { lower: prefix } }
    : { sql: "key >= @lower AND key < @upper", params: { lower: prefix, upper } };
}

function notFound(leaseId: string): DomainError {
  return new DomainError(
    "LeaseNotFound",
    `lease ${leaseId} not found (unknown, forgotten, or already released)`,
    {
      leaseId,
    },
  );
}

// The lease API validates its input against configured bounds; these checks only keep a
// malformed call from storing a lease that could never be reasoned about.
function validateAcquire({ resource, ttlMs, owner }: AcquireInput): void {
  validateTtl(ttlMs);
  const hasKey = typeof resource?.key === "string";
  const hasPrefix = typeof resource?.prefix === "string";
  if (typeof resource?.bucket !== "string" || resource.bucket === "" || hasKey === hasPrefix) {
    throw new DomainError("InvalidArgument", "a lease needs a bucket and exactly one of key or prefix");
  }
  if (typeof owner !== "string") throw new DomainError("InvalidArgument", "lease owner must be a string");
}

function validateTtl(ttlMs: number): void {
  if (!Number.isSafeInteger(ttlMs) || ttlMs <= 0) {
    throw new DomainError("InvalidArgument", `ttlMs must be a positive integer, got ${ttlMs}`);
  }
}
