import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { AuditDraft, AuditQuery, AuditRecord } from "../../../src/audit/audit-log.js";
import {
  createEmbeddedAuditLog,
  type EmbeddedAuditLog,
} from "../../../src/audit/embedded/embedded-audit-log.js";
import { fakeClock } from "../../../src/core/clock.js";
import { type EmbeddedDb, openEmbeddedDb } from "../../../src/sqlite/db.js";
import { tempDir } from "../../support/temp.js";
import { draft } from "../audit-log.contract.js";

/** A small deterministic generator, so that a failure can be replayed. */
function seeded(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const BUCKETS = ["b", "logs", "rare"];
const KEYS = ["a", "a/1", "a/2", "a%b", "a_c", "logs/x", "logs/y/z", "z"];
const PREFIXES = ["", "a", "a/", "logs/", "logs/y", "q"];
const OPS = ["PutObject", "DeleteObject", "LeaseAcquired", "LeaseReleased", "LeaseExpired"];

/** What a query answers, by definition: every filter, commit order, cursor after the last seq. */
function expected(records: AuditRecord[], q: Omit<AuditQuery, "limit" | "cursor">): AuditRecord[] {
  const since = q.since === undefined ? undefined : Date.parse(q.since);
  const until = q.until === undefined ? undefined : Date.parse(q.until);
  return records.filter(
    (r) =>
      (q.bucket === undefined || r.bucket === q.bucket) &&
      (q.key === undefined || r.key === q.key) &&
      (q.leaseId === undefined || r.leaseId === q.leaseId) &&
      (q.decision === undefined || r.decision === q.decision) &&
      (q.op === undefined || r.op === q.op) &&
      (q.transactionId === undefined || r.transactionId === q.transactionId) &&
      (!q.prefix || (r.key ?? "").startsWith(q.prefix) || r.prefix?.startsWith(q.prefix)) &&
      (since === undefined || Date.parse(r.time) >= since) &&
      (until === undefined || Date.parse(r.time) < until),
  );
}

describe("embedded audit queries agree with their definition on every plan", () => {
  // A cap of 1 makes every filter "unselective" (the table in seq order); 40 mixes the paths;
  // the default makes every filter of this small log selective (its index drives).
  for (const cap of [1, 40, undefined]) {
    for (const stepsBack of [false, true]) {
      it(`cap ${cap ?? "default"}, ${stepsBack ? "a clock that steps back" : "times in seq order"}`, async () => {
        const dir = tempDir("fencegate-audit-model-");
        const db = openEmbeddedDb({ dataDir: dir.path });
        try {
          const clock = fakeClock();
          const log = createEmbeddedAuditLog({
            db,
            gatewayId: "gw",
            clock,
            ...(cap ? { planCountCap: cap } : {}),
          });
          const random = seeded(cap ?? 7);
          const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
          const drafts: AuditDraft[] = [];
          for (let i = 0; i < 600; i++) {
            const lease = random() < 0.3;
            const prefixLease = lease && random() < 0.5;
            drafts.push(
              draft({
                op: lease ? pick(OPS.slice(2)) : pick(OPS.slice(0, 2)),
                bucket: random() < 0.05 ? null : random() < 0.1 ? "rare" : pick(BUCKETS.slice(0, 2)),
                key: prefixLease ? null : random() < 0.05 ? null : pick(KEYS),
                prefix: prefixLease ? pick(PREFIXES) : null,
                leaseId: random() < 0.2 ? null : `L${Math.floor(random() * 30)}`,
                decision: random() < 0.1 ? "rejected" : "accepted",
                requestId: `r${i}`,
                ...(random() < 0.3 ? { transactionId: `T${Math.floor(random() * 8)}` } : {}),
                ...(random() < 0.1 ? { keys: [pick(KEYS), pick(KEYS)] } : {}),
              }),
            );
          }
          const records: AuditRecord[] = [];
          for (const d of drafts) {
            clock.advance(stepsBack && random() < 0.05 ? -5 : 1);
            // Concurrent appends: several share a batch (group commit), as under load.
            records.push(...(await Promise.all([log.append(d)])));
          }
          const times = records.map((r) => r.time).sort();
          const queries: Array<Omit<AuditQuery, "limit" | "cursor">> = [{}];
          for (let i = 0; i < 120; i++) {
            const q: Omit<AuditQuery, "limit" | "cursor"> = {};
            if (random() < 0.3) q.bucket = pick(BUCKETS);
            if (random() < 0.2) q.key = pick(KEYS);
            if (random() < 0.3) q.prefix = pick(PREFIXES);
            if (random() < 0.2) q.leaseId = `L${Math.floor(random() * 30)}`;
            if (random() < 0.2) q.decision = random() < 0.5 ? "rejected" : "accepted";
            if (random() < 0.3) q.op = pick(OPS);
            if (random() < 0.2) q.transactionId = `T${Math.floor(random() * 9)}`;
            if (random() < 0.3) q.since = pick(times);
            if (random() < 0.3) q.until = pick(times);
            queries.push(q);
          }
          for (const q of queries) {
            const limit = 1 + Math.floor(random() * 60);
            const walked: AuditRecord[] = [];
            let cursor: string | undefined;
            for (let pages = 0; ; pages++) {
              const page = await log.query({ ...q, limit, ...(cursor ? { cursor } : {}) });
              walked.push(...page.records);
              if (!page.nextCursor) break;
              cursor = page.nextCursor;
              expect(pages).toBeLessThan(1000);
            }
            expect(walked, JSON.stringify(q)).toEqual(expected(records, q));
          }
        } finally {
          db.close();
          dir.cleanup();
        }
      });
    }
  }
});

/**
 * No query reads the whole log: each page is read from an index in seq order (an equality's, or
 * the table's own from the cursor), or collected from a key range; never a scan of every record.
 */
describe("embedded audit query plans over many records", () => {
  const dir = tempDir("fencegate-audit-plans-");
  let db: EmbeddedDb;
  let log: EmbeddedAuditLog;
  let traced: string[] = [];
  let tracing = false;
  const N = 60_000;
  const start = Date.UTC(2026, 10, 1);

  beforeAll(() => {
    db = openEmbeddedDb({ dataDir: dir.path, trace: (sql) => tracing && traced.push(sql) });
    log = createEmbeddedAuditLog({ db, gatewayId: "gw", clock: fakeClock() });
    const insert = db.prepare(
      `INSERT INTO audit_records (time, time_ms, op, bucket, key, prefix, token, lease_id, decision, gateway, transaction_id)
       VALUES (@time, @timeMs, @op, @bucket, @key, @prefix, 1, @leaseId, @decision, 'gw', @transactionId)`,
    );
    db.transaction(() => {
      for (let i = 0; i < N; i++) {
        const timeMs = start + i * 10;
        insert.run({
          time: new Date(timeMs).toISOString(),
          timeMs,
          op: i % 500 === 0 ? "LeaseExpired" : i % 2 ? "PutObject" : "LeaseAcquired",
          bucket: i % 1000 === 0 ? "rare" : `b${i % 2}`,
          key: i % 7 === 0 ? null : `k/${i % 5000}`,
          prefix: i % 7 === 0 ? `p/${i % 100}/` : null,
          leaseId: `L${i % 20000}`,
          decision: i % 400 === 0 ? "rejected" : "accepted",
          // A transaction of three writes every 30 records.
          transactionId: i % 30 < 3 ? `T${Math.floor(i / 30)}` : null,
        });
      }
    })();
  });

  afterAll(() => {
    db.close();
    dir.cleanup();
  });

  afterEach(() => {
    tracing = false;
    traced = [];
  });

  async function planOf(query: Omit<AuditQuery, "limit">): Promise<string> {
    traced = [];
    tracing = true;
    const page = await log.query({ limit: 100, ...query });
    tracing = false;
    expect(page.records.length).toBeGreaterThan(0);
    if (process.env.SHOW_PLANS) console.log(traced.at(-1));
    // The page read is the last statement that selects the records' columns.
    const read = traced.filter((sql) => /^\s*SELECT seq, time, op/.test(sql)).at(-1);
    expect(read).toBeDefined();
    return db
      .prepare(`EXPLAIN QUERY PLAN ${read}`)
      .all()
      .map((row) => (row as { detail: string }).detail)
      .join("; ");
  }

  const at = (i: number) => new Date(start + i * 10).toISOString();

  // Each query with the read it must get: a selective filter drives through its index, an
  // unselective one lets the table be read in seq order from the cursor (the page fills at once),
  // a time window is a rowid range.
  const PK = /^SEARCH audit_records USING INTEGER PRIMARY KEY \(rowid>\?\)$/;
  const PK_RANGE = /^SEARCH audit_records USING INTEGER PRIMARY KEY \(rowid>\? AND rowid<\?\)$/;
  const index = (name: string, seek: string) =>
    new RegExp(`^SEARCH audit_records USING INDEX audit_records_${name} \\(${seek}\\)$`);
  const UNION =
    /MERGE \(UNION\).*COVERING INDEX audit_records_key \(key>\? AND key<\?\).*COVERING INDEX audit_records_prefix \(prefix>\? AND prefix<\?\)/;

  it.each<[string, Omit<AuditQuery, "limit">, RegExp]>([
    ["no filter", {}, PK],
    ["a common bucket", { bucket: "b1" }, PK],
    ["a rare bucket", { bucket: "rare" }, index("bucket", "bucket=\\? AND seq>\\?")],
    ["a key", { key: "k/42" }, index("key", "key=\\? AND seq>\\?")],
    ["a bucket and a key", { bucket: "b1", key: "k/43" }, index("key", "key=\\? AND seq>\\?")],
    ["a narrow prefix", { prefix: "k/12" }, UNION],
    ["a broad prefix", { prefix: "k/" }, PK],
    ["a lease prefix", { prefix: "p/3" }, UNION],
    ["a lease", { leaseId: "L123" }, index("lease", "lease_id=\\? AND seq>\\?")],
    ["rejections", { decision: "rejected" }, index("decision", "decision=\\? AND seq>\\?")],
    ["acceptances", { decision: "accepted" }, PK],
    ["a rare op", { op: "LeaseExpired" }, index("op", "op=\\? AND seq>\\?")],
    ["a common op", { op: "PutObject" }, PK],
    ["a transaction", { transactionId: "T1234" }, index("transaction", "transaction_id=\\? AND seq>\\?")],
    ["since", { since: at(N - 500) }, PK],
    ["until", { until: at(300) }, PK_RANGE],
    ["a time window", { since: at(30_000), until: at(30_500) }, PK_RANGE],
    [
      "a rare bucket in a time window",
      { bucket: "rare", since: at(30_000), until: at(50_000) },
      index("bucket", "bucket=\\? AND seq>\\? AND seq<\\?"),
    ],
  ])("%s", async (_, query, read) => {
    const plan = await planOf(query);
    if (process.env.SHOW_PLANS) console.log(plan);
    expect(plan).toMatch(read);
  });

  it("starts a since query at the window's first record, not at the start of the log", async () => {
    traced = [];
    tracing = true;
    const page = await log.query({ limit: 100, since: at(N - 500) });
    tracing = false;
    expect(page.records[0]!.time).toBe(at(N - 500));
    // The bound is the seq of the first record at or after `since` (minus one), found by a seek.
    expect(traced.at(-1)).toMatch(new RegExp(`seq > ${N - 500}(\\.0)? `));
  });
});

describe("an audit log from before the planner", () => {
  for (const disordered of [false, true]) {
    it(`learns once whether its times follow its seqs (${disordered ? "they do not" : "they do"})`, async () => {
      const dir = tempDir("fencegate-audit-legacy-");
      let db = openEmbeddedDb({ dataDir: dir.path });
      try {
        // The table and indexes as they were, with records already in it.
        db.exec(`
          CREATE TABLE audit_records (seq INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL, time_ms INTEGER NOT NULL,
            op TEXT NOT NULL, bucket TEXT, key TEXT, prefix TEXT, token INTEGER, lease_id TEXT, owner TEXT, principal TEXT,
            decision TEXT NOT NULL CHECK (decision IN ('accepted', 'rejected')), reason TEXT, highest_token INTEGER,
            request_id TEXT, gateway TEXT NOT NULL);
          CREATE INDEX audit_records_bucket_key ON audit_records (bucket, key, seq);
          CREATE INDEX audit_records_bucket_prefix ON audit_records (bucket, prefix, seq) WHERE prefix IS NOT NULL;
          CREATE INDEX audit_records_lease ON audit_records (lease_id, seq) WHERE lease_id IS NOT NULL;
          CREATE INDEX audit_records_time ON audit_records (time_ms, seq);
        `);
        const insert = db.prepare(
          "INSERT INTO audit_records (time, time_ms, op, bucket, decision, gateway) VALUES (?, ?, 'PutObject', 'b', 'accepted', 'gw')",
        );
        const times = [1000, 2000, disordered ? 1500 : 2500, 3000];
        for (const t of times) insert.run(new Date(t).toISOString(), t);
        db.close();

        db = openEmbeddedDb({ dataDir: dir.path });
        const log = createEmbeddedAuditLog({ db, gatewayId: "gw", clock: fakeClock() });
        const flag = db.prepare("SELECT value FROM audit_meta WHERE name = 'times_ordered'").get() as {
          value: number;
        };
        expect(flag.value).toBe(disordered ? 0 : 1);
        const since = await log.query({ limit: 10, since: new Date(1600).toISOString() });
        expect(since.records.map((r) => Date.parse(r.time))).toEqual(times.filter((t) => t >= 1600));
        const indexes = db
          .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'audit_records'")
          .all()
          .map((r) => (r as { name: string }).name);
        expect(indexes).not.toContain("audit_records_bucket_key");
        expect(indexes).toContain("audit_records_transaction");
        // The rebuilt table has the columns that came later: its old rows have none of them.
        const old = await log.query({ limit: 10 });
        expect(old.records).toHaveLength(4);
        for (const r of old.records) expect(r).not.toHaveProperty("transactionId");
        const record = await log.append(
          draft({ op: "TransactionCommitted", transactionId: "T", keys: ["k"] }),
        );
        expect(record.seq).toBe(5);
        expect((await log.query({ limit: 10, transactionId: "T" })).records).toEqual([record]);
      } finally {
        db.close();
        dir.cleanup();
      }
    });
  }
});

describe("an audit log from before transactions", () => {
  it("gains the transaction columns and their index, keeping its rows and seqs", async () => {
    const dir = tempDir("fencegate-audit-pretx-");
    let db = openEmbeddedDb({ dataDir: dir.path });
    try {
      // The table, its indexes and audit_meta as they were just before transactions.
      db.exec(`
        CREATE TABLE audit_records (seq INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL, time_ms INTEGER NOT NULL,
          op TEXT NOT NULL, bucket TEXT, key TEXT, prefix TEXT, token INTEGER, lease_id TEXT, owner TEXT, principal TEXT,
          decision TEXT NOT NULL CHECK (decision IN ('accepted', 'rejected', 'unknown')), reason TEXT,
          highest_token INTEGER, request_id TEXT, gateway TEXT NOT NULL);
        CREATE INDEX audit_records_op ON audit_records (op, seq);
        CREATE TABLE audit_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
        INSERT INTO audit_meta (name, value) VALUES ('times_ordered', 1);
      `);
      const insert = db.prepare(
        "INSERT INTO audit_records (time, time_ms, op, bucket, key, decision, gateway) VALUES (?, ?, 'PutObject', 'b', ?, 'unknown', 'gw')",
      );
      for (const [t, key] of [
        [1000, "a"],
        [2000, "b"],
      ] as const)
        insert.run(new Date(t).toISOString(), t, key);
      // A seq given out and deleted since: never given out again.
      db.prepare("DELETE FROM audit_records WHERE seq = 2").run();
      db.close();

      db = openEmbeddedDb({ dataDir: dir.path });
      const clock = fakeClock(5000);
      const log = createEmbeddedAuditLog({ db, gatewayId: "gw", clock });
      const columns = db
        .prepare<[], { name: string }>("PRAGMA table_info(audit_records)")
        .all()
        .map((c) => c.name);
      expect(columns.slice(-2)).toEqual(["transaction_id", "transaction_keys"]);
      const [before] = (await log.query({ limit: 10 })).records;
      expect(before).toEqual({
        seq: 1,
        time: new Date(1000).toISOString(),
        op: "PutObject",
        bucket: "b",
        key: "a",
        prefix: null,
        token: null,
        leaseId: null,
        owner: null,
        principal: null,
        decision: "unknown",
        reason: null,
        highestToken: null,
        requestId: null,
        gateway: "gw",
      });
      const staged = await log.append(draft({ transactionId: "T1" }));
      const commit = await log.append(
        draft({ op: "TransactionCommitted", key: null, transactionId: "T1", keys: ["k", "k2"] }),
      );
      expect(staged.seq).toBe(3);
      expect((await log.query({ limit: 10 })).records).toEqual([before, staged, commit]);
      expect((await log.query({ limit: 10, transactionId: "T1" })).records).toEqual([staged, commit]);
      const plan = db
        .prepare(
          "EXPLAIN QUERY PLAN SELECT seq FROM audit_records INDEXED BY audit_records_transaction WHERE transaction_id = 'T1' AND seq > 0 ORDER BY seq",
        )
        .all()
        .map((r) => (r as { detail: string }).detail);
      expect(plan.join("; ")).toMatch(
        /USING (COVERING )?INDEX audit_records_transaction \(transaction_id=\? AND seq>\?\)/,
      );
      // The keys are one JSON text; the index holds only records of a transaction.
      expect(
        db.prepare("SELECT transaction_keys AS k FROM audit_records WHERE seq = ?").get(commit.seq),
      ).toEqual({ k: '["k","k2"]' });
      db.close();

      // Opening it again changes nothing.
      db = openEmbeddedDb({ dataDir: dir.path });
      const again = createEmbeddedAuditLog({ db, gatewayId: "gw", clock });
      expect((await again.query({ limit: 10 })).records).toEqual([before, staged, commit]);
    } finally {
      db.close();
      dir.cleanup();
    }
  });
});
