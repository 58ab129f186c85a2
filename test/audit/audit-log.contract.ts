/**
 * The conformance suite every AuditLog passes (embedded on a file and in memory, Redis). Time is
 * a fake clock handed to the factory: no test sleeps.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { AuditDraft, AuditLog, AuditQuery, AuditRecord } from "../../src/audit/audit-log.js";
import { fakeClock } from "../../src/core/clock.js";
import { DomainError } from "../../src/core/errors.js";

export type FakeClock = ReturnType<typeof fakeClock>;

export type AuditLogHarness = {
  log: AuditLog;
  /** Closes the log (and whatever it runs on) and opens it again on the same state. */
  reopen?: () => Promise<AuditLog>;
  /** Closes whatever is open now and removes the state. */
  cleanup: () => Promise<void>;
};

export type AuditLogFactory = (clock: FakeClock) => Promise<AuditLogHarness>;

const NO_RESTART = "the log keeps no state across a restart (its harness has no reopen)";
const NO_DOMAIN = "the log has no domain, so no appendInStep";

export function draft(fields: Partial<AuditDraft> = {}): AuditDraft {
  return {
    op: "PutObject",
    bucket: "b",
    key: "k",
    prefix: null,
    token: 1,
    leaseId: "lease-1",
    owner: null,
    principal: "AKID",
    decision: "accepted",
    reason: null,
    highestToken: 1,
    requestId: "req-1",
    ...fields,
  };
}

export function describeAuditLogContract(name: string, factory: AuditLogFactory): void {
  describe(`AuditLog contract: ${name}`, () => {
    let clock: FakeClock;
    let harness: AuditLogHarness;
    let log: AuditLog;

    beforeEach(async () => {
      clock = fakeClock();
      harness = await factory(clock);
      log = harness.log;
    });

    afterEach(async () => {
      await harness.cleanup();
    });

    /** Appends drafts one after another, one millisecond apart. */
    async function appendAll(drafts: AuditDraft[]): Promise<AuditRecord[]> {
      const records: AuditRecord[] = [];
      for (const d of drafts) {
        records.push(await log.append(d));
        clock.advance(1);
      }
      return records;
    }

    async function all(query: Omit<AuditQuery, "limit"> = {}): Promise<AuditRecord[]> {
      const page = await log.query({ ...query, limit: 1000 });
      expect(page.nextCursor).toBeNull();
      return page.records;
    }

    describe("append", () => {
      it("returns the durable record with its seq, time and gateway", async () => {
        const d = draft({
          op: "LeaseAcquired",
          key: null,
          prefix: "p/",
          owner: "worker-7",
          highestToken: null,
        });
        const record = await log.append(d);
        expect(record).toEqual({
          ...d,
          seq: record.seq,
          time: new Date(clock()).toISOString(),
          gateway: record.gateway,
        });
        expect(Number.isSafeInteger(record.seq)).toBe(true);
        expect(typeof record.gateway).toBe("string");
        expect(record.gateway.length).toBeGreaterThan(0);
        expect(await all()).toEqual([record]);
      });

      it("keeps a rejected decision with its reason", async () => {
        const record = await log.append(
          draft({ decision: "rejected", reason: "StaleFencingToken", token: 3, highestToken: 7 }),
        );
        expect(await all()).toEqual([record]);
        expect(record).toMatchObject({
          decision: "rejected",
          reason: "StaleFencingToken",
          token: 3,
          highestToken: 7,
        });
      });

      it("uses the draft's time when it has one", async () => {
        const record = await log.append(draft({ time: "2026-01-02T03:04:05.678Z" }));
        expect(record.time).toBe("2026-01-02T03:04:05.678Z");
        expect((await all())[0]?.time).toBe("2026-01-02T03:04:05.678Z");
      });

      it("numbers records in commit order, also when appended concurrently", async () => {
        const sequential = await appendAll([draft({ requestId: "r0" }), draft({ requestId: "r1" })]);
        expect(sequential[1]!.seq).toBeGreaterThan(sequential[0]!.seq);
        const concurrent = await Promise.all(
          Array.from({ length: 30 }, (_, i) => log.append(draft({ requestId: `c${i}` }))),
        );
        const records = await all();
        expect(records).toHaveLength(32);
        expect(new Set(records.map((r) => r.seq)).size).toBe(32);
        for (let i = 1; i < records.length; i++) expect(records[i]!.seq).toBeGreaterThan(records[i - 1]!.seq);
        expect(records.slice(0, 2)).toEqual(sequential);
        expect([...concurrent].sort((a, b) => a.seq - b.seq)).toEqual(records.slice(2));
      });

      it("keeps records across a restart, and numbers new ones after them", async (ctx) => {
        ctx.skip(!harness.reopen, NO_RESTART);
        const before = await appendAll([draft({ requestId: "a" }), draft({ requestId: "b" })]);
        log = await harness.reopen!();
        expect(await all()).toEqual(before);
        const after = await log.append(draft({ requestId: "c" }));
        expect(after.seq).toBeGreaterThan(before[1]!.seq);
        expect(await all()).toEqual([...before, after]);
      });
    });

    describe("appendOnce", () => {
      it("appends a record once per key, whoever appends it, concurrently or not", async () => {
        const tries = await Promise.all([
          log.appendOnce(draft({ requestId: "w1" }), "w1 b/k"),
          log.appendOnce(draft({ requestId: "w1" }), "w1 b/k"),
        ]);
        expect([...tries].sort()).toEqual([false, true]);
        expect(await log.appendOnce(draft({ requestId: "w1" }), "w1 b/k")).toBe(false);
        expect(await log.appendOnce(draft({ requestId: "w2" }), "w2 b/k")).toBe(true);
        expect((await all()).map((r) => r.requestId)).toEqual(["w1", "w2"]);
      });

      it("appends nothing under one key once a record was appended under the key it is given as unless", async () => {
        // A write's "unknown" record after its outcome's record would read as an outcome followed by doubt.
        expect(await log.appendOnce(draft({ requestId: "w1", decision: "accepted" }), "w1 b/k")).toBe(true);
        expect(
          await log.appendOnce(draft({ requestId: "w1", decision: "unknown" }), "w1 b/k unknown", "w1 b/k"),
        ).toBe(false);
        // Without the outcome yet, the "unknown" record goes in; the outcome follows it.
        expect(
          await log.appendOnce(draft({ requestId: "w2", decision: "unknown" }), "w2 b/k unknown", "w2 b/k"),
        ).toBe(true);
        expect(await log.appendOnce(draft({ requestId: "w2", decision: "accepted" }), "w2 b/k")).toBe(true);
        expect((await all()).map((r) => [r.requestId, r.decision])).toEqual([
          ["w1", "accepted"],
          ["w2", "unknown"],
          ["w2", "accepted"],
        ]);
      });

      it("records the gateway a draft names (the one that decided), else its own", async () => {
        await log.appendOnce(draft({ requestId: "w1", gateway: "gw-writer" }), "w1");
        await log.append(draft({ requestId: "w2" }));
        const [first, second] = await all();
        expect(first!.gateway).toBe("gw-writer");
        expect(second!.gateway).not.toBe("gw-writer");
        expect(second!.gateway.length).toBeGreaterThan(0);
      });

      it("remembers its keys across a restart", async (ctx) => {
        ctx.skip(!harness.reopen, NO_RESTART);
        expect(await log.appendOnce(draft({ requestId: "w1" }), "w1")).toBe(true);
        log = await harness.reopen!();
        expect(await log.appendOnce(draft({ requestId: "w1" }), "w1")).toBe(false);
        expect(await all()).toHaveLength(1);
      });
    });

    describe("query filters", () => {
      let records: AuditRecord[];

      beforeEach(async () => {
        records = await appendAll([
          draft({ bucket: "b", key: "logs/1", leaseId: "L1", op: "PutObject" }),
          draft({
            bucket: "b",
            key: "logs/2",
            leaseId: "L2",
            op: "DeleteObject",
            decision: "rejected",
            reason: "LeaseExpired",
          }),
          draft({ bucket: "b", key: null, prefix: "logs/", leaseId: "L3", op: "LeaseAcquired", token: 9 }),
          draft({ bucket: "b", key: "logs", leaseId: "L1", op: "PutObject" }),
          draft({
            bucket: "b2",
            key: "logs/1",
            leaseId: "L4",
            op: "PutObject",
            decision: "rejected",
            reason: "StaleFencingToken",
          }),
          draft({ bucket: "b", key: "a%b", leaseId: null, token: null, op: "PutObject" }),
          draft({ bucket: "b", key: "axb", leaseId: null, token: null, op: "PutObject" }),
          draft({ bucket: "b", key: "a_c", leaseId: null, token: null, op: "PutObject" }),
          draft({ bucket: null, key: null, leaseId: null, token: null, op: "LeaseExpired" }),
        ]);
      });

      const pick = (...indexes: number[]) => indexes.map((i) => records[i]);

      it("returns everything in commit order without filters", async () => {
        expect(await all()).toEqual(records);
      });

      it("filters by bucket", async () => {
        expect(await all({ bucket: "b2" })).toEqual(pick(4));
        expect(await all({ bucket: "none" })).toEqual([]);
      });

      it("filters by exact key", async () => {
        expect(await all({ key: "logs/1" })).toEqual(pick(0, 4));
        expect(await all({ bucket: "b", key: "logs/1" })).toEqual(pick(0));
        expect(await all({ key: "logs" })).toEqual(pick(3));
      });

      it("filters by key prefix, including lease prefixes under it", async () => {
        expect(await all({ bucket: "b", prefix: "logs/" })).toEqual(pick(0, 1, 2));
        expect(await all({ prefix: "logs" })).toEqual(pick(0, 1, 2, 3, 4));
        expect(await all({ bucket: "b", prefix: "logs/2" })).toEqual(pick(1));
      });

      it("treats % and _ in a prefix as ordinary characters", async () => {
        expect(await all({ prefix: "a%" })).toEqual(pick(5));
        expect(await all({ prefix: "a_" })).toEqual(pick(7));
      });

      it("filters by lease, decision and op", async () => {
        expect(await all({ leaseId: "L1" })).toEqual(pick(0, 3));
        expect(await all({ decision: "rejected" })).toEqual(pick(1, 4));
        expect(await all({ decision: "accepted", bucket: "b2" })).toEqual([]);
        expect(await all({ op: "LeaseAcquired" })).toEqual(pick(2));
        expect(await all({ op: "PutObject", bucket: "b", prefix: "logs" })).toEqual(pick(0, 3));
      });

      it("filters by time: since inclusive, until exclusive", async () => {
        const at = (i: number) => records[i]!.time;
        expect(await all({ since: at(2) })).toEqual(records.slice(2));
        expect(await all({ until: at(2) })).toEqual(records.slice(0, 2));
        expect(await all({ since: at(2), until: at(5) })).toEqual(records.slice(2, 5));
        expect(await all({ since: at(3), until: at(3) })).toEqual([]);
        // Any ISO 8601 form of the same instant works.
        const offset = new Date(Date.parse(at(2)) + 3_600_000).toISOString().replace("Z", "+01:00");
        expect(await all({ since: offset })).toEqual(records.slice(2));
      });
    });

    describe("pagination", () => {
      async function pages(query: Omit<AuditQuery, "cursor">): Promise<AuditRecord[][]> {
        const result: AuditRecord[][] = [];
        let cursor: string | undefined;
        for (;;) {
          const page = await log.query(cursor === undefined ? query : { ...query, cursor });
          result.push(page.records);
          if (page.nextCursor === null) return result;
          expect(typeof page.nextCursor).toBe("string");
          cursor = page.nextCursor;
          expect(result.length).toBeLessThan(100);
        }
      }

      it("walks every record once, in order, with no gaps or duplicates", async () => {
        const records = await appendAll(Array.from({ length: 25 }, (_, i) => draft({ requestId: `r${i}` })));
        const walked = await pages({ limit: 10 });
        expect(walked.map((p) => p.length)).toEqual([10, 10, 5]);
        expect(walked.flat()).toEqual(records);
      });

      it("ends without an empty page when the last page is exactly full", async () => {
        const records = await appendAll(Array.from({ length: 20 }, () => draft()));
        const walked = await pages({ limit: 10 });
        expect(walked.map((p) => p.length)).toEqual([10, 10]);
        expect(walked.flat()).toEqual(records);
      });

      it("pages through a filter over interleaved records", async () => {
        const records = await appendAll(
          Array.from({ length: 30 }, (_, i) => draft({ decision: i % 3 ? "accepted" : "rejected" })),
        );
        const walked = await pages({ limit: 4, decision: "rejected" });
        expect(walked.map((p) => p.length)).toEqual([4, 4, 2]);
        expect(walked.flat()).toEqual(records.filter((r) => r.decision === "rejected"));
      });

      it("continues with records appended after a page was read", async () => {
        const first = await appendAll([draft(), draft()]);
        const page = await log.query({ limit: 2 });
        expect(page.records).toEqual(first);
        expect(page.nextCursor).toBeNull();
        const later = await appendAll([draft({ requestId: "later" })]);
        // A cursor from a page that had a next page picks up later records too.
        const head = await log.query({ limit: 1 });
        const rest = await log.query({ limit: 10, cursor: head.nextCursor! });
        expect(rest).toEqual({ records: [first[1], ...later], nextCursor: null });
      });

      it("answers an empty log with no records and no cursor", async () => {
        expect(await log.query({ limit: 10 })).toEqual({ records: [], nextCursor: null });
      });

      it("clamps a limit below 1 to one record", async () => {
        await appendAll([draft(), draft()]);
        const page = await log.query({ limit: 0 });
        expect(page.records).toHaveLength(1);
        expect(page.nextCursor).not.toBeNull();
      });

      it.each(["not a cursor!", "", "AAAA", "eyJzZXEiOjF9", Buffer.from("-1").toString("base64url")])(
        "refuses the malformed cursor %j with InvalidArgument",
        async (cursor) => {
          await appendAll([draft()]);
          const error = await log.query({ limit: 10, cursor }).then(
            () => null,
            (e: unknown) => e,
          );
          expect(error).toBeInstanceOf(DomainError);
          expect((error as DomainError).code).toBe("InvalidArgument");
        },
      );
    });

    describe("appendInStep", () => {
      it("is offered exactly when the log has a domain", () => {
        expect(log.appendInStep !== undefined).toBe(log.domain !== undefined);
      });

      it("commits the record with its step", async (ctx) => {
        ctx.skip(!log.domain, NO_DOMAIN);
        const before = await log.append(draft({ requestId: "before" }));
        const record = await log.domain!.run(() => log.appendInStep!(draft({ requestId: "in-step" })));
        expect(record).toMatchObject({ requestId: "in-step", time: new Date(clock()).toISOString() });
        expect(record.seq).toBeGreaterThan(before.seq);
        expect(await all()).toEqual([before, record]);
      });

      it("rolls the record back with its step", async (ctx) => {
        ctx.skip(!log.domain, NO_DOMAIN);
        const before = await log.append(draft({ requestId: "before" }));
        const failure = new Error("the step's other change failed");
        const step = log.domain!.run(() => {
          log.appendInStep!(draft({ requestId: "first" }));
          log.appendInStep!(draft({ requestId: "second" }));
          throw failure;
        });
        await expect(step).rejects.toBe(failure);
        expect(await all()).toEqual([before]);
        const after = await log.append(draft({ requestId: "after" }));
        expect(after.seq).toBeGreaterThan(before.seq);
        expect(await all()).toEqual([before, after]);
      });
    });

    describe("transactions", () => {
      const txKeys = ["logs/1", "logs/2", 'a,b "quoted"', "ünïcode/ключ"];
      const committed = (fields: Partial<AuditDraft> = {}) =>
        draft({
          op: "TransactionCommitted",
          key: null,
          token: 5,
          highestToken: null,
          transactionId: "tx-1",
          keys: txKeys,
          ...fields,
        });

      /** The record a log must make of a draft: the draft's fields, transaction ones only when set. */
      const expectedRecord = (d: AuditDraft, record: AuditRecord): AuditRecord => {
        const { transactionId, keys, ...rest } = d;
        return {
          ...rest,
          ...(transactionId != null ? { transactionId } : {}),
          ...(keys != null ? { keys: [...keys] } : {}),
          seq: record.seq,
          time: record.time,
          gateway: record.gateway,
        };
      };

      it("appends a record with its transaction and keys, and queries answer them", async () => {
        const staged = draft({ transactionId: "tx-1", requestId: "put-1" });
        const commit = committed();
        const [a, b] = await appendAll([staged, commit]);
        expect(a).toEqual(expectedRecord(staged, a!));
        expect(a).toHaveProperty("transactionId", "tx-1");
        expect(a).not.toHaveProperty("keys");
        expect(b).toEqual(expectedRecord(commit, b!));
        expect(b!.keys).toEqual(txKeys);
        expect(await all()).toEqual([a, b]);
      });

      it("leaves both fields out of a record without them, null or absent in the draft", async () => {
        const [absent, nulls] = await appendAll([
          draft({ requestId: "absent" }),
          draft({ requestId: "nulls", transactionId: null, keys: null }),
        ]);
        for (const record of [absent!, nulls!, ...(await all())]) {
          expect(record).not.toHaveProperty("transactionId");
          expect(record).not.toHaveProperty("keys");
        }
        expect(Object.keys(absent!).sort()).toEqual(
          ["seq", "time", "gateway", ...Object.keys(draft())].sort(),
        );
      });

      it("keeps an empty key list, and an abort with its keys", async () => {
        const [empty, aborted] = await appendAll([
          committed({ transactionId: "tx-empty", keys: [] }),
          committed({ op: "TransactionAborted", transactionId: "tx-2", keys: ["only"] }),
        ]);
        expect(empty!.keys).toEqual([]);
        expect(aborted).toMatchObject({ op: "TransactionAborted", transactionId: "tx-2", keys: ["only"] });
        expect(await all()).toEqual([empty, aborted]);
      });

      it("keeps a transaction of the largest size: 10,000 keys of 1,024 bytes", async () => {
        const keys = Array.from(
          { length: 10_000 },
          (_, i) => `${String(i).padStart(5, "0")}/${"x".repeat(1018)}`,
        );
        expect(keys.every((k) => Buffer.byteLength(k) === 1024)).toBe(true);
        const record = await log.append(committed({ transactionId: "tx-big", keys }));
        expect(record.keys).toEqual(keys);
        const [found] = await all({ transactionId: "tx-big" });
        expect(found!.keys).toHaveLength(10_000);
        expect(found).toEqual(record);
      });

      it("copies the keys: changing the draft's after the append changes nothing in the log", async () => {
        const keys = ["k1", "k2"];
        const record = await log.append(committed({ keys }));
        keys.push("k3");
        record.keys!.push("k4");
        expect((await all())[0]!.keys).toEqual(["k1", "k2"]);
      });

      it("appends a transaction's record once, with its fields", async () => {
        const commit = committed();
        expect(await log.appendOnce(commit, "tx-1 commit")).toBe(true);
        expect(await log.appendOnce(committed({ keys: ["other"] }), "tx-1 commit")).toBe(false);
        const records = await all();
        expect(records).toHaveLength(1);
        expect(records[0]).toEqual(expectedRecord(commit, records[0]!));
      });

      it("appends a transaction's record in a step, with its fields", async (ctx) => {
        ctx.skip(!log.domain, NO_DOMAIN);
        const commit = committed();
        const record = await log.domain!.run(() => log.appendInStep!(commit));
        expect(record).toEqual(expectedRecord(commit, record));
        expect(await all()).toEqual([record]);
        expect(await all({ transactionId: "tx-1" })).toEqual([record]);
      });

      it("filters by transaction, exactly, alone and with other filters, page by page", async () => {
        const records = await appendAll([
          draft({ transactionId: "tx-1", key: "logs/1", requestId: "p1" }),
          draft({ key: "logs/1", requestId: "plain" }),
          draft({ transactionId: "tx-10", key: "logs/2", requestId: "p2" }),
          draft({ transactionId: "tx-1", key: "logs/2", op: "DeleteObject", requestId: "p3" }),
          draft({ transactionId: "tx-1", key: "logs/3", decision: "rejected", reason: "StaleFencingToken" }),
          committed(),
          committed({ transactionId: "tx-10", keys: ["logs/2"] }),
        ]);
        const pick = (...indexes: number[]) => indexes.map((i) => records[i]);
        expect(await all({ transactionId: "tx-1" })).toEqual(pick(0, 3, 4, 5));
        expect(await all({ transactionId: "tx-10" })).toEqual(pick(2, 6));
        // Exact: neither a prefix of an id nor a key of the transaction matches.
        expect(await all({ transactionId: "tx" })).toEqual([]);
        expect(await all({ transactionId: "logs/1" })).toEqual([]);
        expect(await all({ transactionId: "tx-1", op: "TransactionCommitted" })).toEqual(pick(5));
        expect(await all({ transactionId: "tx-1", key: "logs/2" })).toEqual(pick(3));
        expect(await all({ transactionId: "tx-1", decision: "rejected" })).toEqual(pick(4));
        expect(await all({ transactionId: "tx-1", prefix: "logs/" })).toEqual(pick(0, 3, 4));
        expect(await all({ transactionId: "tx-10", since: records[3]!.time })).toEqual(pick(6));
        const walked: AuditRecord[] = [];
        let cursor: string | undefined;
        for (let pages = 0; pages < 10; pages++) {
          const page = await log.query({ transactionId: "tx-1", limit: 1, ...(cursor ? { cursor } : {}) });
          walked.push(...page.records);
          if (!page.nextCursor) break;
          cursor = page.nextCursor;
        }
        expect(walked).toEqual(pick(0, 3, 4, 5));
      });

      it("keeps the fields across a restart", async (ctx) => {
        ctx.skip(!harness.reopen, NO_RESTART);
        const before = await appendAll([draft({ requestId: "plain" }), committed()]);
        log = await harness.reopen!();
        expect(await all()).toEqual(before);
        expect(await all({ transactionId: "tx-1" })).toEqual([before[1]]);
        expect(before[0]).not.toHaveProperty("transactionId");
      });
    });

    it("answers ping", async () => {
      await expect(log.ping()).resolves.toBeUndefined();
    });
  });
}
