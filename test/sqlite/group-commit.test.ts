import { spawn } from "node:child_process";
import { fstatSync, readFileSync, statSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type EmbeddedDb, EmbeddedDomain, openEmbeddedDb } from "../../src/sqlite/db.js";
import { trackChild } from "../support/processes.js";
import { tempDir } from "../support/temp.js";

/**
 * Group commit (src/sqlite/domain.ts): steps queued in one event-loop turn share one
 * transaction, each in its own savepoint, and nobody is answered before the COMMIT.
 */
describe("EmbeddedDomain group commit", () => {
  let dir: ReturnType<typeof tempDir>;
  let db: EmbeddedDb;
  let domain: EmbeddedDomain;
  let trace: string[];

  beforeEach(() => {
    dir = tempDir("fencegate-domain-");
    trace = [];
    db = openEmbeddedDb({ dataDir: dir.path, trace: (sql) => trace.push(sql.trim()) });
    db.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL UNIQUE)");
    domain = new EmbeddedDomain(db);
    trace.length = 0;
  });

  afterEach(() => {
    if (db.open) db.close();
    dir.cleanup();
  });

  const insert = (v: string) => () => db.prepare("INSERT INTO t (v) VALUES (?)").run(v).lastInsertRowid;
  const values = () =>
    db
      .prepare<[], { v: string }>("SELECT v FROM t ORDER BY id")
      .all()
      .map((r) => r.v);
  const commits = () => trace.filter((s) => s === "COMMIT").length;

  it("commits the steps of one turn in one transaction, in the order they were queued", async () => {
    const results = await Promise.all(["a", "b", "c", "d"].map((v) => domain.run(insert(v))));
    expect(results).toEqual([1, 2, 3, 4]);
    expect(values()).toEqual(["a", "b", "c", "d"]);
    expect(commits()).toBe(1);
    expect(trace.filter((s) => s.startsWith("SAVEPOINT"))).toHaveLength(4);
  });

  it("runs a step alone without a savepoint", async () => {
    await domain.run(insert("a"));
    expect(trace).toEqual(["BEGIN IMMEDIATE", "INSERT INTO t (v) VALUES ('a')", "COMMIT"]);
  });

  it("takes back only the step that threw; its caller gets its error, the others commit", async () => {
    const failure = new Error("refused");
    const outcomes = await Promise.allSettled([
      domain.run(insert("a")),
      domain.run(() => {
        insert("b")();
        throw failure;
      }),
      domain.run(insert("a")), // UNIQUE violation: SQLite's own error, same treatment
      domain.run(insert("c")),
    ]);
    expect(outcomes.map((o) => o.status)).toEqual(["fulfilled", "rejected", "rejected", "fulfilled"]);
    expect((outcomes[1] as PromiseRejectedResult).reason).toBe(failure);
    expect((outcomes[2] as PromiseRejectedResult).reason).toMatchObject({ code: "SQLITE_CONSTRAINT_UNIQUE" });
    expect(values()).toEqual(["a", "c"]);
    expect(commits()).toBe(1);
  });

  it("takes back a lone step that threw", async () => {
    await expect(
      domain.run(() => {
        insert("a")();
        throw new Error("no");
      }),
    ).rejects.toThrow("no");
    expect(values()).toEqual([]);
    expect(db.inTransaction).toBe(false);
  });

  it("answers nobody before the COMMIT, and nothing is visible outside a step before it", async () => {
    const events: string[] = [];
    const tracing = openEmbeddedDbTraceHook(trace, events);
    const runs = ["a", "b"].map((v) =>
      domain.run(insert(v)).then(() => {
        events.push(`answered ${v}`);
      }),
    );
    // Queued, not run: a read outside a step sees nothing yet.
    expect(values()).toEqual([]);
    await Promise.all(runs);
    tracing.stop();
    expect(events.indexOf("COMMIT")).toBeGreaterThanOrEqual(0);
    expect(events.indexOf("COMMIT")).toBeLessThan(events.indexOf("answered a"));
    expect(events.indexOf("COMMIT")).toBeLessThan(events.indexOf("answered b"));
  });

  it("fails the earlier steps of a batch whose transaction SQLite rolled back, and carries on", async () => {
    const outcomes = await Promise.allSettled([
      domain.run(insert("a")),
      domain.run(() => {
        // What SQLite does on a full disk or an I/O error: the whole transaction is gone.
        db.exec("ROLLBACK");
      }),
      domain.run(insert("c")),
    ]);
    expect(outcomes.map((o) => o.status)).toEqual(["rejected", "rejected", "fulfilled"]);
    expect(values()).toEqual(["c"]);
  });

  it("fails every step when the batch cannot commit", async () => {
    const runs = [domain.run(insert("a")), domain.run(insert("b"))];
    db.close();
    for (const r of runs) await expect(r).rejects.toThrow(/not open/);
  });

  it("puts steps queued while a batch runs into the next batch", async () => {
    let inner: Promise<unknown> | undefined;
    await domain.run(() => {
      insert("a")();
      inner = domain.run(insert("b"));
      expect(values()).toEqual(["a"]);
    });
    await inner;
    expect(values()).toEqual(["a", "b"]);
    expect(commits()).toBe(2);
  });

  it("groups many concurrent callers into few batches", async () => {
    const n = 500;
    await Promise.all(Array.from({ length: n }, (_, i) => domain.run(insert(`v${i}`))));
    expect(values()).toHaveLength(n);
    expect(commits()).toBe(1);
    expect(domain.stats.largestBatch).toBe(n);
  });

  it("keeps the steps' undo copies in memory: a batch writes its pages to the WAL, not to a temporary file", async () => {
    // Each step changes about twenty pages the batch has changed before (a counter row, the last
    // page of a table and of each of its indexes), as a lease grant and its audit record do, so
    // each savepoint copies them into SQLite's statement journal: 80 KiB a step, past the 64 KiB
    // beyond which a journal kept in a temporary file goes to disk.
    const columns = Array.from({ length: 18 }, (_, i) => `c${i}`);
    db.exec("CREATE TABLE hot (id INTEGER PRIMARY KEY, n INTEGER NOT NULL); INSERT INTO hot VALUES (1, 0)");
    db.exec(`CREATE TABLE log (id INTEGER PRIMARY KEY, ${columns.map((c) => `${c} INTEGER`).join(", ")})`);
    for (const c of columns) db.exec(`CREATE INDEX log_${c} ON log (${c}, id)`);
    const bump = db.prepare("UPDATE hot SET n = n + 1 WHERE id = 1");
    const add = db.prepare(
      `INSERT INTO log (${columns.join(", ")}) VALUES (${columns.map(() => "1").join(", ")})`,
    );
    const batch = () =>
      Promise.all(
        Array.from({ length: 100 }, () =>
          domain.run(() => {
            bump.run();
            add.run();
          }),
        ),
      );
    await batch();
    const written = () => Number(/^wchar: (\d+)$/m.exec(readFileSync("/proc/self/io", "utf8"))![1]);
    const before = written();
    for (let round = 0; round < 5; round++) await batch();
    const perStep = (written() - before) / 500;
    // The batch's WAL frames, shared by its steps: well under 4 KiB a step. A statement journal on
    // disk adds about 80 KiB to every step.
    expect(perStep).toBeLessThan(8_192);
    expect(db.prepare("SELECT n FROM hot").get()).toEqual({ n: 600 });
  });
});

describe("EmbeddedDomain answers after the WAL fsync", () => {
  let dir: ReturnType<typeof tempDir>;
  let db: EmbeddedDb;
  /** fsyncs the domain asked for and has not been told are done. */
  let held: Array<{ fd: number; done: (err: NodeJS.ErrnoException | null) => void }>;
  let domain: EmbeddedDomain;

  beforeEach(() => {
    dir = tempDir("fencegate-domain-sync-");
    db = openEmbeddedDb({ dataDir: dir.path });
    db.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL UNIQUE)");
    held = [];
    domain = new EmbeddedDomain(db, {
      // The WAL file's fsyncs are held; its directory's (once, the first time) goes through.
      syncFile: (fd, done) => (fstatSync(fd).isDirectory() ? done(null) : held.push({ fd, done })),
    });
  });

  afterEach(() => {
    if (db.open) db.close();
    dir.cleanup();
  });

  const insert = (v: string) => () => db.prepare("INSERT INTO t (v) VALUES (?)").run(v);
  const settle = () => new Promise((r) => setTimeout(r, 20));
  const finishSync = async (err: NodeJS.ErrnoException | null = null) => {
    while (held.length === 0) await settle();
    held.shift()!.done(err);
    await settle();
  };

  it("commits without fsync (synchronous=NORMAL) and answers only once the WAL fsync returned", async () => {
    expect(db.pragma("synchronous", { simple: true })).toBe(1);
    const answered: string[] = [];
    const runs = ["a", "b"].map((v) => domain.run(insert(v)).then(() => answered.push(v)));
    await settle();
    // Committed (a later read sees it) but nobody is answered while the fsync is in flight.
    expect(db.prepare("SELECT count(*) AS n FROM t").get()).toEqual({ n: 2 });
    expect(held).toHaveLength(1);
    expect(answered).toEqual([]);
    await finishSync();
    await Promise.all(runs);
    expect(answered).toEqual(["a", "b"]);
  });

  it("queues the steps that arrive during an fsync and runs them as one batch when it returns", async () => {
    const answered: string[] = [];
    const first = domain.run(insert("a")).then(() => answered.push("a"));
    await settle();
    expect(held).toHaveLength(1);
    // Two more steps, in different turns, while the first fsync is in flight: they wait.
    const second = domain.run(insert("b")).then(() => answered.push("b"));
    await settle();
    const third = domain.run(insert("c")).then(() => answered.push("c"));
    await settle();
    expect(domain.stats.batches).toBe(1);
    expect(db.prepare("SELECT count(*) AS n FROM t").get()).toEqual({ n: 1 });
    await finishSync();
    expect(answered).toEqual(["a"]);
    // Then one batch for both, and one fsync for it.
    expect(domain.stats.batches).toBe(2);
    expect(domain.stats.largestBatch).toBe(2);
    expect(held).toHaveLength(1);
    expect(answered).toEqual(["a"]);
    await finishSync();
    await Promise.all([first, second, third]);
    expect(answered).toEqual(["a", "b", "c"]);
    expect(domain.stats.syncs).toBe(2);
  });

  it("makes refusals wait for the fsync of what was committed before them", async () => {
    const answered: string[] = [];
    void domain.run(insert("a")).then(() => answered.push("a"));
    await settle();
    const refused = domain.run(insert("a")).catch(() => answered.push("refused"));
    await settle();
    expect(answered).toEqual([]);
    await finishSync();
    await finishSync();
    await refused;
    expect(answered).toEqual(["a", "refused"]);
  });

  it("fsyncs the file SQLite writes its WAL to, through one descriptor kept open until the database closes", async () => {
    const fds: number[] = [];
    for (const v of ["a", "b", "c"]) {
      const run = domain.run(insert(v));
      while (held.length === 0) await settle();
      fds.push(held[0]!.fd);
      await finishSync();
      await run;
    }
    // One open for every flush, of the WAL's own inode.
    expect(new Set(fds).size).toBe(1);
    expect(fstatSync(fds[0]!).ino).toBe(statSync(`${db.name}-wal`).ino);
    domain.close();
    expect(db.open).toBe(false);
    await settle();
    expect(() => fstatSync(fds[0]!)).toThrow(/EBADF/);
  });

  it("fails the waiting callers and every later step when an fsync fails", async () => {
    const waiting = expect(domain.run(insert("a"))).rejects.toThrow(/could not be flushed to disk: EIO/);
    const failure = Object.assign(new Error("EIO: i/o error, fsync"), { code: "EIO" });
    await finishSync(failure);
    await waiting;
    await expect(domain.run(insert("b"))).rejects.toThrow(/could not be flushed/);
  });
});

describe("EmbeddedDomain durability", () => {
  it("keeps every acknowledged step of concurrent bursts across kill -9", { timeout: 30_000 }, async () => {
    const dir = tempDir("fencegate-domain-kill-");
    try {
      const fixture = fileURLToPath(new URL("./fixtures/burst-forever.ts", import.meta.url));
      const child = spawn(process.execPath, ["--import", "tsx", fixture, dir.path], {
        stdio: ["ignore", "pipe", "inherit"],
      });
      trackChild(child);
      const acked: string[] = [];
      // Every line the child printed before it died counts: wait for the end of its output.
      const exited = new Promise((resolve) => child.stdout.on("close", resolve));
      await new Promise<void>((resolve, reject) => {
        let buffered = "";
        child.stdout.setEncoding("utf8");
        child.stdout.on("data", (chunk: string) => {
          buffered += chunk;
          const lines = buffered.split("\n");
          buffered = lines.pop()!;
          acked.push(...lines);
          if (acked.length >= 3000) resolve();
        });
        child.on("exit", () => reject(new Error(`child exited early after ${acked.length} acks`)));
      });
      child.kill("SIGKILL");
      await exited;

      const db = openEmbeddedDb({ dataDir: dir.path });
      try {
        const stored = new Set(
          db
            .prepare<[], { v: string }>("SELECT v FROM burst")
            .all()
            .map((r) => r.v),
        );
        const lost = acked.filter((v) => !stored.has(v));
        expect(lost).toEqual([]);
        // The refused steps of each burst left nothing behind.
        expect([...stored].filter((v) => v.startsWith("refused"))).toEqual([]);
      } finally {
        db.close();
      }
    } finally {
      dir.cleanup();
    }
  });
});

/** Records COMMIT in `events` as the trace sees it, until stopped. */
function openEmbeddedDbTraceHook(trace: string[], events: string[]) {
  const push = trace.push.bind(trace);
  trace.push = (...sql: string[]) => {
    for (const s of sql) if (s === "COMMIT") events.push("COMMIT");
    return push(...sql);
  };
  return {
    stop() {
      trace.push = push;
    },
  };
}
