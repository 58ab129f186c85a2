import { randomBytes } from "node:crypto";
import { type Clock, systemClock } from "../../core/clock.js";
import { DomainError } from "../../core/errors.js";
import { prefixUpperBound } from "../../core/prefix-range.js";
import { closeEmbeddedDb, type EmbeddedDb, embeddedDomain } from "../../sqlite/db.js";
import { Database } from "../../sqlite/sqlite.js";
import { type AcceptedEvent, eventsOf, expiries, leaseEventDraft, recordAfter } from "../lease-events.js";
import { judgeIntent, leaseNotFound, lostByRelease, newLeaseId, resourceOf } from "../lease-rules.js";
import type {
  AcquireInput,
  AcquireResult,
  BreakResult,
  CommitIntentRef,
  DelegateRecord,
  IntentInput,
  LeaseEvents,
  LeaseReads,
  LeaseRecord,
  LeaseResource,
  LeaseStore,
} from "../lease-store.js";
import { validateAcquire, validateTtl } from "../lease-validation.js";
import { createOverlapQueries } from "./overlap-queries.js";
import { createRetentionSweep } from "./retention.js";
import { ACTIVE_SQL, isActiveRow, LEASE_COLUMNS, type LeaseRow, toLeaseRecord } from "./rows.js";
import { migrateLeaseTables } from "./schema.js";

type EmbeddedLeaseStoreOptions = {
  /**
   * The shared state database (src/sqlite/db.ts); not closed by the store. Default: a database
   * of the store's own in memory (nothing survives the process), closed with the store.
   */
  db?: EmbeddedDb;
  clock?: Clock;
  /** How long an ended lease stays answerable by get/findNewerOverlapping. Default 24h. */
  retainMs?: number;
  /** Minimum interval between retention sweeps, run opportunistically. Default 1 min. */
  sweepEveryMs?: number;
  /**
   * Records the store's lease events: inside each change's step when it shares the store's
   * domain (the embedded audit log on the same database), right after it otherwise.
   */
  events?: LeaseEvents;
};

export type EmbeddedLeaseStore = LeaseStore & {
  /** Forgets ended leases older than retainMs now; returns how many. Runs by itself too. */
  sweep(): number;
};

const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * The lease store kept in the gateway's own SQLite file (or, for tests and single-process setups,
 * in a database in memory: the same rules and answers without durability). Every change is one
 * step of the database's domain (one transaction), so operations are serialized without locks of
 * our own, and the db is the only state (no cache that could disagree with it after a crash). Its
 * synchronous reads (`inDomain`) let the fs backend check a write's lease inside the write's own
 * transaction.
 */
export function createEmbeddedLeaseStore({
  db: given,
  clock = systemClock,
  retainMs = DAY_MS,
  sweepEveryMs = 60_000,
  events,
}: EmbeddedLeaseStoreOptions = {}): EmbeddedLeaseStore {
  const db = given ?? new Database(":memory:");
  migrateLeaseTables(db);
  const domain = embeddedDomain(db);

  const nextToken = db.prepare<[], { value: number }>(
    "UPDATE lease_counter SET value = value + 1 WHERE id = 1 RETURNING value",
  );
  const insertLease = db.prepare(
    `INSERT INTO lease_leases (lease_id, bucket, key, prefix, owner, token, ttl_ms, acquired_at, expires_at, principal)
     VALUES (@leaseId, @bucket, @key, @prefix, @owner, @token, @ttlMs, @acquiredAt, @expiresAt, @principal)`,
  );
  const byId = db.prepare<[string], LeaseRow>(`SELECT ${LEASE_COLUMNS} FROM lease_leases WHERE lease_id = ?`);
  const extend = db.prepare(
    "UPDATE lease_leases SET expires_at = @expiresAt, ttl_ms = @ttlMs WHERE lease_id = @id",
  );
  const markReleased = db.prepare(
    `UPDATE lease_leases SET released_at = @now, broken_at = @brokenAt, ended_at = MIN(@now, expires_at)
     WHERE lease_id = @id`,
  );
  const activeAll = db.prepare<{ now: number }, LeaseRow>(
    `SELECT ${LEASE_COLUMNS} FROM lease_leases WHERE ${ACTIVE_SQL}`,
  );
  const activeInBucket = db.prepare<{ now: number; bucket: string }, LeaseRow>(
    `SELECT ${LEASE_COLUMNS} FROM lease_leases WHERE ${ACTIVE_SQL} AND bucket = @bucket`,
  );
  const reportOne = db.prepare<[string], LeaseRow>(
    `UPDATE lease_leases SET expiry_reported = 1, ended_at = expires_at WHERE lease_id = ?
     RETURNING ${LEASE_COLUMNS}`,
  );
  const reportExpired = db.prepare<{ now: number }, LeaseRow>(
    `UPDATE lease_leases SET expiry_reported = 1, ended_at = expires_at
     WHERE released_at IS NULL AND expiry_reported = 0 AND expires_at <= @now
     RETURNING ${LEASE_COLUMNS}`,
  );
  const selectOne = db.prepare("SELECT 1");
  const lastToken = db.prepare<[], { value: number }>("SELECT value FROM lease_counter WHERE id = 1");
  const insertIntent = db.prepare(
    `INSERT INTO lease_intents (intent_id, lease_id, token, bucket, key, created_at)
     VALUES (@intentId, @leaseId, @token, @bucket, @key, @createdAt)`,
  );
  const deleteIntent = db.prepare("DELETE FROM lease_intents WHERE intent_id = ?");
  const intentsOfKey = db.prepare<{ bucket: string; key: string }, IntentRow>(
    "SELECT intent_id, bucket, key FROM lease_intents WHERE bucket = @bucket AND key = @key",
  );
  const intentsFrom = db.prepare<{ bucket: string; lower: string }, IntentRow>(
    "SELECT intent_id, bucket, key FROM lease_intents WHERE bucket = @bucket AND key >= @lower",
  );
  const intentsIn = db.prepare<{ bucket: string; lower: string; upper: string }, IntentRow>(
    "SELECT intent_id, bucket, key FROM lease_intents WHERE bucket = @bucket AND key >= @lower AND key < @upper",
  );

  /** Intents on objects the resource covers: commits of ended leases that may still land. */
  function intentsUnder(resource: LeaseResource): CommitIntentRef[] {
    let rows: IntentRow[];
    if (resource.key !== undefined) rows = intentsOfKey.all({ bucket: resource.bucket, key: resource.key });
    else {
      const upper = prefixUpperBound(resource.prefix);
      rows =
        upper === null
          ? intentsFrom.all({ bucket: resource.bucket, lower: resource.prefix })
          : intentsIn.all({ bucket: resource.bucket, lower: resource.prefix, upper });
    }
    return rows.map((r) => ({ intentId: r.intent_id, bucket: r.bucket, key: r.key }));
  }

  const firstOverlapping = createOverlapQueries(db);

  type DelegateRow = { delegate_id: string; lease_id: string; created_by: string; created_at: number };
  const insertDelegate = db.prepare(
    `INSERT INTO lease_delegates (delegate_id, lease_id, created_by, created_at, seq)
     VALUES (@delegateId, @leaseId, @createdBy, @createdAt,
             (SELECT COALESCE(MAX(seq), 0) + 1 FROM lease_delegates))`,
  );
  const delegatesOf = db.prepare<[string], DelegateRow>(
    `SELECT d.delegate_id, d.lease_id, d.created_by, d.created_at FROM lease_delegates d
     JOIN lease_leases l ON l.lease_id = d.lease_id WHERE d.lease_id = ? ORDER BY d.seq`,
  );
  const allDelegates = db.prepare<[], DelegateRow>(
    `SELECT d.delegate_id, d.lease_id, d.created_by, d.created_at FROM lease_delegates d
     JOIN lease_leases l ON l.lease_id = d.lease_id ORDER BY d.seq`,
  );
  const deleteDelegate = db.prepare("DELETE FROM lease_delegates WHERE lease_id = ? AND delegate_id = ?");
  const toDelegate = (r: DelegateRow): DelegateRecord => ({
    delegateId: r.delegate_id,
    leaseId: r.lease_id,
    createdBy: r.created_by,
    createdAt: r.created_at,
  });

  function findActiveOverlapping(resource: LeaseResource, now: number): LeaseRow | undefined {
    return firstOverlapping(resource, { kind: "active", now });
  }

  /**
   * Reports the overlapping leases that expired unnoticed: marked ended for good, so that a
   * clock stepped back cannot make them active beside the lease about to be granted.
   */
  const reportLapsed = (resource: LeaseResource, now: number): LeaseRecord[] => {
    const reported: LeaseRecord[] = [];
    for (let row = firstOverlapping(resource, { kind: "lapsed", now }); row; ) {
      reported.push(toLeaseRecord(reportOne.get(row.lease_id)!));
      row = firstOverlapping(resource, { kind: "lapsed", now });
    }
    return reported.sort((a, b) => a.token - b.token);
  };

  const acquire = (input: AcquireInput, now: number): AcquireResult => {
    maybeSweep(now);
    const held = findActiveOverlapping(input.resource, now);
    if (held) return { granted: false, heldBy: toLeaseRecord(held) };
    const intents = intentsUnder(input.resource);
    // Commits in flight under ended leases are fenced before anyone is granted the resource.
    if (intents.length > 0) return { granted: false, fence: { token: nextToken.get()!.value, intents } };
    const expired = reportLapsed(input.resource, now);
    const { value: token } = nextToken.get()!;
    const lease: LeaseRecord = {
      leaseId: newLeaseId(),
      ...resourceOf(input.resource),
      owner: input.owner,
      token,
      ttlMs: input.ttlMs,
      acquiredAt: now,
      expiresAt: now + input.ttlMs,
      ...(input.principal !== undefined ? { principal: input.principal } : {}),
    };
    insertLease.run({
      ...lease,
      key: lease.key ?? null,
      prefix: lease.prefix ?? null,
      principal: lease.principal ?? null,
    });
    return { granted: true, lease, expired };
  };

  const renewTx = (leaseId: string, ttlMs: number, now: number): LeaseRecord => {
    const row = byId.get(leaseId);
    if (!row) throw leaseNotFound(leaseId);
    if (row.released_at !== null) throw lostByRelease(leaseId, row.broken_at !== null);
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
    return toLeaseRecord({ ...row, expires_at: expiresAt, ttl_ms: ttlMs });
  };

  const releaseTx = (leaseId: string, now: number, broken = false): LeaseRecord => {
    const row = byId.get(leaseId);
    if (!row || row.ended_at !== null) throw leaseNotFound(leaseId);
    if (!isActiveRow(row, now)) {
      // Released after it had expired: the lease ended by expiry, and that is what is reported.
      return toLeaseRecord(reportOne.get(leaseId)!);
    }
    markReleased.run({ id: leaseId, now, brokenAt: broken ? now : null });
    return toLeaseRecord(byId.get(leaseId)!);
  };

  const breakTx = (leaseId: string, now: number): BreakResult => {
    const lease = releaseTx(leaseId, now, true);
    const token = nextToken.get()!.value;
    return { lease, fence: { token, intents: intentsUnder(resourceOf(lease)) } };
  };

  const collectTx = (now: number): LeaseRecord[] => {
    const reported = reportExpired.all({ now }).sort((a, b) => a.token - b.token);
    maybeSweep(now);
    return reported.map(toLeaseRecord);
  };

  /**
   * Runs a change as one step with the records of its accepted events: inside the step when the
   * audit log shares the store's domain (a record it cannot take undoes the change, and a crash
   * never leaves a change without its record), right after it otherwise.
   */
  async function change<T>(step: () => T, eventsOfResult: (result: T) => AcceptedEvent[]): Promise<T> {
    const inStep = events?.domain === domain ? events.appendInStep : undefined;
    let after: AcceptedEvent[] = [];
    const result = await domain.run(() => {
      const result = step();
      after = eventsOfResult(result);
      if (inStep) for (const e of after.splice(0)) inStep(leaseEventDraft(e.op, e.lease, e.by));
      return result;
    });
    await recordAfter(events, after);
    return result;
  }

  const sweepTx = createRetentionSweep(db, retainMs, firstOverlapping);

  const reads: LeaseReads = {
    get: (leaseId) => {
      const row = byId.get(leaseId);
      return row ? toLeaseRecord(row) : null;
    },
    findNewerOverlapping: (lease) => {
      const row = firstOverlapping(resourceOf(lease), { kind: "newer", token: lease.token });
      return row ? toLeaseRecord(row) : null;
    },
    findActiveCovering: (bucket, key) => {
      const row = findActiveOverlapping({ bucket, key }, clock());
      return row ? toLeaseRecord(row) : null;
    },
  };

  const beginTx = (intent: IntentInput, now: number) => {
    judgeIntent(intent, now, reads);
    const intentId = randomBytes(12).toString("base64url");
    insertIntent.run({
      intentId,
      leaseId: intent.kind === "fenced" ? intent.leaseId : null,
      token: intent.kind === "fenced" ? intent.token : null,
      bucket: intent.bucket,
      key: intent.key,
      createdAt: now,
    });
    return { intentId, ceiling: lastToken.get()!.value };
  };

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
    sweepTx(now);
  }

  return {
    kind: "embedded",
    domain,
    inDomain: reads,

    async tryAcquire(input, by) {
      const now = open();
      validateAcquire(input);
      return change(
        () => acquire(input, now),
        (r) => (r.granted ? eventsOf("LeaseAcquired", r.lease, by, r.expired) : []),
      );
    },

    async get(leaseId) {
      open();
      const row = byId.get(leaseId);
      return row ? toLeaseRecord(row) : null;
    },

    async renew(leaseId, ttlMs, by) {
      const now = open();
      validateTtl(ttlMs);
      return change(
        () => renewTx(leaseId, ttlMs, now),
        (l) => eventsOf("LeaseRenewed", l, by),
      );
    },

    async release(leaseId, by) {
      const now = open();
      return change(
        () => releaseTx(leaseId, now),
        (l) => eventsOf("LeaseReleased", l, by),
      );
    },

    async breakLease(leaseId, by) {
      const now = open();
      return change(
        () => breakTx(leaseId, now),
        (r) => eventsOf("LeaseBroken", r.lease, by),
      );
    },

    async addDelegate(delegate) {
      open();
      await domain.run(() => {
        if (!byId.get(delegate.leaseId)) throw leaseNotFound(delegate.leaseId);
        insertDelegate.run(delegate);
      });
    },

    async listDelegates(leaseId) {
      open();
      return (leaseId === undefined ? allDelegates.all() : delegatesOf.all(leaseId)).map(toDelegate);
    },

    async removeDelegate(leaseId, delegateId) {
      open();
      return domain.run(() => deleteDelegate.run(leaseId, delegateId).changes > 0);
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
      open();
      return reads.findActiveCovering(bucket, key);
    },

    async findNewerOverlapping(lease) {
      open();
      return reads.findNewerOverlapping(lease);
    },

    async collectExpired() {
      const now = open();
      return change(() => collectTx(now), expiries);
    },

    async beginCommit(intent) {
      const now = open();
      return domain.run(() => beginTx(intent, now));
    },

    async endCommit(intentId) {
      open();
      await domain.run(() => deleteIntent.run(intentId));
    },

    async intentsUnder(resource) {
      open();
      return intentsUnder(resource);
    },

    async clearIntents(intentIds) {
      open();
      await domain.run(() => {
        for (const id of intentIds) deleteIntent.run(id);
      });
    },

    async ping() {
      open();
      selectOne.get();
    },

    async close() {
      // A given db belongs to whoever opened it (it is shared with the backend and the audit log).
      closed = true;
      if (!given) closeEmbeddedDb(db);
    },

    sweep() {
      const now = open();
      lastSweepAt = now;
      return (db.transaction(sweepTx) as (now: number) => number)(now);
    },
  };
}

type IntentRow = { intent_id: string; bucket: string; key: string };
