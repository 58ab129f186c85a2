import { AccessDeniedError, type FenceApiError, LeaseLostError, LeaseNotFoundError } from "./errors.js";
import { type AuditReader, explainLeaseLoss, lossError } from "./lease-loss.js";
import {
  bindFencingToken,
  type CommandSender,
  type CommandWithStack,
  fencingTokenClient,
} from "./s3-plugin.js";
import { Transaction, type TransactionApi, type TransactionResult } from "./transaction.js";
import type { LeaseRecord } from "./types.js";

/** The calls a Lease handle makes (FenceClient has them). */
export type LeaseApi = {
  renew(leaseId: string, ttlMs?: number, opts?: { signal?: AbortSignal }): Promise<LeaseRecord>;
  release(leaseId: string): Promise<void>;
  /** The audit log, asked why a lease was lost when the gateway's answer does not say. */
  audit?: AuditReader;
} & Partial<TransactionApi>;

export type LeaseOptions = {
  /**
   * When to renew, as fractions of the TTL since the last renewal: a random point between
   * `from` and `to` (default 1/3 to 1/2), so that many holders do not renew in step.
   */
  renewAt?: { from: number; to: number };
  /** Called once when the lease is lost (its signal fires at the same time). */
  onLost?: (error: LeaseLostError) => void;
  /** Cancels the acquire (and its wait). */
  signal?: AbortSignal;
  /**
   * Whether release() releases the lease at the gateway (default true). A delegate, which may
   * renew a lease but not release it, attaches with false: release() then only stops renewing.
   */
  releases?: boolean;
};

export type LeaseState = "held" | "lost" | "released";

/**
 * How long the audit log is given to say why a lease was lost (broken, released, superseded)
 * before the loss is signalled with what the gateway's answer said. Writes through the handle
 * fail at once either way.
 */
const EXPLAIN_LOSS_MS = 1_000;

/** How soon a failed renewal is tried again: a quarter of the time left, within these bounds. */
const RETRY_MIN_MS = 50;
const RETRY_MAX_MS = 1_000;

/**
 * A held lease that renews itself in the background before it expires, and whose `signal`
 * fires (with a LeaseLostError) as soon as the lease is lost: the gateway refused a renewal
 * (expired, superseded, released or broken by someone else), or it could not be renewed before
 * its expiry as this process measures time (monotonic clock, counted from when the last
 * successful renewal was sent, so never later than the gateway's own expiry).
 *
 * Release it with `release()`, or let `await using` do it.
 */
export class Lease implements AsyncDisposable {
  readonly #api: LeaseApi;
  readonly #controller = new AbortController();
  readonly #renewAt: { from: number; to: number };
  readonly #onLost: ((error: LeaseLostError) => void) | undefined;
  readonly #releases: boolean;
  #record: LeaseRecord;
  #state: LeaseState = "held";
  /** Set once lost: the error throwIfLost() throws (and the signal's reason, once it fired). */
  #lostError: LeaseLostError | undefined;
  /** performance.now() by which the lease is surely renewed or gone. */
  #deadline: number;
  #renewTimer: NodeJS.Timeout | undefined;
  #expiryTimer: NodeJS.Timeout | undefined;

  constructor(api: LeaseApi, record: LeaseRecord, opts: LeaseOptions & { sentAt: number }) {
    this.#api = api;
    this.#record = record;
    this.#renewAt = opts.renewAt ?? { from: 1 / 3, to: 1 / 2 };
    this.#onLost = opts.onLost;
    this.#releases = opts.releases ?? true;
    this.#deadline = opts.sentAt + record.ttlMs;
    this.#armExpiry();
    this.#scheduleRenewal();
  }

  /** Fires when the lease is lost; its `reason` is the LeaseLostError. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }
  get state(): LeaseState {
    return this.#state;
  }
  get lost(): boolean {
    return this.#state === "lost";
  }
  /** The lease as the gateway last sent it. */
  get record(): LeaseRecord {
    return this.#record;
  }
  get leaseId(): string {
    return this.#record.leaseId;
  }
  get token(): number {
    return this.#record.token;
  }
  /** The signed string a write carries (header `x-fence-token`). */
  get fencingToken(): string {
    return this.#record.fencingToken;
  }
  get bucket(): string {
    return this.#record.bucket;
  }
  get key(): string | undefined {
    return this.#record.key;
  }
  get prefix(): string | undefined {
    return this.#record.prefix;
  }
  get expiresAt(): string {
    return this.#record.expiresAt;
  }

  /** Throws the LeaseLostError if the lease is lost, or an error if it was released. */
  throwIfLost(): void {
    if (this.#state === "lost") throw this.#lostError;
    if (this.#state === "released") throw new Error(`lease ${this.leaseId} was released`);
  }

  /**
   * Binds this lease's token to one S3 command: it carries `x-fence-token` (if it is a write),
   * whichever client sends it; a write after the lease was lost fails without being sent.
   * Returns the command.
   *
   *     await s3.send(lease.bind(new PutObjectCommand({ Bucket, Key, Body })));
   */
  bind<C extends CommandWithStack>(command: C): C {
    return bindFencingToken(command, this);
  }

  /**
   * A view of a (shared) S3Client that sends with this lease's token: every write sent through
   * it carries the token, and the client itself is left unchanged, so other leases can use it at
   * the same time through views of their own. The view is an S3Client (its prototype is the
   * client): pass it to `Upload`, paginators or waiters as well.
   *
   *     const fenced = lease.s3(s3);
   *     await fenced.send(new PutObjectCommand({ Bucket, Key, Body }));
   */
  s3<C extends CommandSender>(client: C): C {
    return fencingTokenClient(client, this);
  }

  /**
   * Opens a fenced transaction under this lease and returns its handle: writes sent through it
   * (`tx.bind(command)`, `tx.s3(client)`, `tx.plugin()`) are staged, and become visible all
   * together at `tx.commit()`, or none at `tx.abort()`. `transaction(fn)` does the commit and
   * the abort for you.
   */
  async openTransaction(): Promise<Transaction> {
    this.throwIfLost();
    const api = this.#transactionApi();
    const record = await api.openTransaction(this.leaseId, { signal: this.#controller.signal });
    return new Transaction(this, api, record);
  }

  /**
   * Runs `fn` inside a fenced transaction of this lease: opens it, gives `fn` its handle `tx`
   * (send writes with `tx.bind(command)` or through `tx.s3(client)`; they are invisible to other
   * readers meanwhile), and when `fn`'s promise settles:
   * - resolves: commits, and resolves with `{ value, commit }`: `value` is what `fn` returned,
   *   `commit` the gateway's answer (`transactionId`, `token`, and every object made visible);
   * - rejects: aborts (best effort; an abort that fails is not reported) and rejects with `fn`'s
   *   error. Nothing of the transaction is visible.
   *
   * If the lease is lost meanwhile, it rejects at once with the LeaseLostError (without waiting
   * for `fn`, as `using()` does); the gateway aborts the transaction with its lease. A refused
   * commit rejects with the gateway's error (StaleFencingTokenError, LeaseLostError with code
   * LeaseExpired, TransactionAbortedError): nothing is visible. A commit whose outcome is
   * unknown rejects with an OutcomeUnknownError, which is not a refusal: it may have committed.
   * Commit again to learn the outcome (it is idempotent): `tx.commit()`, or
   * `client.commitTransaction(error.transactionId)`.
   *
   *     const { value, commit } = await lease.transaction(async (tx) => {
   *       await s3.send(tx.bind(new PutObjectCommand({ Bucket, Key: "data", Body })));
   *       await s3.send(tx.bind(new PutObjectCommand({ Bucket, Key: "index", Body: index })));
   *       return index.length;
   *     });
   */
  async transaction<T>(fn: (tx: Transaction) => Promise<T> | T): Promise<TransactionResult<T>> {
    const tx = await this.openTransaction();
    const value = await whileHeld(
      this.signal,
      () => fn(tx),
      () => tx.abort(),
    );
    return { value, commit: await tx.commit() };
  }

  /** Renews now (the background renewal does this by itself). */
  async renew(ttlMs?: number): Promise<LeaseRecord> {
    this.throwIfLost();
    try {
      return await this.#renewOnce(ttlMs ?? this.#record.ttlMs);
    } catch (e) {
      if (isLoss(e)) this.#lose(e);
      throw this.#state === "lost" ? this.#lostError : e;
    }
  }

  /** Stops renewing and releases the lease (nothing to do if it was lost or released already). */
  async release(): Promise<void> {
    if (this.#state !== "held") return;
    this.#state = "released";
    this.#stopTimers();
    if (!this.#releases) return;
    try {
      await this.#api.release(this.leaseId);
    } catch (e) {
      // Gone already (expired and collected, or released by someone else): nothing to release.
      if (!(e instanceof LeaseNotFoundError)) throw e;
    }
  }

  /**
   * Stops renewing without releasing: the lease stays with whoever else renews it (a delegate, or
   * a later process that attaches by its id), or expires.
   */
  detach(): void {
    if (this.#state !== "held") return;
    this.#state = "released";
    this.#stopTimers();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  #transactionApi(): TransactionApi {
    const api = this.#api;
    if (!api.openTransaction || !api.transactionState || !api.commitTransaction || !api.abortTransaction) {
      throw new Error("this Lease handle's API has no transaction calls (give it a FenceClient)");
    }
    return api as TransactionApi;
  }

  /** One renewal; its answer, while the lease is held, starts a new term from when it was sent. */
  async #renewOnce(ttlMs: number): Promise<LeaseRecord> {
    const sentAt = performance.now();
    const record = await this.#api.renew(this.leaseId, ttlMs, { signal: this.#controller.signal });
    if (this.#state === "held") {
      this.#record = record;
      this.#deadline = sentAt + record.ttlMs;
      this.#armExpiry();
      this.#scheduleRenewal();
    }
    return record;
  }

  #scheduleRenewal(): void {
    clearTimeout(this.#renewTimer);
    const { from, to } = this.#renewAt;
    this.#renewIn(this.#record.ttlMs * (from + Math.random() * (to - from)));
  }

  #renewIn(ms: number): void {
    this.#renewTimer = setTimeout(() => void this.#backgroundRenew(), ms);
    // A forgotten lease must not keep the process alive; it then expires at the gateway.
    this.#renewTimer.unref();
  }

  async #backgroundRenew(): Promise<void> {
    if (this.#state !== "held") return;
    try {
      await this.#renewOnce(this.#record.ttlMs);
    } catch (e) {
      if (this.#state !== "held") return;
      if (isLoss(e)) {
        this.#lose(e);
        return;
      }
      // Not an answer about the lease (connection, 5xx): try again while it can still be alive;
      // the expiry timer ends it if no renewal gets through in time.
      const left = this.#deadline - performance.now();
      this.#renewIn(Math.min(RETRY_MAX_MS, Math.max(RETRY_MIN_MS, left / 4)));
    }
  }

  #armExpiry(): void {
    clearTimeout(this.#expiryTimer);
    const left = Math.max(0, this.#deadline - performance.now());
    this.#expiryTimer = setTimeout(() => {
      // Measured here: nothing was answered, so nothing else is known.
      this.#lose(lossError(this.leaseId, { reason: "expired" }), false);
    }, left);
    this.#expiryTimer.unref();
  }

  /**
   * Ends the handle at once (writes through it fail from now on), then signals the loss: after
   * asking the audit log why (bounded by EXPLAIN_LOSS_MS) when the gateway refused the lease,
   * since its answer says "released" for a break too and "expired" for a superseded lease.
   */
  #lose(cause: FenceApiError, explain = true): void {
    if (this.#state !== "held") return;
    this.#state = "lost";
    this.#stopTimers();
    const answered =
      cause instanceof LeaseLostError && cause.reason !== "unknown"
        ? { reason: cause.reason, supersededBy: cause.supersededBy, by: cause.by }
        : null;
    const provisional = lossError(this.leaseId, answered, cause);
    this.#lostError = provisional;
    const audit = this.#api.audit;
    if (!explain || !audit) {
      this.#signalLoss(provisional);
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<null>((resolve) => {
      timer = setTimeout(() => resolve(null), EXPLAIN_LOSS_MS);
      timer.unref();
    });
    void Promise.race([
      explainLeaseLoss((q) => audit.call(this.#api, q), this.#record).catch(() => null),
      bound,
    ]).then((why) => {
      clearTimeout(timer);
      const error = why ? lossError(this.leaseId, why, cause) : provisional;
      this.#lostError = error;
      this.#signalLoss(error);
    });
  }

  #signalLoss(error: LeaseLostError): void {
    this.#controller.abort(error);
    this.#onLost?.(error);
  }

  #stopTimers(): void {
    clearTimeout(this.#renewTimer);
    clearTimeout(this.#expiryTimer);
  }
}

/**
 * Runs `fn` while a lease is held: resolves with what it resolves with, or rejects at once with
 * the LeaseLostError when `lost` fires first, without waiting for `fn`. On either rejection,
 * `undo` runs first (best effort: its own failure is not reported).
 */
export async function whileHeld<T>(
  lost: AbortSignal,
  fn: () => Promise<T> | T,
  undo: () => Promise<unknown>,
): Promise<T> {
  const work = Promise.resolve().then(fn);
  const loss = new Promise<never>((_, reject) => {
    const fail = () => reject(lost.reason);
    if (lost.aborted) fail();
    else lost.addEventListener("abort", fail, { once: true });
  });
  // Whichever loses the race must not become an unhandled rejection.
  work.catch(() => undefined);
  loss.catch(() => undefined);
  try {
    return await Promise.race([work, loss]);
  } catch (e) {
    await undo().catch(() => undefined);
    throw e;
  }
}

/** Answers that say this holder no longer has the lease. */
function isLoss(e: unknown): e is FenceApiError {
  return e instanceof LeaseLostError || e instanceof LeaseNotFoundError || e instanceof AccessDeniedError;
}
