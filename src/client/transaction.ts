import type { MetadataBearer, Pluggable } from "@smithy/types";
import { FenceApiError, OutcomeUnknownError, TransactionCommittedError } from "./errors.js";
import {
  bindFencingToken,
  type CommandSender,
  type CommandWithStack,
  fencingTokenClient,
  fencingTokenPlugin,
  type TokenHolder,
} from "./s3-plugin.js";
import type { TransactionCommit, TransactionRecord, TransactionView } from "./types.js";

/** What a transaction needs of the lease handle it belongs to (a Lease, lease.ts). */
export type TransactionLease = {
  readonly fencingToken: string;
  readonly signal: AbortSignal;
  readonly lost: boolean;
  throwIfLost(): void;
};

/** The calls a Transaction handle makes (FenceClient has them). */
export type TransactionApi = {
  openTransaction(leaseId: string, opts?: { signal?: AbortSignal }): Promise<TransactionRecord>;
  transactionState(transactionId: string): Promise<TransactionView>;
  commitTransaction(transactionId: string, opts?: { signal?: AbortSignal }): Promise<TransactionCommit>;
  abortTransaction(transactionId: string): Promise<void>;
};

/**
 * Where a Transaction handle stands, as this client knows it:
 * - `open`: writes through it are staged;
 * - `committing`: its commit was sent (writes through it fail locally from now on);
 * - `committed`: every write of it is visible;
 * - `aborted`: none is, and none will be (aborted here, or its commit was refused);
 * - `unknown`: its commit's outcome is unknown (OutcomeUnknownError): `commit()` again to learn it.
 */
export type TransactionHandleState = "open" | "committing" | "committed" | "aborted" | "unknown";

/** What `lease.transaction(fn)` resolves with: what `fn` returned and what the commit answered. */
export type TransactionResult<T> = {
  /** What the function returned. */
  value: T;
  /** The commit's answer: the transaction, its token and every object it made visible. */
  commit: TransactionCommit;
};

/**
 * An open fenced transaction of a lease (`lease.transaction(fn)` gives one to `fn`;
 * `lease.openTransaction()` returns one). Writes sent through it carry the lease's token and
 * `x-fence-transaction`: the gateway checks them like any fenced write and stages them, invisible
 * to other readers until the commit, which makes all of them visible at once or none. Reads sent
 * through it carry `x-fence-transaction` too (while it is open), and so see its staged writes.
 *
 *     await lease.transaction(async (tx) => {
 *       await s3.send(tx.bind(new PutObjectCommand({ Bucket, Key: "a", Body })));
 *       await tx.s3(s3).send(new DeleteObjectCommand({ Bucket, Key: "b" }));
 *     });
 *
 * A write through it fails locally, without being sent, once the lease is lost or the
 * transaction is no longer open.
 */
export class Transaction implements TokenHolder {
  readonly #lease: TransactionLease;
  readonly #api: TransactionApi;
  readonly #record: TransactionRecord;
  #state: TransactionHandleState = "open";
  #commit: TransactionCommit | undefined;

  constructor(lease: TransactionLease, api: TransactionApi, record: TransactionRecord) {
    this.#lease = lease;
    this.#api = api;
    this.#record = record;
  }

  /** The transaction as the gateway answered its opening. */
  get record(): TransactionRecord {
    return this.#record;
  }
  get transactionId(): string {
    return this.#record.transactionId;
  }
  get leaseId(): string {
    return this.#record.leaseId;
  }
  /** The lease's token number, which every write of the transaction carries. */
  get token(): number {
    return this.#record.token;
  }
  /** The lease's signed token string (header `x-fence-token`). */
  get fencingToken(): string {
    return this.#lease.fencingToken;
  }
  get bucket(): string {
    return this.#record.bucket;
  }
  get expiresAt(): string {
    return this.#record.expiresAt;
  }
  get state(): TransactionHandleState {
    return this.#state;
  }
  /** True while writes through it are staged (reads through it then see them). */
  get transactionOpen(): boolean {
    return this.#state === "open";
  }
  /** The lease's signal: fires (with a LeaseLostError) when the lease, and so the transaction, is lost. */
  get signal(): AbortSignal {
    return this.#lease.signal;
  }

  /** Throws the lease's error if it is lost, or an error if the transaction is no longer open. */
  throwIfLost(): void {
    this.#lease.throwIfLost();
    if (this.#state !== "open") {
      throw new Error(`transaction ${this.transactionId} is ${this.#state}: no more writes join it`);
    }
  }

  /**
   * Binds this transaction to one S3 command: a write carries the lease's token and
   * `x-fence-transaction` (and is staged), a read carries `x-fence-transaction` (and sees what is
   * staged), whichever client sends it. Returns the command.
   *
   *     await s3.send(tx.bind(new PutObjectCommand({ Bucket, Key, Body })));
   */
  bind<C extends CommandWithStack>(command: C): C {
    return bindFencingToken(command, this);
  }

  /**
   * A view of a (shared) S3Client that sends every command inside this transaction, as `bind`
   * does; the client itself is left unchanged (see `lease.s3`).
   */
  s3<C extends CommandSender>(client: C): C {
    return fencingTokenClient(client, this);
  }

  /**
   * An AWS SDK v3 plugin for a client of this transaction only (`fencingTokenPlugin`): every
   * command the client sends carries the transaction. Remove it (or drop the client) when the
   * transaction ends; a shared client takes `tx.s3(client)` or `tx.bind(command)` instead.
   */
  plugin(): Pluggable<object, MetadataBearer> {
    return fencingTokenPlugin(this);
  }

  /** The transaction as the gateway has it now: state, objects, and why it was aborted. */
  show(): Promise<TransactionView> {
    return this.#api.transactionState(this.transactionId);
  }

  /**
   * Commits: every staged write becomes visible at once, or none. Resolves with the commit's
   * answer (again, without a request, once committed). Throws:
   * - the lease's LeaseLostError when the lease was lost before the commit was sent (the
   *   transaction is then aborted, best effort);
   * - the gateway's refusal (StaleFencingTokenError, LeaseLostError with code LeaseExpired,
   *   TransactionAbortedError, TransactionNotFoundError): nothing of it is visible, state
   *   `aborted`;
   * - OutcomeUnknownError: it may have committed (state `unknown`); call commit() again, which is
   *   safe, to learn the outcome.
   */
  async commit(): Promise<TransactionCommit> {
    if (this.#state === "committed" && this.#commit) return this.#commit;
    if (this.#state === "committing") throw new Error(`transaction ${this.transactionId} is being committed`);
    if (this.#state === "aborted") throw new Error(`transaction ${this.transactionId} was aborted`);
    if (this.#state === "open" && this.#lease.lost) {
      await this.#drop();
      this.#lease.throwIfLost();
    }
    this.#state = "committing";
    try {
      const commit = await this.#api.commitTransaction(this.transactionId);
      this.#commit = commit;
      this.#state = "committed";
      return commit;
    } catch (e) {
      if (e instanceof OutcomeUnknownError) {
        this.#state = "unknown";
      } else if (e instanceof FenceApiError && e.status >= 400 && e.status < 500) {
        // Refused: nothing is visible. Make sure the gateway drops what it staged.
        await this.#drop();
      } else {
        // Not sent, or the gateway said it did not commit (e.g. its lease store is down).
        this.#state = "open";
      }
      throw e;
    }
  }

  /**
   * Aborts: none of its writes becomes visible, and writes through it fail locally from now on.
   * Nothing to do if it was aborted already. Throws TransactionCommittedError if it was committed
   * (also when an earlier commit's outcome was unknown and it did commit).
   */
  async abort(): Promise<void> {
    if (this.#state === "aborted") return;
    if (this.#state === "committed" || this.#state === "committing") {
      throw new Error(`transaction ${this.transactionId} is ${this.#state}: it cannot be aborted`);
    }
    const before = this.#state;
    this.#state = "aborted";
    try {
      await this.#api.abortTransaction(this.transactionId);
    } catch (e) {
      if (e instanceof TransactionCommittedError) this.#state = "committed";
      // Not answered: it may still be open (or, after an unknown commit, committed).
      else if (!(e instanceof FenceApiError)) this.#state = before;
      throw e;
    }
  }

  /** Aborted here; the gateway is told to drop what it staged (best effort). */
  async #drop(): Promise<void> {
    this.#state = "aborted";
    await this.#api.abortTransaction(this.transactionId).catch(() => undefined);
  }
}
