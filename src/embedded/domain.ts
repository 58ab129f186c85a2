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

/**
 * The atomic steps of one embedded database, committed in groups (group commit).
 *
 * A commit costs one fsync of the WAL (synchronous=FULL), about as much as a hundred small
 * steps. So `run` only queues the step; once per event-loop turn (setImmediate, after the poll
 * phase has taken in every request that was ready) the queued steps run in one transaction,
 * each inside its own SAVEPOINT, and every caller is answered only after that transaction's
 * COMMIT returned, i.e. once its changes are durable. A step that throws is rolled back to its
 * savepoint and its caller gets the error; the other steps of the batch are not disturbed.
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
  readonly stats = { batches: 0, steps: 0, largestBatch: 0 };

  constructor(readonly db: Database.Database) {
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
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ step, resolve: resolve as (value: unknown) => void, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        nextTurn(this.flush);
      }
    });
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
    batch.forEach((pending, i) => {
      const outcome = outcomes[i]!;
      if (outcome.ok) pending.resolve(outcome.value);
      else pending.reject(outcome.error);
    });
  };

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
