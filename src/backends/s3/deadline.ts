/**
 * The time limit of one store call: everything the call does (the SDK's attempts, its backoff
 * between them, reading a small answer's body) ends within `ms`. The SDK's abort signal stops the
 * request on the wire; the race makes the call give up on time even where the SDK would not look
 * at the signal (credential lookups, its retry bookkeeping).
 */
type Deadline = {
  /** For the SDK: aborts at the deadline (reason: noAnswerInTime) or with the caller's signal. */
  signal: AbortSignal;
  /** `work`, or the deadline's error if the deadline comes first. */
  race<T>(work: Promise<T>): Promise<T>;
  /** Ends the deadline: a streamed answer's body is then bounded by its idle time alone. */
  clear(): void;
};

/**
 * The error a call that hit its deadline fails with: a TimeoutError (so that store-errors.ts
 * classifies it as unavailable, an unknown outcome for a write) that says "no answer in time" and
 * keeps what the SDK raised, if anything, as its cause.
 */
export function noAnswerInTime(ms: number, cause?: unknown): Error {
  return Object.assign(new Error(`no answer in time (${ms} ms)`, cause === undefined ? {} : { cause }), {
    name: "TimeoutError",
  });
}

export function startDeadline(ms: number, callerSignal?: AbortSignal): Deadline {
  const controller = new AbortController();
  let expire: (e: Error) => void = () => undefined;
  const expired = new Promise<never>((_, reject) => {
    expire = reject;
  });
  // Rejected only while a race listens; never an unhandled rejection.
  expired.catch(() => undefined);
  const timer = setTimeout(() => {
    const error = noAnswerInTime(ms);
    controller.abort(error);
    expire(error);
  }, ms);
  const signal = callerSignal ? AbortSignal.any([callerSignal, controller.signal]) : controller.signal;
  return {
    signal,
    race<T>(work: Promise<T>): Promise<T> {
      // The SDK's own rejection after the deadline answered goes nowhere.
      work.catch(() => undefined);
      return Promise.race([work, expired]);
    },
    clear: () => clearTimeout(timer),
  };
}
