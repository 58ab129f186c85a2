import { randomBytes } from "node:crypto";
import type { AuditDraft, AuditLog } from "../audit/audit-log.js";
import type { Clock } from "../core/clock.js";
import { DomainError, isDomainError, outcomeUnknown } from "../core/errors.js";
import type { Logger } from "../core/log.js";
import type { TxDomain } from "../core/tx.js";
import type { StagedWrite, TransactionSink } from "../fence/commit.js";
import { runTransactionStep } from "../fence/commit-driver.js";
import type { TransactionLog } from "../fence/commit-port.js";
import { judgeLease, type LeaseClaims, leaseState, resourceOf } from "../leases/lease-rules.js";
import type { Caller, LeaseService } from "../leases/lease-service.js";
import type { CommitIntent, LeaseRecord, LeaseStore } from "../leases/lease-store.js";
import type { TransactionOutcome } from "../metrics/observe.js";
import { abortedError, CasTransactions, casBucketOf, committedError } from "./cas-transactions.js";
import type { CommitAnswer, TransactionObject, TransactionState, TransactionView } from "./views.js";

/**
 * Fenced transactions (contract: "Fenced transactions"): several writes under one lease become
 * visible all together or not at all.
 *
 * A transaction belongs to a lease and to that lease's bucket. Each write that joins it is
 * checked like any fenced write, in one step of its backend (the token's HCT rule, its
 * conditions, the lease, its own audit record: commit-driver.ts `stage`), and its change is kept
 * here instead of being made visible; the bytes of a put are staged by the backend where no
 * reader sees them. The commit applies every kept change in ONE atomic step of the backend's
 * domain (runTransactionStep): each change with the decision of a single write on the object as
 * it is then, the lease checked, the transaction's record written, all in the same step. A
 * refusal anywhere changes nothing, and the transaction is aborted.
 *
 * Where it runs: on backends that commit in atomic steps (the embedded filesystem backend). The
 * lease check is in the step when the lease store shares the backend's domain (the embedded
 * default); otherwise every key first gets a commit intent, the lease store's atomic
 * check-and-record, as a single write would (src/fence/commit.ts), and a grant that supersedes
 * the lease meanwhile fences those keys so that the step refuses.
 *
 * Open transactions live in this gateway's memory: a restart aborts them (their staged bytes are
 * unreferenced and collected when the backend opens). What a commit did is in the audit log.
 *
 * On compare-and-swap backends (S3) a transaction is not in any gateway's memory but in its
 * record in the store, and any replica stages, commits, aborts or resolves it: see
 * cas-transactions.ts (ids `tx-<32 hex>-<bucket>`).
 */

type TransactionLimits = {
  /** Staged objects per transaction (contract: up to 10,000). */
  maxObjects: number;
  /** Transactions open at once on this gateway. */
  maxOpen: number;
  /**
   * Bytes of small staged bodies the backend may hold in memory for all open transactions
   * together (each staged write counts its backend's largest in-memory body); beyond, staged
   * bodies go to files.
   */
  maxMemoryBytes: number;
};

const DEFAULT_TRANSACTION_LIMITS: TransactionLimits = {
  maxObjects: 10_000,
  maxOpen: 10_000,
  maxMemoryBytes: 256 * 1024 * 1024,
};

type TransactionsOptions = {
  leases: LeaseService;
  store: LeaseStore;
  audit: AuditLog;
  clock: Clock;
  /** The atomic-step domain of the backend holding a bucket (none: no transactions there). */
  domainOf(bucket: string): TxDomain | undefined;
  /**
   * The transaction records of a bucket's compare-and-swap backend (none: not such a backend):
   * its transactions live in the store (cas-transactions.ts).
   */
  logOf?(bucket: string): TransactionLog | undefined;
  /** Called right after a compare-and-swap transaction's commit point landed (tests). */
  afterCommitPoint?: (id: string) => Promise<void>;
  limits?: Partial<TransactionLimits>;
  log?: Logger;
  /** Told how each transaction ended (metrics). */
  observe?: (outcome: TransactionOutcome) => void;
};

type Transaction = {
  id: string;
  lease: LeaseRecord;
  caller: Caller;
  domain: TxDomain;
  state: TransactionState | "committing";
  reason?: string;
  /** Bytes this transaction counts against the memory budget, given back when it ends. */
  memory: number;
  /** The last staged write of each key, in the order keys were first staged. */
  staged: Map<string, StagedWrite>;
  /** Once ended: its objects as they were staged (the staged writes themselves are let go). */
  objects?: TransactionObject[];
  result?: CommitAnswer;
  committing?: Promise<CommitAnswer>;
  /** The TransactionCommitted record the audit log has not taken yet (a log outside the step). */
  unrecorded?: AuditDraft;
  /** When the transaction ended; finished ones are forgotten after FORGET_AFTER_MS. */
  endedAt?: number;
};

/** Answers that say a store did not answer, not that the commit is refused. */
const STORE_DOWN = new Set(["LeaseStoreUnavailable", "ServiceUnavailable", "SlowDown"]);

/** How long an ended transaction is remembered (a repeated commit, a state query). */
const FORGET_AFTER_MS = 60 * 60 * 1000;

export class Transactions {
  private readonly open = new Map<string, Transaction>();
  /** Bytes held in memory for open transactions' staged bodies (TransactionSink.holdInMemory). */
  private memoryHeld = 0;
  private readonly limits: TransactionLimits;
  /** Transactions of buckets on compare-and-swap backends: their state is in the store. */
  private readonly cas: CasTransactions;

  constructor(private readonly opts: TransactionsOptions) {
    this.limits = { ...DEFAULT_TRANSACTION_LIMITS, ...opts.limits };
    this.cas = new CasTransactions({
      leases: opts.leases,
      store: opts.store,
      audit: opts.audit,
      clock: opts.clock,
      logOf: (bucket) => opts.logOf?.(bucket),
      ...(opts.afterCommitPoint ? { afterCommitPoint: opts.afterCommitPoint } : {}),
      maxObjects: this.limits.maxObjects,
      ...(opts.log ? { log: opts.log } : {}),
      ...(opts.observe ? { observe: opts.observe } : {}),
    });
  }

  /** Opens a transaction on a current lease, for the lease's principal or its delegates. */
  async begin(leaseId: string, caller: Caller): Promise<TransactionView> {
    const lease = await this.opts.leases.get(leaseId);
    if (!this.opts.leases.actsFor(lease, caller)) {
      throw new DomainError("AccessDenied", `lease ${leaseId} belongs to another access key`, { leaseId });
    }
    if (lease.state !== "active") {
      throw new DomainError("LeaseLost", `lease ${leaseId} has ended: no transaction can be opened on it`, {
        leaseId,
        reason: lease.state,
      });
    }
    const domain = this.opts.domainOf(lease.bucket);
    if (!domain && this.cas.handles(lease.bucket)) {
      this.forgetEnded();
      if (this.countOpen() >= this.limits.maxOpen) throw tooManyOpen();
      return this.cas.begin(lease, newTransactionId());
    }
    if (!domain) {
      throw new DomainError(
        "NotImplemented",
        `transactions need a backend that commits in atomic steps (the embedded filesystem backend); the backend of bucket ${lease.bucket} does not offer them yet`,
      );
    }
    this.forgetEnded();
    if (this.countOpen() >= this.limits.maxOpen) throw tooManyOpen();
    const tx: Transaction = {
      id: newTransactionId(),
      lease,
      caller,
      domain,
      state: "open",
      staged: new Map(),
      memory: 0,
    };
    this.open.set(tx.id, tx);
    return this.view(tx);
  }

  /** The transaction's state and its staged (or committed) objects. */
  async describe(id: string, caller: Caller): Promise<TransactionView> {
    if (casBucketOf(id) !== null) return this.cas.describe(id, caller);
    const tx = this.find(id, caller);
    await this.abortIfLeaseEnded(tx);
    return this.view(tx);
  }

  /**
   * The sink a write joins: the transaction must be open, its lease the one the write's token
   * names, and the write in its bucket. Throws the refusal otherwise.
   */
  sinkFor(
    id: string,
    claims: { leaseId: string; token: number } | null,
    bucket: string,
    key: string,
  ): TransactionSink {
    if (casBucketOf(id) !== null) return this.cas.sinkFor(id, claims, bucket, key);
    const tx = this.open.get(id);
    if (!tx) throw notFound(id);
    if (claims === null) {
      throw new DomainError(
        "FencingTokenRequired",
        "a write in a transaction carries the fencing token of the transaction's lease",
      );
    }
    if (claims.leaseId !== tx.lease.leaseId || claims.token !== tx.lease.token) {
      throw new DomainError(
        "FencingTokenScopeMismatch",
        `transaction ${id} belongs to lease ${tx.lease.leaseId}; the write's fencing token is another lease's`,
        { transactionId: id },
      );
    }
    if (bucket !== tx.lease.bucket) {
      throw new DomainError(
        "FencingTokenScopeMismatch",
        `transaction ${id} writes to bucket ${tx.lease.bucket} only`,
        { transactionId: id },
      );
    }
    this.assertOpen(tx);
    return {
      transactionId: id,
      holdInMemory: (bytes) => {
        if (tx.state !== "open" || this.memoryHeld + bytes > this.limits.maxMemoryBytes) return false;
        this.memoryHeld += bytes;
        tx.memory += bytes;
        return true;
      },
      stage: (write) => {
        this.assertOpen(tx);
        const previous = tx.staged.get(key);
        if (!previous && tx.staged.size >= this.limits.maxObjects) {
          throw new DomainError(
            "InvalidRequest",
            `a transaction holds at most ${this.limits.maxObjects} objects`,
            { transactionId: id },
          );
        }
        tx.staged.set(key, write);
        return {
          // The same key written again in the transaction: its earlier bytes will never be committed.
          kept: async () => {
            if (previous) await discard(previous);
          },
          undo: () => {
            if (tx.staged.get(key) !== write) return;
            if (previous) tx.staged.set(key, previous);
            else tx.staged.delete(key);
          },
        };
      },
    };
  }

  /**
   * Commits: every staged write becomes visible in one atomic step, or none does (the refusal is
   * thrown and the transaction is aborted). A committed transaction answers the same again.
   */
  async commit(id: string, caller: Caller): Promise<CommitAnswer> {
    if (casBucketOf(id) !== null) return this.cas.commit(id, caller);
    const tx = this.find(id, caller);
    if (tx.state === "committed") {
      await this.recordCommit(tx);
      return tx.result!;
    }
    if (tx.state === "committing") return tx.committing!;
    if (tx.state === "aborted") throw abortedError(tx.id, tx.reason);
    tx.state = "committing";
    tx.committing = this.runCommit(tx, caller);
    tx.committing.catch(() => undefined);
    return tx.committing;
  }

  /** Aborts an open transaction: nothing it staged becomes visible; its staged bytes are removed. */
  async abort(id: string, caller: Caller): Promise<void> {
    if (casBucketOf(id) !== null) return this.cas.abort(id, caller);
    const tx = this.find(id, caller);
    if (tx.state === "committing") await tx.committing!.catch(() => undefined);
    if (tx.state === "committed") {
      throw committedError(id);
    }
    if (tx.state === "aborted") return;
    await this.end(tx, "ClientAbort", caller, "accepted");
  }

  /** Transactions open on this gateway (metrics). */
  openCount(): number {
    return this.countOpen();
  }

  /** Aborts the open transactions whose lease has ended (the gateway's periodic sweep). */
  async sweep(): Promise<void> {
    this.forgetEnded();
    await this.cas.sweep().catch(() => undefined);
    for (const tx of [...this.open.values()]) {
      if (tx.state === "open") await this.abortIfLeaseEnded(tx).catch(() => undefined);
    }
  }

  /** Aborts every open transaction (the gateway is shutting down). */
  async close(): Promise<void> {
    for (const tx of this.open.values()) {
      if (tx.state === "open")
        await this.end(tx, "GatewayShutdown", tx.caller, "accepted").catch(() => undefined);
    }
  }

  private async runCommit(tx: Transaction, caller: Caller): Promise<CommitAnswer> {
    const writes = [...tx.staged.values()];
    const claims: LeaseClaims = { ...resourceOf(tx.lease), leaseId: tx.lease.leaseId, token: tx.lease.token };
    const { store, audit, clock } = this.opts;
    const leaseInStep = store.domain === tx.domain && store.inDomain !== undefined;
    const auditInStep = audit.domain === tx.domain && audit.appendInStep !== undefined;
    const intents: CommitIntent[] = [];
    let result: CommitAnswer | undefined;
    try {
      if (!leaseInStep) {
        // The lease store's atomic check-and-record, key by key, as a single write's prepare().
        for (const w of writes) {
          intents.push(
            await store.beginCommit({
              kind: "fenced",
              leaseId: claims.leaseId,
              token: claims.token,
              bucket: w.ref.bucket,
              key: w.ref.key,
            }),
          );
        }
        // Without any write, the lease is still checked.
        if (writes.length === 0) this.judge(claims, await store.get(claims.leaseId));
      }
      let recorded = false;
      await runTransactionStep(tx.domain, writes, () => {
        if (leaseInStep) {
          const reads = store.inDomain!;
          judgeLease(claims, reads.get(claims.leaseId), clock(), (l) => reads.findNewerOverlapping(l));
        }
        result = { transactionId: tx.id, token: tx.lease.token, objects: objectsOf(tx.staged) };
        if (auditInStep) {
          audit.appendInStep!(this.record(tx, "TransactionCommitted", caller, "accepted", null));
          recorded = true;
        }
      });
      tx.state = "committed";
      tx.result = result!;
      tx.endedAt = clock();
      this.opts.observe?.("committed");
      const draft = recorded ? undefined : this.record(tx, "TransactionCommitted", caller, "accepted", null);
      this.letGo(tx);
      if (draft) {
        // The log is elsewhere (Redis): the record follows the step. Nothing is answered as done
        // without it: a log that does not take it makes the answer "unknown", and a repeated
        // commit appends it (once) before answering.
        tx.unrecorded = draft;
        await this.recordCommit(tx);
      }
      return result!;
    } catch (err) {
      if (isDomainError(err) && tx.state === "committing" && STORE_DOWN.has(err.code)) {
        // The lease store did not answer before the step: nothing was changed; the transaction
        // stays open and the commit may be asked again (its intents, if any landed, are fenced by
        // the next grant as any write's are).
        tx.state = "open";
        throw err;
      }
      if (isDomainError(err)) {
        // Refused: nothing of it is visible. The transaction is over.
        await this.end(tx, err.code, caller, "rejected").catch(() => undefined);
        throw err;
      }
      // The step's outcome is not known (the database failed under it): neither committed nor refused.
      tx.state = "open";
      this.opts.observe?.("unknown");
      throw outcomeUnknown(
        `the commit of transaction ${tx.id} may or may not have happened; the audit log will hold a TransactionCommitted record if it did`,
        err,
        { transactionId: tx.id },
      );
    } finally {
      for (const intent of intents) await store.endCommit(intent.intentId).catch(() => undefined);
    }
  }

  /** Appends a committed transaction's record if it is still owed; 503 "unknown" when the log does not take it. */
  private async recordCommit(tx: Transaction): Promise<void> {
    const draft = tx.unrecorded;
    if (!draft) return;
    try {
      await this.opts.audit.appendOnce(draft, `${tx.id} end`);
      tx.unrecorded = undefined;
    } catch (cause) {
      this.opts.observe?.("unknown");
      throw outcomeUnknown(
        `transaction ${tx.id} is committed, but the audit log did not take its record: commit it again to have it recorded`,
        cause,
        { transactionId: tx.id },
      );
    }
  }

  private judge(claims: LeaseClaims, lease: LeaseRecord | null): void {
    judgeLease(claims, lease, this.opts.clock(), () => null);
  }

  private async abortIfLeaseEnded(tx: Transaction): Promise<void> {
    if (tx.state !== "open") return;
    const lease = await this.opts.store.get(tx.lease.leaseId);
    if (lease && lease.token === tx.lease.token && leaseState(lease, this.opts.clock()) === "active") return;
    await this.end(tx, lease?.brokenAt !== undefined ? "LeaseLost" : "LeaseExpired", tx.caller, "accepted");
  }

  /** Ends a transaction that will never commit: its staged bytes are removed, one record says why. */
  private async end(
    tx: Transaction,
    reason: string,
    caller: Caller,
    decision: "accepted" | "rejected",
  ): Promise<void> {
    if (tx.state === "aborted" || tx.state === "committed") return;
    tx.state = "aborted";
    tx.reason = reason;
    this.opts.observe?.(decision === "rejected" ? "refused" : "aborted");
    tx.endedAt = this.opts.clock();
    const staged = [...tx.staged.values()];
    const draft = this.record(tx, "TransactionAborted", caller, decision, reason);
    this.letGo(tx);
    await Promise.all(staged.map(discard));
    await this.opts.audit
      .appendOnce(draft, `${tx.id} end`)
      .catch((err) => this.opts.log?.warn({ err, transactionId: tx.id }, "transaction record not appended"));
  }

  /**
   * An ended transaction keeps only what its state query shows (its objects' keys and ETags):
   * its staged versions (bodies held in memory among them) are let go, and its share of the
   * memory budget given back.
   */
  private letGo(tx: Transaction): void {
    tx.objects = objectsOf(tx.staged);
    tx.staged = new Map();
    this.memoryHeld -= tx.memory;
    tx.memory = 0;
  }

  private record(
    tx: Transaction,
    op: "TransactionCommitted" | "TransactionAborted",
    caller: Caller,
    decision: "accepted" | "rejected",
    reason: string | null,
  ): AuditDraft {
    return {
      op,
      bucket: tx.lease.bucket,
      key: null,
      prefix: null,
      token: tx.lease.token,
      leaseId: tx.lease.leaseId,
      owner: tx.lease.owner,
      principal: caller.principal,
      requestId: caller.requestId,
      decision,
      reason,
      highestToken: null,
      transactionId: tx.id,
      keys: [...tx.staged.keys()],
    };
  }

  private find(id: string, caller: Caller): Transaction {
    const tx = this.open.get(id);
    if (!tx) throw notFound(id);
    if (!this.opts.leases.actsFor(tx.lease, caller)) {
      throw new DomainError("AccessDenied", `transaction ${id} belongs to another access key`, {
        transactionId: id,
      });
    }
    return tx;
  }

  private assertOpen(tx: Transaction): void {
    if (tx.state === "open") return;
    if (tx.state === "aborted") throw abortedError(tx.id, tx.reason);
    throw new DomainError(
      "TransactionCommitted",
      `transaction ${tx.id} is ${tx.state === "committing" ? "being committed" : "committed"}: it takes no more writes`,
      { transactionId: tx.id },
    );
  }

  private view(tx: Transaction): TransactionView {
    const state: TransactionState = tx.state === "committing" ? "open" : tx.state;
    return {
      transactionId: tx.id,
      leaseId: tx.lease.leaseId,
      token: tx.lease.token,
      bucket: tx.lease.bucket,
      state,
      expiresAt: new Date(tx.lease.expiresAt).toISOString(),
      objects: tx.result?.objects ?? tx.objects ?? objectsOf(tx.staged),
      ...(tx.reason !== undefined ? { reason: tx.reason } : {}),
    };
  }

  /** Open on this gateway: its own (embedded) and those it opened in a store (compare-and-swap). */
  private countOpen(): number {
    let n = this.cas.openCount();
    for (const tx of this.open.values()) if (tx.state === "open" || tx.state === "committing") n++;
    return n;
  }

  private forgetEnded(): void {
    const now = this.opts.clock();
    for (const [id, tx] of this.open) {
      if (tx.endedAt !== undefined && now - tx.endedAt > FORGET_AFTER_MS) this.open.delete(id);
    }
  }

  /**
   * What a read that carries the transaction sees of a key: its staged write (a put's version or
   * a delete), null when the transaction staged nothing there or is no longer open (the read then
   * sees what any read sees). TransactionNotFound for an unknown transaction; AccessDenied for a
   * caller that does not act for its lease.
   */
  stagedRead(id: string, bucket: string, key: string, caller: Caller): StagedWrite | null {
    if (casBucketOf(id) !== null) return this.cas.stagedRead(id, bucket, key);
    const tx = this.find(id, caller);
    if (tx.state !== "open" || tx.lease.bucket !== bucket) return null;
    return tx.staged.get(key) ?? null;
  }
}

/** The objects of a transaction by the gateway's key (a staged write's ref is the backend's). */
function objectsOf(staged: ReadonlyMap<string, StagedWrite>): TransactionObject[] {
  return [...staged].map(([key, w]) =>
    w.change.op === "delete"
      ? { key, deleted: true as const }
      : { key, etag: String((w.change.version as { etag?: string }).etag ?? "") },
  );
}

async function discard(w: StagedWrite): Promise<void> {
  if (w.change.op === "put") await w.port.discard(w.ref, w.change.version).catch(() => undefined);
}

function notFound(id: string): DomainError {
  return new DomainError("TransactionNotFound", `transaction ${id} not found (unknown, or ended long ago)`, {
    transactionId: id,
  });
}

/** A transaction id: "tx-" and 32 hex digits, the first 12 the millisecond time, 80 random bits. */
function newTransactionId(): string {
  return `tx-${Date.now().toString(16).padStart(12, "0")}${randomBytes(10).toString("hex")}`;
}

const tooManyOpen = () =>
  new DomainError("SlowDown", "too many transactions are open on this gateway; commit or abort some");
