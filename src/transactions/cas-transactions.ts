import { randomBytes } from "node:crypto";
import type { AuditDraft, AuditLog } from "../audit/audit-log.js";
import type { Clock } from "../core/clock.js";
import { DomainError, isDomainError, isOutcomeUnknown, outcomeUnknown } from "../core/errors.js";
import type { Logger } from "../core/log.js";
import { type StagedWrite, type TransactionSink, unfencedCommit } from "../fence/commit.js";
import { abortTransaction, newWriteId } from "../fence/commit-driver.js";
import type { TransactionLog, TxEntry, TxRead, TxRecord } from "../fence/commit-port.js";
import { judgeLease, leaseState, resourceOf } from "../leases/lease-rules.js";
import type { Caller, LeaseService } from "../leases/lease-service.js";
import type { CommitIntent, LeaseRecord, LeaseStore } from "../leases/lease-store.js";
import type { TransactionOutcome } from "../metrics/observe.js";
import type { CommitAnswer, TransactionObject, TransactionView } from "./views.js";

/**
 * Fenced transactions on a compare-and-swap backend (S3), Percolator-style: the transaction's
 * state is not in this process but in its RECORD in the store (TransactionLog), the single
 * commit point; any gateway replica can stage, commit, abort or resolve it, and no crash of the
 * one that opened it blocks a key.
 *
 * - open: the record is created (open, no keys).
 * - a write: checked like a single write and staged in the object's own state as a pending write
 *   beside the live one (commit-driver.ts `stage`); the key then joins the record.
 * - commit: a commit intent per key (the lease store's atomic check-and-record, as a single
 *   write's prepare), then the record open → committed (compare-and-swap): from then on every
 *   read of every key sees the new versions (a reader resolves a pending write through the
 *   record). The pending writes are rolled forward afterwards (best effort: readers and writers
 *   do it too).
 * - abort: the record open → aborted; pending writes are dropped (and lazily by any writer).
 * A writer that finds the pending write of an open transaction with a lower token aborts it
 * (its lease has ended), so a newer holder is never blocked, and the older commit then fails
 * at its commit point. A grant fences the keys of a paused commit through its intents the same
 * way (a raise aborts the transaction).
 *
 * Ids: `tx-` and 32 hex digits, then `-` and the gateway bucket, so that any replica finds the
 * record.
 */

type CasTransactionsOptions = {
  leases: LeaseService;
  store: LeaseStore;
  audit: AuditLog;
  clock: Clock;
  logOf(bucket: string): TransactionLog | undefined;
  /** Called right after a commit point landed (tests pause or kill the gateway there). */
  afterCommitPoint?: (id: string) => Promise<void>;
  maxObjects: number;
  log?: Logger;
  /** Told how each transaction this gateway ended, ended (metrics). */
  observe?: (outcome: TransactionOutcome) => void;
};

const CAS_ID = /^tx-[0-9a-f]{32}-(.+)$/;

/** The bucket a compare-and-swap transaction's id names; null for another id. */
export function casBucketOf(id: string): string | null {
  return CAS_ID.exec(id)?.[1] ?? null;
}

/** Passes of a conditional write of a record before the gateway gives up (SlowDown). */
const MAX_ATTEMPTS = 32;
/** Sends of the commit point while its answer stays lost and the record unchanged. */
const MAX_SENDS = 3;
/** Keys resolved at once after a commit or an abort. */
const SETTLE_IN_PARALLEL = 8;

const nonce = () => randomBytes(12).toString("base64url");

/** The joins of one transaction waiting for the next write of its record (CasTransactions.join). */
type JoinLine = {
  waiting: Array<{ entry: TxEntry; resolve: () => void; reject: (e: unknown) => void }>;
  writing: boolean;
};

export class CasTransactions {
  private readonly joining = new Map<string, JoinLine>();
  /**
   * The transactions opened on this gateway that it has not seen end (its own commit or abort,
   * or a read of the record that found it ended, by any replica): the gateway's open count.
   */
  private readonly opened = new Set<string>();

  constructor(private readonly opts: CasTransactionsOptions) {}

  handles(bucket: string): boolean {
    return this.opts.logOf(bucket) !== undefined;
  }

  async begin(lease: LeaseRecord, baseId: string): Promise<TransactionView> {
    const log = this.opts.logOf(lease.bucket)!;
    const record: TxRecord = {
      v: 1,
      id: `${baseId}-${lease.bucket}`,
      leaseId: lease.leaseId,
      token: lease.token,
      bucket: lease.bucket,
      state: "open",
      keys: [],
      expiresAt: lease.expiresAt,
      created: this.opts.clock(),
      nonce: nonce(),
    };
    if (!(await log.create(record))) throw new Error(`transaction ${record.id} exists already`);
    this.opened.add(record.id);
    return view(record, lease);
  }

  /** Transactions opened on this gateway and not seen to end (metrics, `transactions.maxOpen`). */
  openCount(): number {
    return this.opened.size;
  }

  /** Forgets the opened transactions whose record says ended (the gateway's periodic sweep). */
  async sweep(): Promise<void> {
    for (const id of [...this.opened]) {
      const bucket = casBucketOf(id);
      const log = bucket === null ? undefined : this.opts.logOf(bucket);
      const got = log ? await log.read(id).catch(() => undefined) : null;
      if (got === undefined) continue; // the store did not answer: the next sweep asks again
      if (got === null || got.record.state !== "open") this.opened.delete(id);
    }
  }

  async describe(id: string, caller: Caller): Promise<TransactionView> {
    const { log, read, lease } = await this.find(id, caller);
    if (read.record.state === "open" && !this.current(read.record, lease)) {
      // Its commit may come first: then it is committed, which the record says.
      await this.end(
        log,
        read.record,
        lease?.brokenAt !== undefined ? "LeaseLost" : "LeaseExpired",
        caller,
      ).catch((err) => {
        if (!(isDomainError(err) && err.code === "TransactionCommitted")) throw err;
      });
      const now = await log.read(id);
      return view(now?.record ?? read.record, lease);
    }
    return view(read.record, lease);
  }

  sinkFor(
    id: string,
    claims: { leaseId: string; token: number } | null,
    bucket: string,
    key: string,
  ): TransactionSink {
    const named = casBucketOf(id)!;
    if (claims === null) {
      throw new DomainError(
        "FencingTokenRequired",
        "a write in a transaction carries the fencing token of the transaction's lease",
      );
    }
    if (named !== bucket) {
      throw new DomainError("FencingTokenScopeMismatch", `transaction ${id} writes to bucket ${named} only`, {
        transactionId: id,
      });
    }
    const log = this.opts.logOf(bucket);
    if (!log) throw notFound(id);
    const refuse = (): never => {
      throw new DomainError("NotImplemented", "a compare-and-swap transaction stages in the store");
    };
    return {
      transactionId: id,
      stage: refuse,
      holdInMemory: () => false,
      cas: {
        open: async () => {
          const got = await log.read(id);
          if (!got) throw notFound(id);
          const { record } = got;
          if (record.leaseId !== claims.leaseId || record.token !== claims.token) {
            throw new DomainError(
              "FencingTokenScopeMismatch",
              `transaction ${id} belongs to lease ${record.leaseId}; the write's fencing token is another lease's`,
              { transactionId: id },
            );
          }
          assertOpen(record);
          if (!record.keys.some((e) => e.key === key) && record.keys.length >= this.opts.maxObjects) {
            throw new DomainError(
              "InvalidRequest",
              `a transaction holds at most ${this.opts.maxObjects} objects`,
              { transactionId: id },
            );
          }
        },
        join: async (entry) => {
          await this.join(log, id, { key, ...entry } as TxEntry);
        },
      },
    };
  }

  /**
   * The key joins the record with its staging write (replacing an earlier staging of the key).
   * The joins of one transaction that arrive while one is being written go together in the next
   * write of the record: its writes are one after another, so concurrent stagers would otherwise
   * lose their conditional writes to each other.
   */
  private join(log: TransactionLog, id: string, entry: TxEntry): Promise<void> {
    return new Promise((resolve, reject) => {
      let line = this.joining.get(id);
      if (!line) {
        line = { waiting: [], writing: false };
        this.joining.set(id, line);
      }
      line.waiting.push({ entry, resolve, reject });
      if (!line.writing) void this.writeJoins(log, id, line);
    });
  }

  private async writeJoins(log: TransactionLog, id: string, line: JoinLine): Promise<void> {
    line.writing = true;
    while (line.waiting.length > 0) {
      const batch = line.waiting.splice(0);
      try {
        await this.joinAll(
          log,
          id,
          batch.map((b) => b.entry),
        );
        for (const b of batch) b.resolve();
      } catch (e) {
        for (const b of batch) b.reject(e);
      }
    }
    line.writing = false;
    this.joining.delete(id);
  }

  private async joinAll(log: TransactionLog, id: string, entries: readonly TxEntry[]): Promise<void> {
    for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
      const got = await log.read(id);
      if (!got) throw notFound(id);
      const missing = entries.filter((entry) => !got.record.keys.some((e) => e.writeId === entry.writeId));
      if (missing.length === 0) return;
      assertOpen(got.record);
      // A key staged again keeps its place (the order keys were first staged in).
      let keys = got.record.keys;
      for (const entry of missing) {
        keys = keys.some((e) => e.key === entry.key)
          ? keys.map((e) => (e.key === entry.key ? entry : e))
          : [...keys, entry];
      }
      const answer = await log.swap(got, { ...got.record, keys, nonce: nonce() });
      if (answer.outcome === "swapped") return;
      // Lost or unknown: read again (the entries are there if an unknown one landed).
    }
    throw new DomainError("SlowDown", `transaction ${id} changes too often; please retry`, {
      retryAfterSeconds: 1,
    });
  }

  async commit(id: string, caller: Caller): Promise<CommitAnswer> {
    const { log, read } = await this.find(id, caller);
    let got: TxRead = read;
    if (got.record.state === "committed") return answerOf(got.record);
    if (got.record.state === "aborted") throw abortedError(got.record.id, got.record.reason);
    const { record } = got;
    const { store } = this.opts;
    const intents = new Map<string, CommitIntent>();
    let unknown = false;
    let committed: TxRecord | null = null;
    const commitId = newWriteId();
    try {
      /** A commit intent for every key not yet holding one (the lease store checks the lease). */
      const intend = async (keys: readonly TxEntry[]) => {
        for (const e of keys) {
          if (intents.has(e.key)) continue;
          intents.set(
            e.key,
            await store.beginCommit({
              kind: "fenced",
              leaseId: record.leaseId,
              token: record.token,
              bucket: record.bucket,
              key: e.key,
            }),
          );
        }
      };
      await intend(record.keys);
      if (record.keys.length === 0) {
        const lease = await store.get(record.leaseId);
        const resource = lease ? resourceOf(lease) : { bucket: record.bucket, prefix: "" };
        judgeLease(
          { ...resource, leaseId: record.leaseId, token: record.token },
          lease,
          this.opts.clock(),
          () => null,
        );
      }
      // After the intents, never before: a bucket deletion that began meanwhile refuses it.
      await log.checkBucket();
      let sends = 0;
      for (let attempt = 1; attempt <= MAX_ATTEMPTS && committed === null; attempt++) {
        const next: TxRecord = { ...got.record, state: "committed", commitId, nonce: nonce() };
        const answer = await log.swap(got, next);
        if (answer.outcome === "swapped") {
          committed = next;
          break;
        }
        let now: TxRead | null;
        try {
          now = await log.read(id);
        } catch (e) {
          if (answer.outcome === "unknown") unknown = true;
          throw e;
        }
        if (!now) throw notFound(id);
        if (now.record.state === "committed") {
          committed = now.record;
          break;
        }
        if (now.record.state === "aborted") throw abortedError(now.record.id, now.record.reason);
        if (answer.outcome === "unknown" && now.version === got.version) {
          // It may still land: the same request again (both name one version: at most one lands).
          sends++;
          if (sends >= MAX_SENDS) {
            unknown = true;
            throw outcomeUnknown(
              `the store did not answer the commit of transaction ${id}: it may or may not have happened; ask again (GET or commit) to learn which`,
              answer.error,
              { transactionId: id },
            );
          }
          continue;
        }
        sends = 0;
        got = now;
        await intend(got.record.keys);
      }
      if (committed === null) {
        throw new DomainError(
          "SlowDown",
          `transaction ${id} changes too often to be committed; please retry`,
          {
            retryAfterSeconds: 1,
          },
        );
      }
    } catch (err) {
      if (unknown || !isDomainError(err) || isOutcomeUnknown(err)) {
        // Neither committed nor refused: the intents stay (a newer grant fences the keys through
        // them, which aborts the transaction unless it committed), the record says later.
        unknown = true;
        this.opts.observe?.("unknown");
        if (isOutcomeUnknown(err)) throw err;
        throw outcomeUnknown(
          `the commit of transaction ${id} may or may not have happened; ask again (GET or commit) to learn which`,
          err,
          { transactionId: id },
        );
      }
      if (err.code === "TransactionAborted") {
        // Aborted meanwhile (a newer holder passed it): its pending writes go.
        const now = await log.read(id).catch(() => null);
        await this.settleAll(log, now?.record.keys ?? got.record.keys);
      } else {
        // Refused: nothing of it is visible. The transaction is over.
        await this.end(log, got.record, err.code, caller, "rejected").catch(() => undefined);
      }
      throw err;
    } finally {
      if (!unknown)
        for (const intent of intents.values()) await store.endCommit(intent.intentId).catch(() => undefined);
    }
    this.opened.delete(id);
    this.opts.observe?.("committed");
    await this.opts.afterCommitPoint?.(id);
    await this.settleAll(log, committed.keys);
    await this.opts.audit
      .appendOnce(await this.record(committed, "TransactionCommitted", caller, "accepted", null), `${id} end`)
      .catch((err) => this.opts.log?.warn({ err, transactionId: id }, "transaction record not appended"));
    return answerOf(committed);
  }

  async abort(id: string, caller: Caller): Promise<void> {
    const { log, read } = await this.find(id, caller);
    if (read.record.state === "committed") throw committedError(id);
    if (read.record.state === "aborted") return;
    await this.end(log, read.record, "ClientAbort", caller);
  }

  /**
   * Ends an open transaction as aborted (its record; a commit that came first wins: then
   * TransactionCommitted), drops its pending writes and their bytes, and records it.
   */
  private async end(
    log: TransactionLog,
    record: TxRecord,
    reason: string,
    caller: Caller,
    decision: "accepted" | "rejected" = "accepted",
  ): Promise<void> {
    const state = await abortTransaction(log, record.id, reason);
    this.opened.delete(record.id);
    if (state === "committed") throw committedError(record.id);
    this.opts.observe?.(decision === "rejected" ? "refused" : "aborted");
    const now = (await log.read(record.id))?.record ?? record;
    await this.settleAll(log, now.keys);
    await this.opts.audit
      .appendOnce(await this.record(now, "TransactionAborted", caller, decision, reason), `${record.id} end`)
      .catch((err) =>
        this.opts.log?.warn({ err, transactionId: record.id }, "transaction record not appended"),
      );
  }

  /** Rolls every key's pending write forward or drops it, as the record says (best effort). */
  private async settleAll(log: TransactionLog, keys: readonly TxEntry[]): Promise<void> {
    const queue = [...keys];
    const worker = async () => {
      for (let e = queue.shift(); e; e = queue.shift()) {
        await log
          .settle(e.key)
          .catch((err) => this.opts.log?.debug?.({ err, key: e.key }, "transaction key not settled"));
      }
    };
    await Promise.all(Array.from({ length: Math.min(SETTLE_IN_PARALLEL, queue.length) }, worker));
  }

  /**
   * What a read carrying the transaction sees of a key: the backend's staged read resolves the
   * key's pending write of this transaction (S3Backend.readStaged), if any.
   */
  stagedRead(id: string, bucket: string, key: string): StagedWrite | null {
    if (casBucketOf(id) !== bucket) return null;
    return {
      ref: { bucket, key },
      port: undefined as never,
      change: { op: "put", version: { transaction: id } },
      commit: unfencedCommit(),
    };
  }

  private current(record: TxRecord, lease: LeaseRecord | null): boolean {
    return (
      lease !== null && lease.token === record.token && leaseState(lease, this.opts.clock()) === "active"
    );
  }

  private async find(
    id: string,
    caller: Caller,
  ): Promise<{ log: TransactionLog; read: TxRead; lease: LeaseRecord | null }> {
    const bucket = casBucketOf(id);
    const log = bucket === null ? undefined : this.opts.logOf(bucket);
    if (!log) throw notFound(id);
    const read = await log.read(id);
    if (!read) throw notFound(id);
    if (read.record.state !== "open") this.opened.delete(id);
    const lease = await this.opts.store.get(read.record.leaseId);
    // A lease gone from the store: its transaction can still be read, aborted or committed (refused).
    if (lease && !this.opts.leases.actsFor(lease, caller)) {
      throw new DomainError("AccessDenied", `transaction ${id} belongs to another access key`, {
        transactionId: id,
      });
    }
    return { log, read, lease };
  }

  private async record(
    tx: TxRecord,
    op: "TransactionCommitted" | "TransactionAborted",
    caller: Caller,
    decision: "accepted" | "rejected",
    reason: string | null,
  ): Promise<AuditDraft> {
    const lease = await this.opts.store.get(tx.leaseId).catch(() => null);
    return {
      op,
      bucket: tx.bucket,
      key: null,
      prefix: null,
      token: tx.token,
      leaseId: tx.leaseId,
      owner: lease?.owner ?? null,
      principal: caller.principal,
      requestId: caller.requestId,
      decision,
      reason,
      highestToken: null,
      transactionId: tx.id,
      keys: tx.keys.map((e) => e.key),
    } as AuditDraft;
  }
}

function objectsOf(record: TxRecord): TransactionObject[] {
  return record.keys.map((e) =>
    "deleted" in e ? { key: e.key, deleted: true as const } : { key: e.key, etag: e.etag },
  );
}

function answerOf(record: TxRecord): CommitAnswer {
  return { transactionId: record.id, token: record.token, objects: objectsOf(record) };
}

function view(record: TxRecord, lease: LeaseRecord | null): TransactionView {
  const expiresAt = lease && lease.token === record.token ? lease.expiresAt : record.expiresAt;
  return {
    transactionId: record.id,
    leaseId: record.leaseId,
    token: record.token,
    bucket: record.bucket,
    state: record.state,
    expiresAt: new Date(expiresAt).toISOString(),
    objects: objectsOf(record),
    ...(record.reason !== undefined ? { reason: record.reason } : {}),
  };
}

function assertOpen(record: TxRecord): void {
  if (record.state === "aborted") throw abortedError(record.id, record.reason);
  if (record.state === "committed") {
    throw new DomainError(
      "TransactionCommitted",
      `transaction ${record.id} is committed: it takes no more writes`,
      {
        transactionId: record.id,
      },
    );
  }
}

function notFound(id: string): DomainError {
  return new DomainError("TransactionNotFound", `transaction ${id} not found`, { transactionId: id });
}

/** A transaction already committed cannot be aborted (either kind of transaction). */
export function committedError(id: string): DomainError {
  return new DomainError("TransactionCommitted", `transaction ${id} is committed`, { transactionId: id });
}

/**
 * The refusal of a write or commit of an aborted transaction (either kind): LeaseExpired when its
 * lease expired, as a write's refusal would say; TransactionAborted with its reason otherwise.
 */
export function abortedError(id: string, reason: string | undefined): DomainError {
  if (reason === "LeaseExpired") {
    return new DomainError("LeaseExpired", `transaction ${id} was aborted: its lease expired`, {
      transactionId: id,
      reason,
    });
  }
  return new DomainError("TransactionAborted", `transaction ${id} was aborted (${reason ?? "aborted"})`, {
    transactionId: id,
    reason,
  });
}
