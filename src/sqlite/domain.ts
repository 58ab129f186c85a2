import { close, fsync, open } from "node:fs";
import { dirname } from "node:path";
import type Database from "better-sqlite3";
import type { TxDomain } from "../core/tx.js";

type Pending = {
  step: () => unknown;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
};

type Outcome = { ok: true; value: unknown } | { ok: false; error: unknown };

// Captured once: a test that fakes timers later must not be able to stall every commit.
const nextTurn = globalThis.setImmediate;

/** Flushes a file to stable storage (fs.fsync; tests pass a slower or failing one). */
type SyncFile = (fd: number, done: (err: NodeJS.ErrnoException | null) => void) => void;

type EmbeddedDomainOptions = {
  /**
   * How the WAL file is flushed. Default fs.fsync, run on libuv's thread pool so that the event
   * loop keeps serving while the disk works.
   */
  syncFile?: SyncFile;
};

/**
 * The atomic steps of one embedded database, committed in groups (group commit).
 *
 * A durable commit costs one fsync of the WAL, about as much as a hundred small steps. So `run`
 * only queues the step; once per event-loop turn (setImmediate, after the poll phase has taken
 * in every request that was ready) the queued steps run in one transaction, each inside its own
 * SAVEPOINT. A step that throws is rolled back to its savepoint and its caller gets the error;
 * the other steps of the batch are not disturbed.
 *
 * Durability: on a database in WAL mode the COMMIT itself does not fsync (synchronous=NORMAL:
 * the WAL frames are written, in order, to the file); the domain then fsyncs the WAL file on the
 * thread pool and answers the batch's callers only once that fsync has returned, i.e. once their
 * changes are on disk. While that fsync is in flight, new steps only queue: when it returns,
 * its callers are answered and the steps queued meanwhile run as the next batch, then the next
 * fsync starts. So a batch grows with the disk's latency, one fsync covers it, callers are
 * answered in commit order and never before everything they could have depended on is durable
 * (every frame before theirs in the file), and while the disk works the event loop serves other
 * requests. SQLite
 * itself fsyncs the WAL before each checkpoint and the database file after it. A failed fsync
 * leaves nothing known to be durable: the waiting callers get the error, and so does every later
 * step (the gateway must be restarted, and recovers from what is on disk). Any other journal
 * mode (an in-memory database) keeps SQLite's own synchronous COMMIT.
 *
 * Reads outside steps (GET, listings, the early HCT check) may see a committed batch before its
 * fsync returned. That state is never acknowledged to its writer before it is durable, and a
 * kill -9 does not lose it (the frames are in the kernel's page cache); only a power loss in
 * that window can take back what such a read saw, together with the unacknowledged write.
 *
 * Everything from BEGIN to COMMIT is one synchronous stretch of better-sqlite3 calls, so no
 * other JavaScript runs while a batch is open: reads outside steps never see uncommitted data,
 * and steps never interleave. The fs backend, the embedded lease store and the embedded audit
 * log on one database share this domain (see src/core/tx.ts), which is what lets a write's
 * lease check and its audit record commit in the write's own transaction.
 */
export class EmbeddedDomain implements TxDomain {
  private queue: Pending[] = [];
  private scheduled = false;
  private readonly sql;
  /** Batches committed and steps run, for tests and benchmarks. */
  readonly stats = { batches: 0, steps: 0, largestBatch: 0, syncs: 0 };
  /** Told of the size of every batch committed (metrics). */
  onBatch: ((steps: number) => void) | undefined;
  /** The WAL file this domain fsyncs itself; null: SQLite's own synchronous COMMIT. */
  private readonly wal: string | null;
  private readonly syncFile: SyncFile;
  /** An fsync of the WAL is in flight. */
  private syncing = false;
  /** Answers of committed batches that the fsync in flight does not cover. */
  private awaitingSync: Array<(err: Error | null) => void> = [];
  /** Set once an fsync failed: nothing later can be promised durable. */
  private broken: Error | null = null;
  private dirSynced = false;
  /** The WAL file, open for fsync from the first flush on (null before, and once closed). */
  private walFd: number | null = null;

  constructor(
    readonly db: Database.Database,
    options: EmbeddedDomainOptions = {},
  ) {
    this.syncFile = options.syncFile ?? fsync;
    const walMode = !db.memory && String(db.pragma("journal_mode", { simple: true })).toLowerCase() === "wal";
    this.wal = walMode ? `${db.name}-wal` : null;
    if (walMode) db.pragma("synchronous = NORMAL");
    // Each step of a batch runs in a savepoint, so SQLite copies every page a step changes that
    // the batch had already changed into the statement journal (its undo for that step). That
    // journal is a temporary file which spills to disk past 64 KiB: with it on disk a lease
    // acquire+release pair wrote about 140 KiB and made 70 write calls, with it in memory 25 KiB
    // and 11. Nothing durable lives there: a crash rolls back through the WAL, not through it.
    db.pragma("temp_store = MEMORY");
    this.sql = {
      begin: db.prepare("BEGIN IMMEDIATE"),
      commit: db.prepare("COMMIT"),
      rollback: db.prepare("ROLLBACK"),
      savepoint: db.prepare("SAVEPOINT fencegate_step"),
      release: db.prepare("RELEASE fencegate_step"),
      rollbackTo: db.prepare("ROLLBACK TO fencegate_step"),
    };
  }

  run<T>(step: () => T): Promise<T> {
    if (this.broken) return Promise.reject(this.broken);
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ step, resolve: resolve as (value: unknown) => void, reject });
      // During an fsync the queue grows; the fsync's end schedules the next batch.
      if (!this.syncing) this.schedule();
    });
  }

  private schedule(): void {
    if (!this.scheduled) {
      this.scheduled = true;
      nextTurn(this.flush);
    }
  }

  /** Runs the steps queued so far now, instead of on the next turn (shutdown). */
  flushNow(): void {
    if (this.queue.length > 0) this.flush();
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    const batch = this.queue;
    this.queue = [];
    if (batch.length === 0) return;
    if (this.broken) {
      for (const pending of batch) pending.reject(this.broken);
      return;
    }
    let outcomes: Outcome[];
    try {
      outcomes = batch.length === 1 ? [this.runAlone(batch[0]!)] : this.runTogether(batch);
    } catch (error) {
      // BEGIN or COMMIT failed (closed database, disk full, I/O error): nothing of the batch is
      // known to be durable, so nobody is told it is.
      this.rollbackIfOpen();
      outcomes = batch.map(() => ({ ok: false, error }));
    }
    this.stats.batches++;
    this.stats.steps += batch.length;
    this.stats.largestBatch = Math.max(this.stats.largestBatch, batch.length);
    this.onBatch?.(batch.length);
    const answer = (syncError: Error | null) =>
      batch.forEach((pending, i) => {
        const outcome = outcomes[i]!;
        if (syncError) pending.reject(syncError);
        else if (outcome.ok) pending.resolve(outcome.value);
        else pending.reject(outcome.error);
      });
    if (this.wal === null) answer(null);
    else this.afterSync(answer);
  };

  /**
   * Calls `answer` once everything committed so far is on disk. Refusals wait too: what they
   * were refused on may have been committed by an earlier batch not yet durable.
   */
  private afterSync(answer: (err: Error | null) => void): void {
    if (this.broken) {
      answer(this.broken);
      return;
    }
    this.awaitingSync.push(answer);
    if (!this.syncing) this.syncWal();
  }

  private syncWal(): void {
    const covered = this.awaitingSync;
    this.awaitingSync = [];
    this.syncing = true;
    this.stats.syncs++;
    const done = (err: NodeJS.ErrnoException | null) => {
      this.syncing = false;
      if (err)
        this.broken ??= new Error(`the database log could not be flushed to disk: ${err.message}`, {
          cause: err,
        });
      for (const answer of covered) answer(this.broken);
      if (!this.db.open) this.closeWal();
      if (this.awaitingSync.length > 0) this.syncWal();
      else if (this.queue.length > 0) this.schedule();
    };
    if (this.walFd !== null) {
      this.syncFile(this.walFd, done);
      return;
    }
    const wal = this.wal!;
    open(wal, "r", (openErr, fd) => {
      if (openErr) {
        // No WAL file: nothing was ever written to it, or the database was closed, which
        // checkpoints the WAL into the database file, fsyncs it and removes the WAL.
        done(openErr.code === "ENOENT" ? null : openErr);
        return;
      }
      // Kept open from now on: each later flush is one fsync on the thread pool, not an open,
      // an fsync and a close, each waiting its turn on the event loop. SQLite keeps the WAL file
      // (the same inode, rewound after each checkpoint) for as long as the connection is open, so
      // this descriptor stays the file SQLite writes.
      this.walFd = fd;
      this.syncFile(fd, (syncErr) => {
        if (syncErr || this.dirSynced) {
          done(syncErr);
          return;
        }
        // Once: the WAL file's own directory entry.
        open(dirname(wal), "r", (dirErr, dirFd) => {
          if (dirErr) return done(dirErr);
          this.syncFile(dirFd, (dirSyncErr) =>
            close(dirFd, () => {
              if (!dirSyncErr) this.dirSynced = true;
              done(dirSyncErr);
            }),
          );
        });
      });
    });
  }

  /** Closes the WAL descriptor once the database is closed (SQLite has removed the file). */
  private closeWal(): void {
    if (this.walFd === null) return;
    close(this.walFd, () => {});
    this.walFd = null;
  }

  /**
   * Closes the database, after the batches still queued (nothing queued is dropped), and the
   * WAL descriptor this domain keeps.
   */
  close(): void {
    this.flushNow();
    this.db.close();
    if (!this.syncing) this.closeWal();
  }

  /** A batch of one needs no savepoint: the transaction is the step. */
  private runAlone(pending: Pending): Outcome {
    this.sql.begin.run();
    let value: unknown;
    try {
      value = pending.step();
    } catch (error) {
      this.rollbackIfOpen();
      return { ok: false, error };
    }
    this.sql.commit.run();
    return { ok: true, value };
  }

  private runTogether(batch: Pending[]): Outcome[] {
    const outcomes: Outcome[] = [];
    /** Indexes of the steps that succeeded in the transaction now open. */
    let open: number[] = [];
    this.sql.begin.run();
    for (const pending of batch) {
      if (!this.db.inTransaction) this.sql.begin.run();
      this.sql.savepoint.run();
      try {
        const value = pending.step();
        this.sql.release.run();
        open.push(outcomes.length);
        outcomes.push({ ok: true, value });
      } catch (error) {
        outcomes.push({ ok: false, error });
        if (this.db.inTransaction) {
          this.sql.rollbackTo.run();
          this.sql.release.run();
        } else {
          // SQLite rolled the whole transaction back (disk full, I/O error): the steps before
          // this one are gone with it, and their callers must hear so.
          for (const i of open) outcomes[i] = { ok: false, error: lostWith(error) };
          open = [];
        }
      }
    }
    if (this.db.inTransaction) {
      try {
        this.sql.commit.run();
      } catch (error) {
        this.rollbackIfOpen();
        for (const i of open) outcomes[i] = { ok: false, error };
      }
    }
    return outcomes;
  }

  private rollbackIfOpen(): void {
    if (this.db.open && this.db.inTransaction) this.sql.rollback.run();
  }
}

function lostWith(cause: unknown): Error {
  return new Error("the step's transaction was rolled back by a later step's failure", { cause });
}

const domains = new WeakMap<Database.Database, EmbeddedDomain>();

/** The one domain of a database, so that every component on it compares equal. */
export function embeddedDomain(db: Database.Database): EmbeddedDomain {
  let domain = domains.get(db);
  if (!domain) {
    domain = new EmbeddedDomain(db);
    domains.set(db, domain);
  }
  return domain;
}

/** Closes a database and, if it has one, its domain (queued steps run first; the WAL descriptor goes). */
export function closeEmbeddedDb(db: Database.Database): void {
  const domain = domains.get(db);
  if (domain) domain.close();
  else db.close();
}
