import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { Redis } from "ioredis";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { encodeCursor } from "../../../src/audit/audit-cursor.js";
import type { AuditLog, AuditQuery, AuditRecord } from "../../../src/audit/audit-log.js";
import { createDirArchiveStore } from "../../../src/audit/redis/archive-store.js";
import { APPEND } from "../../../src/audit/redis/audit-scripts.js";
import {
  connectRedis,
  createRedisAuditLog,
  type RedisAuditLog,
  type RedisAuditLogOptions,
} from "../../../src/audit/redis/redis-audit-log.js";
import { fakeClock } from "../../../src/core/clock.js";
import { LuaScript } from "../../../src/core/lua-source.js";
import { AUDIT_APPEND_LUA } from "../../../src/core/redis/audit-append.js";
import { createBackendArchiveStore } from "../../../src/server/backend-archive-store.js";
import { fsFixture } from "../../backends/fs/fs-fixture.js";
import { type RedisServer, startRedis } from "../../support/redis.js";
import { tempDir } from "../../support/temp.js";
import { requireTools } from "../../support/tools.js";
import { describeAuditLogContract, draft } from "../audit-log.contract.js";

requireTools("redis-server");

let server: RedisServer;
let prefixes = 0;
/** A key prefix of its own for each log: tests share the server, never its keys. */
const freshPrefix = () => `{t${++prefixes}}`;

beforeAll(async () => {
  server = await startRedis();
});

afterAll(async () => {
  await server?.stop();
});

describeAuditLogContract("redis", async (clock) => {
  const keyPrefix = freshPrefix();
  const open = async () =>
    createRedisAuditLog({
      redis: await connectRedis(server.url),
      ownsConnection: true,
      keyPrefix,
      gatewayId: "gw-test",
      clock,
    });
  let log = await open();
  return {
    log,
    async reopen() {
      await log.close();
      log = await open();
      return log;
    },
    cleanup: () => log.close(),
  };
});

describe("redis audit log", () => {
  const opened: Array<{ close(): Promise<void> }> = [];
  const dirs: Array<{ cleanup(): void }> = [];

  afterEach(async () => {
    for (const o of opened.splice(0).reverse()) await o.close();
    for (const d of dirs.splice(0)) d.cleanup();
  });

  /** A replica's log: its own connection and gateway id, the deployment's prefix. */
  async function replica(
    keyPrefix: string,
    gatewayId: string,
    extra: Partial<RedisAuditLogOptions> = {},
  ): Promise<RedisAuditLog> {
    const log = await createRedisAuditLog({
      redis: await connectRedis(server.url),
      ownsConnection: true,
      keyPrefix,
      gatewayId,
      ...extra,
    });
    opened.push(log);
    return log;
  }

  async function walk(log: AuditLog, query: Omit<AuditQuery, "cursor">): Promise<AuditRecord[]> {
    const out: AuditRecord[] = [];
    let cursor: string | undefined;
    for (let pages = 0; pages < 100_000; pages++) {
      const page = await log.query(cursor === undefined ? query : { ...query, cursor });
      out.push(...page.records);
      if (page.nextCursor === null) return out;
      cursor = page.nextCursor;
    }
    throw new Error("paging did not end");
  }

  it("pages without skipping or repeating a record while several replicas append", async () => {
    const prefix = freshPrefix();
    const writers = await Promise.all([0, 1, 2, 3].map((i) => replica(prefix, `gw-${i}`)));
    const reader = await replica(prefix, "gw-reader");
    const acknowledged: AuditRecord[] = [];
    let writing = true;
    // Each replica appends as fast as it can, many appends in flight at once.
    const writing4 = writers.map(async (log, w) => {
      for (let n = 0; n < 60; n++) {
        const batch = await Promise.all(
          Array.from({ length: 8 }, (_, i) =>
            log.append(draft({ requestId: `w${w}-${n}-${i}`, key: `k/${(n + i) % 5}` })),
          ),
        );
        acknowledged.push(...batch);
      }
    });
    const done = Promise.all(writing4).finally(() => {
      writing = false;
    });
    // A reader follows the log with small pages while it grows: unfiltered, and through a
    // filter whose index streams are merged (a prefix over five keys).
    const follow = async (query: Omit<AuditQuery, "cursor" | "limit">) => {
      const seen: AuditRecord[] = [];
      let cursor: string | undefined;
      for (;;) {
        const stillWriting = writing;
        const page = await reader.query({ ...query, limit: 7, ...(cursor ? { cursor } : {}) });
        seen.push(...page.records);
        const last = page.records.at(-1);
        if (page.nextCursor !== null) cursor = page.nextCursor;
        else if (last) cursor = encodeCursor(last.seq); // to follow the log as it grows
        if (page.nextCursor === null && !stillWriting) return seen;
      }
    };
    const [all, filtered] = await Promise.all([follow({}), follow({ prefix: "k/" }), done]);
    expect(acknowledged).toHaveLength(4 * 60 * 8);
    const expected = [...acknowledged].sort((a, b) => a.seq - b.seq);
    // Every acknowledged record once, in one order, with consecutive seqs: nothing skipped.
    expect(all.map((r) => r.seq)).toEqual(expected.map((r) => r.seq));
    expect(all).toEqual(expected);
    expect(filtered).toEqual(expected);
    expect(expected.map((r, i) => r.seq - i)).toEqual(expected.map(() => expected[0]!.seq));
    expect(new Set(all.map((r) => r.gateway))).toEqual(new Set(["gw-0", "gw-1", "gw-2", "gw-3"]));
  });

  it("merges the index streams of a prefix without passing over any record", async () => {
    const log = await replica(freshPrefix(), "gw-1");
    // Two keys under p/, each with more entries than one read of its index stream returns, a
    // few rejected among them; and more rejected records elsewhere, so that the prefix, not the
    // decision, drives a query for both.
    const drafts = [
      ...Array.from({ length: 1400 }, (_, i) =>
        draft({
          key: `p/${i % 2 ? "a" : "b"}`,
          requestId: `${i}`,
          decision: i % 50 ? "accepted" : "rejected",
        }),
      ),
      ...Array.from({ length: 1500 }, () => draft({ key: "q/x", decision: "rejected" })),
    ];
    const written: AuditRecord[] = [];
    for (let i = 0; i < drafts.length; i += 100) {
      written.push(...(await Promise.all(drafts.slice(i, i + 100).map((d) => log.append(d)))));
    }
    written.sort((a, b) => a.seq - b.seq);
    const under = written.filter((r) => r.key!.startsWith("p/"));
    const page = await log.query({ prefix: "p/", limit: 1000 });
    expect(page.records).toEqual(under.slice(0, 1000));
    expect(await walk(log, { prefix: "p/", limit: 1000 })).toEqual(under);
    expect(await walk(log, { prefix: "p/a", limit: 333 })).toEqual(written.filter((r) => r.key === "p/a"));
    const rejected = under.filter((r) => r.decision === "rejected");
    expect(rejected).toHaveLength(28);
    expect(await walk(log, { prefix: "p/", decision: "rejected", limit: 10 })).toEqual(rejected);
  });

  it("answers a page early with a cursor when a query examined its budget, and still misses nothing", async () => {
    const log = await replica(freshPrefix(), "gw-1", { queryBudget: 25 });
    const written: AuditRecord[] = [];
    for (let i = 0; i < 300; i++) {
      written.push(
        await log.append(
          draft({
            op: i % 2 ? "PutObject" : "DeleteObject",
            decision: i % 2 || i % 30 === 0 ? "rejected" : "accepted",
            leaseId: `L${i % 37}`,
            key: i % 100 ? "k" : "rare",
          }),
        ),
      );
    }
    // Each filter lets half the records through, together they let through one in thirty: the
    // query examines far more records than it returns.
    const query = { op: "DeleteObject", decision: "rejected" as const, limit: 10 };
    const first = await log.query(query);
    expect(first.records.length).toBeLessThan(10);
    expect(first.nextCursor).not.toBeNull();
    const expected = written.filter((r) => r.op === "DeleteObject" && r.decision === "rejected");
    expect(expected).toHaveLength(10);
    expect(await walk(log, query)).toEqual(expected);
    // Each way a second filter is checked on its own index before a record is read: a sorted
    // set looked up per candidate, a stream read over the candidates' span, a stream looked up
    // per candidate when that span is long.
    const only = (test: (r: AuditRecord) => boolean) => written.filter(test);
    expect(await walk(log, { key: "k", op: "DeleteObject", limit: 50 })).toEqual(
      only((r) => r.key === "k" && r.op === "DeleteObject"),
    );
    expect(await walk(log, { key: "rare", op: "DeleteObject", limit: 2 })).toEqual(
      only((r) => r.key === "rare"),
    );
    expect(await walk(log, { leaseId: "L3", op: "DeleteObject", limit: 2 })).toEqual(
      only((r) => r.leaseId === "L3" && r.op === "DeleteObject"),
    );
    expect(await walk(log, { leaseId: "L4", decision: "accepted", op: "DeleteObject", limit: 2 })).toEqual(
      only((r) => r.leaseId === "L4" && r.op === "DeleteObject" && r.decision === "accepted"),
    );
    expect(await walk(log, { prefix: "k", decision: "rejected", limit: 3 })).toEqual(
      written.filter((r) => r.key === "k" && r.decision === "rejected"),
    );
  });

  it("turns time windows into seq ranges also when replicas' clocks disagree", async () => {
    const prefix = freshPrefix();
    const ahead = fakeClock(Date.UTC(2026, 0, 1, 0, 0, 0, 50));
    const behind = fakeClock(Date.UTC(2026, 0, 1));
    const a = await replica(prefix, "gw-a", { clock: ahead });
    const b = await replica(prefix, "gw-b", { clock: behind });
    const written: AuditRecord[] = [];
    for (let i = 0; i < 200; i++) {
      written.push(await (i % 2 ? a : b).append(draft({ requestId: `${i}` })));
      ahead.advance(1);
      behind.advance(1);
    }
    const window = (since: number, until: number) =>
      written.filter((r) => Date.parse(r.time) >= since && Date.parse(r.time) < until);
    const t0 = Date.UTC(2026, 0, 1);
    for (const [since, until] of [
      [t0 + 10, t0 + 60],
      [t0 + 49, t0 + 51],
      [t0, t0 + 1],
      [t0 + 240, t0 + 250],
      [t0 + 300, t0 + 400],
    ] as const) {
      const query = { since: new Date(since).toISOString(), until: new Date(until).toISOString(), limit: 7 };
      expect(await walk(a, query)).toEqual(window(since, until));
    }
  });

  it("records every replica's appends in one order with each replica's gateway id", async () => {
    const prefix = freshPrefix();
    const [a, b] = [await replica(prefix, "gw-a"), await replica(prefix, "gw-b")];
    const ra = await a.append(draft());
    const rb = await b.append(draft());
    expect(rb.seq).toBe(ra.seq + 1);
    expect((await b.query({ limit: 10 })).records.map((r) => r.gateway)).toEqual(["gw-a", "gw-b"]);
  });

  it("refuses a malformed time and a malformed cursor with InvalidArgument", async () => {
    const log = await replica(freshPrefix(), "gw-1");
    await expect(log.query({ limit: 1, since: "yesterday" })).rejects.toMatchObject({
      code: "InvalidArgument",
    });
    await expect(log.append(draft({ time: "noon" }))).rejects.toMatchObject({ code: "InvalidArgument" });
    await expect(log.query({ limit: 1, cursor: "zzz" })).rejects.toMatchObject({ code: "InvalidArgument" });
  });

  it("takes a lease event from inside another script, in the same commit order as every append", async () => {
    const prefix = freshPrefix();
    const log = await replica(prefix, "gw-1");
    const before = await log.append(draft({ requestId: "before" }));
    // What a lease script does: change the lease and record the event in one script.
    const leaseScript = new LuaScript(
      "test_grant",
      `local P = KEYS[1]
${AUDIT_APPEND_LUA}
if not audit_ready() then return redis.error_reply('AUDITLOST') end
redis.call('HSET', P .. ':lease:' .. ARGV[1], 'tok', ARGV[2])
return audit_append({t = ARGV[3], op = 'LeaseAcquired', b = 'b', p = 'logs/', tok = ARGV[2], lid = ARGV[1],
  own = 'worker-7', d = 'accepted', gw = 'gw-lease'})`,
    );
    const redis = await connectRedis(server.url);
    opened.push({ close: async () => void redis.disconnect() });
    const at = Date.UTC(2026, 5, 1);
    const seq = Number(await leaseScript.run(redis, [prefix], ["L9", "42", at]));
    expect(seq).toBe(before.seq + 1);
    expect(await redis.hget(`${prefix}:lease:L9`, "tok")).toBe("42");
    const after = await log.append(draft({ requestId: "after" }));
    expect(after.seq).toBe(seq + 1);
    const event = {
      seq,
      time: new Date(at).toISOString(),
      op: "LeaseAcquired",
      bucket: "b",
      key: null,
      prefix: "logs/",
      token: 42,
      leaseId: "L9",
      owner: "worker-7",
      principal: null,
      decision: "accepted",
      reason: null,
      highestToken: null,
      requestId: null,
      gateway: "gw-lease",
    };
    expect((await log.query({ limit: 10 })).records).toEqual([before, event, after]);
    expect((await log.query({ leaseId: "L9", limit: 10 })).records).toEqual([event]);
    expect((await log.query({ prefix: "logs", op: "LeaseAcquired", limit: 10 })).records).toEqual([event]);
  });

  describe("transactions", () => {
    it("decodes entries written before records carried a transaction, next to ones that do", async () => {
      const prefix = freshPrefix();
      const log = await replica(prefix, "gw-1");
      const redis = await connectRedis(server.url);
      opened.push({ close: async () => void redis.disconnect() });
      const at = Date.UTC(2026, 5, 1);
      // An entry as a gateway from before transactions appended it: none of the new fields.
      const oldSeq = Number(
        await APPEND.run(
          redis,
          [prefix],
          ["t", at, "op", "PutObject", "b", "b", "k", "old", "d", "accepted", "gw", "gw-old"],
        ),
      );
      const staged = await log.append(draft({ transactionId: "T1", key: "new" }));
      const commit = await log.append(
        draft({ op: "TransactionCommitted", key: null, transactionId: "T1", keys: ["new", "a,b"] }),
      );
      const old = {
        seq: oldSeq,
        time: new Date(at).toISOString(),
        op: "PutObject",
        bucket: "b",
        key: "old",
        prefix: null,
        token: null,
        leaseId: null,
        owner: null,
        principal: null,
        decision: "accepted",
        reason: null,
        highestToken: null,
        requestId: null,
        gateway: "gw-old",
      };
      expect((await log.query({ limit: 10 })).records).toEqual([old, staged, commit]);
      expect((await log.query({ limit: 10, transactionId: "T1" })).records).toEqual([staged, commit]);
      // In the stream: the id as it is, the keys as one JSON text, and nothing for a field not set.
      const entries = (await redis.xrange(`${prefix}:a`, "-", "+")) as Array<[string, string[]]>;
      const fields = entries.map(([, f]) =>
        Object.fromEntries(f.flatMap((v, i) => (i % 2 ? [] : [[v, f[i + 1]]]))),
      );
      expect(fields.map((f) => [f.tx, f.ks])).toEqual([
        [undefined, undefined],
        ["T1", undefined],
        ["T1", '["new","a,b"]'],
      ]);
      // One index per transaction, a sorted set of its seqs; the keys have none.
      expect(await redis.type(`${prefix}:a:x:tx:T1`)).toBe("zset");
      expect(await redis.zrange(`${prefix}:a:x:tx:T1`, 0, -1)).toEqual([
        String(staged.seq),
        String(commit.seq),
      ]);
      expect(await redis.keys(`${prefix}:a:x:*new*`)).toEqual([`${prefix}:a:x:k:new`]);
    });

    it("reads a transaction's records from its index, however many records are around them", async () => {
      const log = await replica(freshPrefix(), "gw-1", { queryBudget: 25 });
      const written: AuditRecord[] = [];
      for (let i = 0; i < 400; i++) {
        written.push(
          await log.append(draft({ requestId: `r${i}`, ...(i % 97 === 50 ? { transactionId: "T" } : {}) })),
        );
      }
      const mine = written.filter((r) => r.transactionId === "T");
      expect(mine).toHaveLength(4);
      // One page, within a budget that a read of the log itself would have exhausted long before.
      expect(await log.query({ transactionId: "T", limit: 10 })).toEqual({ records: mine, nextCursor: null });
      expect(await log.query({ transactionId: "T", op: "PutObject", limit: 10 })).toEqual({
        records: mine,
        nextCursor: null,
      });
      expect(await log.query({ transactionId: "U", limit: 10 })).toEqual({ records: [], nextCursor: null });
    });
  });

  it("keeps tokens up to 2^53 exact", async () => {
    const log = await replica(freshPrefix(), "gw-1");
    const big = 2 ** 53 - 1;
    await log.append(draft({ token: big, highestToken: big - 1 }));
    expect((await log.query({ limit: 1 })).records[0]).toMatchObject({ token: big, highestToken: big - 1 });
  });

  describe("retention", () => {
    async function archived(extra: { maxRecords?: number; maxAgeMs?: number } = { maxRecords: 10 }) {
      const dir = tempDir("fencegate-audit-archive-");
      dirs.push(dir);
      const clock = fakeClock();
      const prefix = freshPrefix();
      const retention = {
        archive: createDirArchiveStore(dir.path),
        segmentRecords: 7,
        intervalMs: 0,
        ...extra,
      };
      const log = await replica(prefix, "gw-1", { clock, retention });
      const other = await replica(prefix, "gw-2", { clock, retention });
      return { log, other, clock, dir: dir.path, prefix };
    }

    const writeMany = async (log: AuditLog, clock: ReturnType<typeof fakeClock>, n: number) => {
      const out: AuditRecord[] = [];
      for (let i = 0; i < n; i++) {
        out.push(
          await log.append(
            draft({
              key: `logs/${i % 4}`,
              leaseId: `L${i % 3}`,
              op: i % 5 ? "PutObject" : "DeleteObject",
              decision: i % 6 ? "accepted" : "rejected",
            }),
          ),
        );
        clock.advance(1_000);
      }
      return out;
    };

    it("moves records beyond maxRecords to JSON Lines segments, and queries still find every one", async () => {
      const { log, other, clock, dir, prefix } = await archived();
      const written = await writeMany(log, clock, 60);
      const queries: Array<Omit<AuditQuery, "cursor">> = [
        { limit: 4 },
        { limit: 1000 },
        { key: "logs/1", limit: 3 },
        { prefix: "logs/", decision: "rejected", limit: 2 },
        { leaseId: "L2", op: "PutObject", limit: 5 },
        { bucket: "b", limit: 9 },
        { since: written[13]!.time, until: written[41]!.time, limit: 6 },
      ];
      const before = await Promise.all(queries.map((q) => walk(log, q)));
      expect(await log.archiveNow()).toBeGreaterThanOrEqual(50);
      // At most maxRecords stay in Redis, the rest is in segments of at most 7 records.
      const redis: Redis = await connectRedis(server.url);
      opened.push({ close: async () => void redis.disconnect() });
      const inRedis = await redis.xlen(`${prefix}:a`);
      expect(inRedis).toBeLessThanOrEqual(10);
      expect(await redis.exists(`${prefix}:a:x:l:L0`)).toBe(1);
      const files = (await createDirArchiveStore(dir).list()).sort();
      const lines = (await Promise.all(files.map((f) => readFile(join(dir, f), "utf8"))))
        .join("")
        .trim()
        .split("\n");
      expect(lines.map((l) => JSON.parse(l))).toEqual(written.slice(0, 60 - inRedis));
      expect(files.every((f) => /^audit-\d{16}-\d{16}-[0-9a-f]{8}\.jsonl$/.test(f))).toBe(true);
      // Same answers, page by page, from this replica and from another one.
      for (const reader of [log, other]) {
        expect(await Promise.all(queries.map((q) => walk(reader, q)))).toEqual(before);
      }
      // A cursor taken before the records moved still continues where it was.
      const later = await writeMany(log, clock, 3);
      const page = await log.query({ limit: 1000 });
      expect(page.records).toEqual([...written, ...later]);
    });

    it("moves records older than maxAgeMs, and a cursor from before the move continues across it", async () => {
      const { log, clock } = await archived({ maxAgeMs: 20_000 });
      const written = await writeMany(log, clock, 40);
      const head = await log.query({ limit: 5 });
      expect(await log.archiveNow()).toBe(40 - 20);
      const rest = await walk(log, { limit: 6, cursor: head.nextCursor! } as AuditQuery);
      expect([...head.records, ...rest]).toEqual(written);
    });

    it("pages without skipping or repeating a record while replicas append and move records out", async () => {
      const dir = tempDir("fencegate-audit-archive-");
      dirs.push(dir);
      const prefix = freshPrefix();
      const retention = {
        archive: createDirArchiveStore(dir.path),
        maxRecords: 30,
        segmentRecords: 25,
        intervalMs: 0,
      };
      const writers = await Promise.all([0, 1, 2].map((i) => replica(prefix, `gw-${i}`, { retention })));
      const reader = await replica(prefix, "gw-reader", { retention });
      const acknowledged: AuditRecord[] = [];
      let writing = true;
      const done = Promise.all(
        writers.map(async (log, w) => {
          for (let n = 0; n < 50; n++) {
            acknowledged.push(
              ...(await Promise.all(
                Array.from({ length: 4 }, (_, i) => log.append(draft({ requestId: `w${w}-${n}-${i}` }))),
              )),
            );
            // Every replica moves records out now and then, while the others append and read.
            if (n % 5 === 0) await log.archiveNow();
          }
        }),
      ).finally(() => {
        writing = false;
      });
      const seen: AuditRecord[] = [];
      const follow = async () => {
        let cursor: string | undefined;
        for (;;) {
          const stillWriting = writing;
          const page = await reader.query({ limit: 9, ...(cursor ? { cursor } : {}) });
          seen.push(...page.records);
          const last = page.records.at(-1);
          if (page.nextCursor !== null) cursor = page.nextCursor;
          else if (last) cursor = encodeCursor(last.seq);
          if (page.nextCursor === null && !stillWriting) return;
        }
      };
      // Another reader walks the whole log from its start again and again, through the records
      // being moved: every walk must hold every seq from 1 on, once each.
      const walks: number[][] = [];
      const rewalk = async () => {
        while (writing) walks.push((await walk(reader, { limit: 9 })).map((r) => r.seq));
      };
      await Promise.all([follow(), rewalk(), done]);
      expect(walks.length).toBeGreaterThan(2);
      for (const seqs of walks) expect(seqs).toEqual(seqs.map((_, i) => i + 1));
      await writers[0]!.archiveNow();
      const expected = [...acknowledged].sort((a, b) => a.seq - b.seq);
      expect(expected).toHaveLength(600);
      expect(seen).toEqual(expected);
      expect(await walk(reader, { limit: 17 })).toEqual(expected);
      const files = await createDirArchiveStore(dir.path).list();
      expect(files.length).toBeGreaterThan(5);
    });

    it("archives to a bucket of the storage backend just as well", async () => {
      const store = await fsFixture();
      opened.push({ close: store.cleanup });
      const { backend } = store;
      await backend.createBucket("audit-archive");
      const archive = createBackendArchiveStore({ backend, bucket: "audit-archive" });
      const clock = fakeClock();
      const prefix = freshPrefix();
      const retention = { archive, maxRecords: 5, segmentRecords: 4, intervalMs: 0 };
      const log = await replica(prefix, "gw-1", { clock, retention });
      const written = await writeMany(log, clock, 23);
      expect(await log.archiveNow()).toBe(18);
      const names = (await archive.list()).sort();
      expect(names).toHaveLength(5);
      const lines = (await Promise.all(names.map((n) => archive.get(n))))
        .map((b) => b.toString("utf8"))
        .join("");
      expect(
        lines
          .trim()
          .split("\n")
          .map((l) => JSON.parse(l)),
      ).toEqual(written.slice(0, 18));
      const other = await replica(prefix, "gw-2", { clock, retention });
      expect(await walk(other, { limit: 3 })).toEqual(written);
      expect(await walk(other, { key: "logs/2", decision: "accepted", limit: 2 })).toEqual(
        written.filter((r) => r.key === "logs/2" && r.decision === "accepted"),
      );
      // A replica without the archive cannot answer for archived records: it says so (503).
      const blind = await replica(prefix, "gw-3", { clock });
      await expect(blind.query({ limit: 10 })).rejects.toMatchObject({ code: "ServiceUnavailable" });
      expect((await blind.query({ limit: 10, cursor: encodeCursor(18) })).records).toEqual(written.slice(18));
    });

    it("moves a transaction's records with their fields, and its index once none of them is left", async () => {
      const { log, other, clock, dir, prefix } = await archived();
      const written: AuditRecord[] = [];
      for (let i = 0; i < 40; i++) {
        const tx = i < 34 ? `T${i % 3}` : "T-late";
        written.push(
          await log.append(
            i % 5 === 4
              ? draft({
                  op: "TransactionCommitted",
                  key: null,
                  transactionId: tx,
                  keys: [`k/${i}`, `k/${i + 1}`],
                })
              : draft({ key: `k/${i}`, ...(i % 2 ? { transactionId: tx } : {}) }),
          ),
        );
        clock.advance(1_000);
      }
      const byTx = (tx: string) => written.filter((r) => r.transactionId === tx);
      expect(await log.archiveNow()).toBe(30);
      const redis = await connectRedis(server.url);
      opened.push({ close: async () => void redis.disconnect() });
      // Seqs up to 30 moved: T1 keeps its later record in its index, T2 had none after 30 (its
      // index is gone), T-late's are all still there.
      expect(await redis.zrange(`${prefix}:a:x:tx:T1`, 0, -1)).toEqual(["32"]);
      expect(await redis.exists(`${prefix}:a:x:tx:T2`)).toBe(0);
      expect(await redis.zcard(`${prefix}:a:x:tx:T-late`)).toBe(byTx("T-late").length);
      // The segments hold the records as the log answers them: the fields only where set.
      const files = await createDirArchiveStore(dir).list();
      const lines = (await Promise.all(files.map((f) => readFile(join(dir, f), "utf8"))))
        .join("")
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as AuditRecord)
        .sort((a, b) => a.seq - b.seq);
      expect(lines).toEqual(written.slice(0, 30));
      expect(lines.filter((r) => !("transactionId" in r)).length).toBeGreaterThan(0);
      expect(lines.some((r) => "keys" in r && !r.op.startsWith("Transaction"))).toBe(false);
      for (const reader of [log, other]) {
        for (const tx of ["T0", "T1", "T2", "T-late"]) {
          expect(await walk(reader, { transactionId: tx, limit: 2 })).toEqual(byTx(tx));
        }
        expect(await walk(reader, { transactionId: "T1", op: "TransactionCommitted", limit: 1 })).toEqual(
          byTx("T1").filter((r) => r.op === "TransactionCommitted"),
        );
        expect(await walk(reader, { limit: 7 })).toEqual(written);
      }
    });

    it("lets one replica move each record once when several archive at the same time", async () => {
      const { log, other, clock, dir } = await archived();
      const written = await writeMany(log, clock, 80);
      // The lock lets one replica in; whoever comes later finds the rest or nothing.
      const moved = [
        ...(await Promise.all([log.archiveNow(), other.archiveNow()])),
        await other.archiveNow(),
        await log.archiveNow(),
      ];
      expect(moved.reduce((a, b) => a + b, 0)).toBe(70);
      const files = await createDirArchiveStore(dir).list();
      const lines = (await Promise.all(files.map((f) => readFile(join(dir, f), "utf8"))))
        .join("")
        .trim()
        .split("\n");
      const seqs = lines.map((l) => (JSON.parse(l) as AuditRecord).seq).sort((a, b) => a - b);
      expect(new Set(seqs).size).toBe(seqs.length);
      expect(await walk(other, { limit: 13 })).toEqual(written);
    });
  });

  describe("failing closed", () => {
    it("numbers on above every seq given out when Redis lost its data, and still answers archived records", async () => {
      const own = await startRedis();
      let current = own;
      try {
        const dir = tempDir("fencegate-audit-archive-");
        dirs.push(dir);
        const clock = fakeClock();
        const retention = {
          archive: createDirArchiveStore(dir.path),
          maxRecords: 10,
          segmentRecords: 8,
          intervalMs: 0,
        };
        const open = async (gatewayId: string) => {
          const log = await createRedisAuditLog({
            redis: await connectRedis(current.url, 1_000),
            ownsConnection: true,
            keyPrefix: "{lost}",
            gatewayId,
            clock,
            retention,
          });
          opened.push(log);
          return log;
        };
        const log = await open("gw-1");
        const written: AuditRecord[] = [];
        for (let i = 0; i < 30; i++) written.push(await log.append(draft({ requestId: `r${i}` })));
        expect(await log.archiveNow()).toBe(20);
        // A restart without persistence: everything that was in Redis is gone.
        current = await own.restart();
        let next: AuditRecord | undefined;
        for (let i = 0; i < 100 && next === undefined; i++) {
          next = await log.append(draft({ requestId: "after" })).catch(async () => {
            await new Promise((r) => setTimeout(r, 100));
            return undefined;
          });
        }
        // Seqs 21..30 were given out: the next one is above them, not 1 again.
        expect(next?.seq).toBe(31);
        // Records that were only in Redis are lost; the archived ones are still answered.
        expect(await walk(log, { limit: 7 })).toEqual([...written.slice(0, 20), next]);
        const other = await open("gw-2");
        expect(await walk(other, { limit: 100 })).toEqual([...written.slice(0, 20), next]);
        expect((await other.append(draft())).seq).toBe(32);
      } finally {
        await current.stop();
      }
    });

    it("refuses appends, queries and pings while Redis is down, and serves again once it is back", async () => {
      const own = await startRedis({ persistence: "aof" });
      let current = own;
      try {
        const log = await createRedisAuditLog({
          redis: await connectRedis(own.url, 1_000),
          ownsConnection: true,
          keyPrefix: "{down}",
          gatewayId: "gw-1",
        });
        opened.push(log);
        const kept = await log.append(draft({ requestId: "before" }));
        await own.kill9();
        for (const attempt of [log.append(draft()), log.query({ limit: 10 }), log.ping()]) {
          await expect(attempt).rejects.toMatchObject({ code: "ServiceUnavailable" });
        }
        current = await own.restart();
        // ioredis reconnects by itself; the scripts are loaded again on NOSCRIPT.
        let after: AuditRecord | undefined;
        for (let i = 0; i < 100 && after === undefined; i++) {
          after = await log.append(draft({ requestId: "after" })).catch(async () => {
            await new Promise((r) => setTimeout(r, 100));
            return undefined;
          });
        }
        expect(after?.seq).toBe(kept.seq + 1);
        expect((await log.query({ limit: 10 })).records).toEqual([kept, after]);
      } finally {
        await current.stop();
      }
    });
  });
});
