import type { Readable } from "node:stream";
import { abandoned, type CallContext, toDomainError } from "./azure-errors.js";

/**
 * Every call to Azure goes through here: it gets its own deadline (requestTimeoutMs, across the
 * SDK's own retries) and follows the caller's AbortSignal (a client that went away), and its
 * failure becomes a DomainError. No call can hang a request.
 */
export class AzureCalls {
  constructor(readonly timeoutMs: number) {}

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
      return await fn(call.signal);
    } catch (e) {
      if (expected?.(e) && !call.ctx.timedOut && !call.ctx.abandoned) throw e;
      throw toDomainError(e, call.ctx);
    } finally {
      call.settle();
      call.release();
    }
  }

  /**
   * A call whose answer carries a body stream (a download): the deadline covers the answer's
   * headers only (a large body may take longer), the caller's signal also covers the body, which
   * then errors and stops.
   */
  async runStream<T>(
    what: string,
    signal: AbortSignal | undefined,
    fn: (abortSignal: AbortSignal) => Promise<T>,
    streamOf: (value: T) => Readable | undefined,
    expected?: (e: unknown) => boolean,
  ): Promise<T> {
    const call = this.start(what, signal);
    let value: T;
    try {
      value = await fn(call.signal);
    } catch (e) {
      call.settle();
      call.release();
      if (expected?.(e) && !call.ctx.timedOut && !call.ctx.abandoned) throw e;
      throw toDomainError(e, call.ctx);
    }
    call.settle();
    const stream = streamOf(value);
    if (!stream) call.release();
    else stream.once("close", call.release);
    return value;
  }

  private start(what: string, signal: AbortSignal | undefined) {
    if (signal?.aborted) throw abandoned();
    const controller = new AbortController();
    const ctx: CallContext = { what, timeoutMs: this.timeoutMs };
    const onAbort = () => {
      ctx.abandoned = true;
      controller.abort();
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    const timer = setTimeout(() => {
      ctx.timedOut = true;
      controller.abort();
    }, this.timeoutMs);
    return {
      signal: controller.signal,
      ctx,
      settle: () => clearTimeout(timer),
      release: () => signal?.removeEventListener("abort", onAbort),
    };
  }
}
