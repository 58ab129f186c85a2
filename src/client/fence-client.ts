import {
  apiError,
  errorFields,
  FENCE_OUTCOME_HEADER,
  FenceApiError,
  FenceConnectionError,
  LeaseNotFoundError,
  OutcomeUnknownError,
  TransactionNotFoundError,
} from "./errors.js";
import { Lease, type LeaseOptions, whileHeld } from "./lease.js";
import { SigV4Signer } from "./sigv4-signer.js";
import { fetchTransport, type Transport } from "./transport.js";
import type {
  AcquireRequest,
  AuditQuery,
  AuditRecord,
  Delegate,
  LeaseRecord,
  LeaseResource,
  LeaseView,
  NewDelegate,
  TransactionCommit,
  TransactionRecord,
  TransactionView,
} from "./types.js";

export type RetryOptions = {
  /** Attempts in all, the first included (default 4; 1 turns retries off). */
  attempts?: number;
  /** The first backoff; each next one doubles, with full jitter (default 100 ms). */
  baseDelayMs?: number;
  /** The longest backoff (default 2 s). */
  maxDelayMs?: number;
};

export type FenceClientOptions = {
  /** The gateway, e.g. http://127.0.0.1:9700 */
  endpoint: string;
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
  /** The region requests are signed for (default us-east-1; the gateway accepts any). */
  region?: string;
  retry?: RetryOptions;
  /** How long one attempt may take, on top of an acquire's waitMs (default 30 s). */
  timeoutMs?: number;
  /** How signed requests are sent (default: Node's fetch; see transport.ts). */
  transport?: Transport;
};

export type CallOptions = {
  /**
   * The call may be repeated without changing its effect, so it is retried after a broken
   * connection or a 5xx. Calls that are not are retried only when the request certainly never
   * reached the gateway.
   */
  idempotent?: boolean;
  signal?: AbortSignal;
  /** Extra time for this call's attempts (an acquire's waitMs). */
  extraTimeoutMs?: number;
  /** Told of each failed attempt, the last one included, before it is retried or thrown. */
  onFailure?: (error: unknown) => void;
};

const DEFAULT_TTL_MS = 30_000;

/**
 * A client of the fencegate lease API: every request signed with SigV4 (service s3), error
 * answers thrown as typed errors (errors.ts), and only safe retries.
 *
 * `acquire`, `show`, `renew`, `release`, `breakLease`, `delegate`, `listDelegates`,
 * `revokeDelegate`, `list`, `audit`, `health`, `openTransaction`, `transactionState`,
 * `commitTransaction` and `abortTransaction` are the API's calls, one each. `lease()` returns a
 * Lease handle that renews itself; `attach()` one for an existing lease; `using()` runs a function
 * while holding a lease; `lease.transaction()` runs one inside a fenced transaction.
 */
export class FenceClient {
  private readonly signer: SigV4Signer;
  private readonly transport: Transport;
  private readonly base: URL;
  private readonly retry: Required<RetryOptions>;
  private readonly timeoutMs: number;

  constructor(opts: FenceClientOptions) {
    this.base = new URL(opts.endpoint);
    this.signer = new SigV4Signer(
      {
        accessKeyId: opts.accessKeyId,
        secretAccessKey: opts.secretAccessKey,
        sessionToken: opts.sessionToken,
      },
      opts.region ?? "us-east-1",
    );
    this.transport = opts.transport ?? fetchTransport;
    this.retry = {
      attempts: Math.max(1, opts.retry?.attempts ?? 4),
      baseDelayMs: opts.retry?.baseDelayMs ?? 100,
      maxDelayMs: opts.retry?.maxDelayMs ?? 2_000,
    };
    this.timeoutMs = opts.timeoutMs ?? 30_000;
  }

  /** The gateway's address. */
  get endpoint(): string {
    return this.base.href;
  }

  /**
   * POST /_fence/v1/leases. Not idempotent (each grant takes a new token), so it is retried only
   * when the request never reached the gateway.
   */
  acquire(req: AcquireRequest, opts: { signal?: AbortSignal } = {}): Promise<LeaseRecord> {
    return this.request("POST", "/_fence/v1/leases", {
      body: req,
      signal: opts.signal,
      extraTimeoutMs: req.waitMs ?? 0,
    });
  }

  /** The lease; `fencingToken` only for the key that acquired it, its delegates and administrators. */
  show(leaseId: string): Promise<LeaseView> {
    return this.request("GET", leasePath(leaseId));
  }

  /** Renewing twice has the effect of renewing once, so renewals are retried. */
  renew(leaseId: string, ttlMs?: number, opts: { signal?: AbortSignal } = {}): Promise<LeaseRecord> {
    const body = ttlMs === undefined ? {} : { ttlMs };
    return this.request("POST", `${leasePath(leaseId)}/renew`, {
      body,
      idempotent: true,
      signal: opts.signal,
    });
  }

  /**
   * DELETE the lease. Retried; a retry that finds the lease gone (404 after an attempt whose
   * answer was lost) counts as released.
   */
  async release(leaseId: string): Promise<void> {
    await this.remove(leasePath(leaseId), LeaseNotFoundError);
  }

  /**
   * POST /_fence/v1/leases/{leaseId}/break (administrators only): ends the lease whoever holds
   * it and raises the fencing floor of what it covered, so the old holder's next write is
   * refused. Not retried unless the request never reached the gateway (a retry of a break that
   * was applied would answer 404 without the floor token).
   */
  breakLease(leaseId: string): Promise<LeaseRecord & { floorToken: number }> {
    return this.request("POST", `${leasePath(leaseId)}/break`);
  }

  /**
   * POST …/delegates: a credential for a worker that keeps this lease alive and writes with its
   * token (FenceClient with it, then attach(leaseId, { releases: false })). Not retried unless
   * never sent: each call makes a new delegate.
   */
  delegate(leaseId: string): Promise<NewDelegate> {
    return this.request("POST", `${leasePath(leaseId)}/delegates`);
  }

  listDelegates(leaseId: string): Promise<{ delegates: Delegate[] }> {
    return this.request("GET", `${leasePath(leaseId)}/delegates`);
  }

  /** DELETE …/delegates/{delegateId}: the delegate's credential stops working at once. */
  async revokeDelegate(leaseId: string, delegateId: string): Promise<void> {
    const path = `${leasePath(leaseId)}/delegates/${encodeURIComponent(delegateId)}`;
    await this.request("DELETE", path, { idempotent: true });
  }

  list(filter: { bucket?: string; prefix?: string } = {}): Promise<{ leases: LeaseView[] }> {
    return this.request("GET", "/_fence/v1/leases", { query: filter });
  }

  audit(query: AuditQuery = {}): Promise<{ records: AuditRecord[]; nextCursor: string | null }> {
    const q = Object.fromEntries(
      Object.entries(query).map(([k, v]) => [k, v === undefined ? undefined : String(v)]),
    );
    return this.request("GET", "/_fence/v1/audit", { query: q });
  }

  /** GET /_fence/v1/health: resolves with the status, throws (503) when a dependency is down. */
  health(): Promise<{ status: string } & Record<string, unknown>> {
    return this.request("GET", "/_fence/v1/health");
  }

  /**
   * POST /_fence/v1/leases/{leaseId}/transactions: opens a fenced transaction under the lease.
   * Writes that carry the lease's token and `x-fence-transaction: <transactionId>` are staged,
   * invisible to other readers until `commitTransaction`. Not retried unless never sent (each
   * call opens a new transaction). Throws LeaseNotFoundError, LeaseLostError, AccessDeniedError.
   */
  openTransaction(leaseId: string, opts: { signal?: AbortSignal } = {}): Promise<TransactionRecord> {
    return this.request("POST", `${leasePath(leaseId)}/transactions`, { body: {}, signal: opts.signal });
  }

  /** GET /_fence/v1/transactions/{id}: its state and objects. Throws TransactionNotFoundError. */
  transactionState(transactionId: string): Promise<TransactionView> {
    return this.request("GET", transactionPath(transactionId));
  }

  /**
   * POST /_fence/v1/transactions/{id}/commit: makes every staged write of the transaction visible
   * at once, or none. A commit is idempotent (a commit of a committed transaction answers the
   * same 200), so it is retried after a broken connection or a 5xx.
   *
   * Refusals (nothing is visible): StaleFencingTokenError, LeaseLostError (code LeaseExpired),
   * TransactionAbortedError (409); TransactionNotFoundError (404). When the gateway answered
   * `503 x-fence-outcome: unknown`, or an attempt may have reached it and no later attempt got an
   * answer, it throws an OutcomeUnknownError: the commit may have happened, and is not reported
   * as refused. Commit again (or read transactionState) to learn what happened.
   */
  async commitTransaction(
    transactionId: string,
    opts: { signal?: AbortSignal } = {},
  ): Promise<TransactionCommit> {
    // Whether an attempt may have committed without this client learning it.
    let unknown: { error: unknown } | undefined;
    const onFailure = (e: unknown) => {
      if (e instanceof OutcomeUnknownError || (e instanceof FenceConnectionError && !e.notSent)) {
        unknown = { error: e };
      }
    };
    const path = `${transactionPath(transactionId)}/commit`;
    try {
      return await this.request("POST", path, { idempotent: true, signal: opts.signal, onFailure });
    } catch (e) {
      if (e instanceof OutcomeUnknownError) {
        e.transactionId = transactionId;
        throw e;
      }
      // A later answer that says nothing of the outcome (the gateway unreachable, another 5xx)
      // leaves the outcome of an earlier attempt unknown.
      const silent = e instanceof FenceConnectionError || (e instanceof FenceApiError && e.status >= 500);
      if (unknown && silent) {
        const first = unknown.error;
        const answered = first instanceof FenceApiError ? first : undefined;
        const error = new OutcomeUnknownError(
          {
            status: answered?.status ?? 0,
            code: "OutcomeUnknown",
            message:
              `the outcome of the commit of transaction ${transactionId} is unknown (it may have ` +
              `committed): ${(first as Error).message}; commit again or read its state to learn it`,
            body: answered?.body,
            requestId: answered?.requestId,
          },
          { cause: e },
        );
        error.transactionId = transactionId;
        throw error;
      }
      throw e;
    }
  }

  /**
   * DELETE /_fence/v1/transactions/{id}: aborts it; none of its writes becomes visible. Retried; a
   * retry that finds it gone (404 after an attempt whose answer was lost) counts as aborted.
   * Throws TransactionCommittedError when it was committed.
   */
  async abortTransaction(transactionId: string): Promise<void> {
    await this.remove(transactionPath(transactionId), TransactionNotFoundError);
  }

  /**
   * Acquires a lease and keeps it renewed in the background until it is released or lost
   * (its `signal` then fires). Defaults: ttlMs 30 s.
   */
  async lease(req: LeaseResource & Partial<AcquireRequest> & LeaseOptions): Promise<Lease> {
    const { renewAt, onLost, signal, releases, ...rest } = req;
    const ttlMs = rest.ttlMs ?? DEFAULT_TTL_MS;
    const sentAt = performance.now();
    const record = await this.acquire({ ...rest, ttlMs } as AcquireRequest, { signal });
    return new Lease(this, record, { sentAt, renewAt, onLost, releases });
  }

  /**
   * A Lease handle for a lease that exists already: another process's (this one may renew it, as
   * a delegate or with the same access key), or this program's own before a restart. Renews it
   * once at once (which also proves it is still alive and fetches its token), then in the
   * background. With `releases: false` (a delegate), release() only stops renewing.
   */
  async attach(leaseId: string, opts: LeaseOptions = {}): Promise<Lease> {
    const sentAt = performance.now();
    const record = await this.renew(leaseId, undefined, { signal: opts.signal });
    return new Lease(this, record, { ...opts, sentAt });
  }

  /**
   * Runs `fn` while holding a lease: acquires it, renews it in the background, releases it when
   * `fn` settles. If the lease is lost meanwhile, `lease.signal` fires (pass it to the work) and
   * `using` rejects at once with the LeaseLostError, without waiting for `fn`.
   */
  async using<T>(
    req: LeaseResource & Partial<AcquireRequest> & LeaseOptions,
    fn: (lease: Lease) => Promise<T> | T,
  ): Promise<T> {
    const lease = await this.lease(req);
    const result = await whileHeld(
      lease.signal,
      () => fn(lease),
      () => lease.release(),
    );
    await lease.release();
    return result;
  }

  /**
   * One signed call with the retries its kind allows. `onAttempt` is told of each attempt.
   * Throws a FenceApiError (or subclass) for an error answer, FenceConnectionError when the
   * gateway could not be reached.
   */
  async call(
    method: string,
    path: string,
    body?: unknown,
    query: Record<string, string | undefined> = {},
    opts: CallOptions = {},
    onAttempt?: () => void,
  ): Promise<unknown> {
    const idempotent = opts.idempotent ?? (method === "GET" || method === "HEAD");
    for (let attempt = 1; ; attempt++) {
      onAttempt?.();
      try {
        return await this.once(method, path, body, query, opts);
      } catch (e) {
        opts.onFailure?.(e);
        const retryable =
          (e instanceof FenceConnectionError && (e.notSent || idempotent)) ||
          (e instanceof FenceApiError && idempotent && e.status >= 500);
        if (!retryable || attempt >= this.retry.attempts || opts.signal?.aborted) throw e;
        const cap = Math.min(this.retry.maxDelayMs, this.retry.baseDelayMs * 2 ** (attempt - 1));
        await delay(Math.random() * cap, opts.signal);
      }
    }
  }

  /** `call` with its body and query among the options, answering JSON of type T. */
  private request<T>(
    method: string,
    path: string,
    opts: CallOptions & { body?: unknown; query?: Record<string, string | undefined> } = {},
  ): Promise<T> {
    return this.call(method, path, opts.body, opts.query, opts) as Promise<T>;
  }

  /**
   * DELETE, retried; a retry that finds the resource gone (`notFound` after an attempt whose
   * answer was lost) counts as done.
   */
  private async remove(path: string, notFound: typeof FenceApiError): Promise<void> {
    let attempts = 0;
    try {
      await this.call("DELETE", path, undefined, {}, { idempotent: true }, () => attempts++);
    } catch (e) {
      if (e instanceof notFound && attempts > 1) return;
      throw e;
    }
  }

  private async once(
    method: string,
    path: string,
    body: unknown,
    query: Record<string, string | undefined>,
    opts: CallOptions,
  ): Promise<unknown> {
    const q: Record<string, string> = {};
    for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== "") q[k] = v;
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const basePath = this.base.pathname.replace(/\/$/, "");
    const signed = this.signer.sign({
      method,
      host: this.base.host,
      path: basePath + path,
      query: q,
      headers: payload !== undefined ? { "content-type": "application/json" } : {},
      body: payload,
    });
    // The query exactly as it was signed (RFC 3986, not form encoding).
    const url = new URL(basePath + path + (signed.search ? `?${signed.search}` : ""), this.base);
    const timeout = AbortSignal.timeout(this.timeoutMs + (opts.extraTimeoutMs ?? 0));
    const signal = opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout;
    let res: Awaited<ReturnType<Transport>>;
    try {
      res = await this.transport({ method, url, headers: signed.headers, body: payload, signal });
    } catch (e) {
      if (opts.signal?.aborted) throw opts.signal.reason;
      throw connectionError(e, url);
    }
    const text = res.text;
    const parsed = text ? safeJson(text) : undefined;
    if (res.status < 200 || res.status > 299) {
      const err = errorFields(parsed) as { code?: string; message?: string } | undefined;
      throw apiError(
        {
          status: res.status,
          code: err?.code ?? `HTTP${res.status}`,
          message: err?.message ?? (text || res.statusText),
          body: parsed,
          requestId: res.header("x-amz-request-id"),
        },
        res.header(FENCE_OUTCOME_HEADER),
      );
    }
    return parsed;
  }
}

function leasePath(leaseId: string): string {
  return `/_fence/v1/leases/${encodeURIComponent(leaseId)}`;
}

function transactionPath(transactionId: string): string {
  return `/_fence/v1/transactions/${encodeURIComponent(transactionId)}`;
}

/** Errors that happen before a connection exists: the request never reached the gateway. */
const NOT_SENT = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH"]);

function connectionError(e: unknown, url: URL): FenceConnectionError {
  // fetch wraps the socket's error in `cause`; node:http rejects with it directly.
  const err = e as {
    code?: string;
    name?: string;
    message?: string;
    cause?: { code?: string; message?: string };
  };
  const code = err.cause?.code ?? err.code ?? err.name ?? "";
  const why = err.cause?.message ?? err.message;
  return new FenceConnectionError(`cannot reach the gateway at ${url.origin}: ${why}`, NOT_SENT.has(code), {
    cause: e,
  });
}

function delay(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
