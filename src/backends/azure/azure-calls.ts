import type { Readable } from "node:stream";
import { type CallObserver, callOutcome } from "../../metrics/observe.js";
import { abandoned, type CallContext, toDomainError } from "./azure-errors.js";

/**
 * Every call to Azure goes through here: it gets its own deadline (requestTimeoutMs, across the
 * SDK's own retries and their backoff) and follows the caller's AbortSignal (a client that went
 * away), and its failure becomes a DomainError. No call can hang a request: a call that hits its
 * deadline fails with "no answer in time" (503) when the limit is up, whether or not the SDK has
 * noticed its abort signal yet.
 */
export class AzureCalls {
  constructor(
    readonly timeoutMs: number,
    /** Told of every call: its operation (from `what`), outcome and latency (metrics). */
    private readonly observe?: CallObserver,
  ) {}

  /**
   * Runs one call. Errors the caller handles itself (`expected`: a lost compare-and-swap, a
   * missing blob) come back as Azure raised them, unless the deadline or the caller's signal
   * caused them; every other error becomes a DomainError.
   */
  async run<T>(
    what: string,
    signal: AbortSignal | undefined,
    fn: (abortSignal: AbortSignal) => Promise<T>,
    expected?: (e: unknown) => boolean,
  ): Promise<T> {
    const call = this.start(what, signal);
    try {
      const value = await call.race(fn(call.signal));
      call.observed(undefined);
      return value;
    } catch (e) {
      call.observed(e);
      if (expected?.(e) && !call.ctx.timedOut && !call.ctx.abandoned) throw e;
      throw toDomainError(e, call.ctx);
    } finally {
      call.settle();
      call.release();
    }
  }

  /**
   * A call whose answer carries a body stream (a download): the deadline covers the answer's
   * headers; the body may then stream for as long as it moves, and is stopped once no byte came
   * for requestTimeoutMs while its reader was waiting for one (`fn` hands `onProgress` to the
   * SDK's download, which calls it for every chunk). The caller's signal also covers the body,
   * which then errors and stops.
   */
  async runStream<T>(
    what: string,
    signal: AbortSignal | undefined,
    fn: (abortSignal: AbortSignal, onProgress: () => void) => Promise<T>,
    streamOf: (value: T) => Readable | undefined,
    expected?: (e: unknown) => boolean,
  ): Promise<T> {
    const call = this.start(what, signal);
    let moved: () => void = () => undefined;
    let value: T;
    try {
      value = await call.race(fn(call.signal, () => moved()));
      call.observed(undefined);
    } catch (e) {
      call.observed(e);
      call.settle();
      call.release();
      if (expected?.(e) && !call.ctx.timedOut && !call.ctx.abandoned) throw e;
      throw toDomainError(e, call.ctx);
    }
    call.settle();
    const stream = streamOf(value);
    if (!stream) call.release();
    else {
      const idle = watchIdle(stream, this.timeoutMs, () =>
        toDomainError(new Error(`no bytes for ${this.timeoutMs} ms`), {
          ...call.ctx,
          what: `${what}, its body stalled`,
          timedOut: true,
        }),
      );
      moved = idle.moved;
      stream.once("close", () => {
        idle.stop();
        call.release();
      });
    }
    return value;
  }

  private start(what: string, signal: AbortSignal | undefined) {
    if (signal?.aborted) throw abandoned();
    const controller = new AbortController();
    const ctx: CallContext = { what, timeoutMs: this.timeoutMs };
    let expire: (e: Error) => void = () => undefined;
    const expired = new Promise<never>((_, reject) => {
      expire = reject;
    });
    expired.catch(() => undefined);
    const onAbort = () => {
      ctx.abandoned = true;
      controller.abort();
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    const started = performance.now();
    const observe = this.observe;
    const timer = setTimeout(() => {
      ctx.timedOut = true;
      const error = Object.assign(new Error(`no answer within ${this.timeoutMs} ms`), {
        name: "TimeoutError",
      });
      controller.abort(error);
      expire(error);
    }, this.timeoutMs);
    return {
      signal: controller.signal,
      ctx,
      race<T>(work: Promise<T>): Promise<T> {
        // What the SDK raises once it notices the abort, after the deadline answered, goes nowhere.
        work.catch(() => undefined);
        return Promise.race([work, expired]);
      },
      /** Tells the observer how the call ended (undefined: it answered). */
      observed: (e: unknown) => {
        if (!observe) return;
        const outcome = e === undefined ? "ok" : ctx.timedOut ? "timeout" : callOutcome(e);
        observe(operationOf(what), outcome, (performance.now() - started) / 1000);
      },
      settle: () => clearTimeout(timer),
      release: () => signal?.removeEventListener("abort", onAbort),
    };
  }
}

/**
 * Destroys `stream` with `error()` once `moved()` has not been called for `ms` while there was
 * room for more in its buffer: a reader that stopped reading (its buffer full) is not the store's
 * stall.
 */
function watchIdle(stream: Readable, ms: number, error: () => Error): { moved(): void; stop(): void } {
  let timer: NodeJS.Timeout | undefined;
  const arm = () => {
    clearTimeout(timer);
    timer = setTimeout(check, ms);
    timer.unref();
  };
  const check = () => {
    if (stream.destroyed || stream.readableEnded) return;
    // A full buffer is the reader's doing: the store had no room to send more.
    if (stream.readableLength < stream.readableHighWaterMark) stream.destroy(error());
    else arm();
  };
  arm();
  return { moved: arm, stop: () => clearTimeout(timer) };
}

/** Nouns that name what a call's verb acts on ("create container", "read part"). */
const OBJECTS = new Set(["container", "containers", "upload", "part", "account", "properties", "marker"]);

/**
 * A call's operation label from its description: its verb, and the kind of thing it acts on when
 * the description names one ("create container x" → create_container, "get b/k" → get). Only
 * words of fencegate's own code make it into the label, never a bucket, key or id.
 */
function operationOf(what: string): string {
  const words = what.split(" ");
  const verb = words[0] ?? "call";
  const next = words[1] === "the" ? words[2] : words[1];
  return next !== undefined && OBJECTS.has(next) ? `${verb}_${next}` : verb;
}
