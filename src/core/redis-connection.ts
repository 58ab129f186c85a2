import type { EventEmitter } from "node:events";
import { Redis } from "ioredis";
import type { Logger } from "./log.js";

/**
 * The one place ioredis connections are made (the Redis and Redlock lease stores, the Redis audit
 * log), and the one check that a connection fails closed.
 *
 * Failing closed: no offline queue, no retries of a command and no resending of unanswered
 * commands after a reconnect, and a command timeout. A command to an unreachable or hung Redis
 * then fails at once or within the timeout (the caller answers 503), instead of waiting, or
 * running later, or twice: a lease script resent after a reconnect could grant a second time, or
 * append a record twice, after its caller already answered. The connection is made in the
 * background and made again for ever, at most a second apart, so service resumes by itself.
 */
type FailClosedOptions = {
  /** Command and connect timeout (ms). */
  timeoutMs: number;
};

export function openFailClosedRedis(url: string, opts: FailClosedOptions): Redis {
  const redis = new Redis(url, {
    enableOfflineQueue: false,
    autoResendUnfulfilledCommands: false,
    maxRetriesPerRequest: 0,
    commandTimeout: opts.timeoutMs,
    connectTimeout: opts.timeoutMs,
    retryStrategy: (times) => Math.min(50 * times, 1_000),
  });
  assertFailClosed(redis);
  return redis;
}

/**
 * Logs the errors of `redis` (redactUrl'd `where`) as warnings `what`, each message once until
 * another comes or the connection is ready again: a Redis that stays down is one line, not one a
 * second.
 */
export function warnOnErrors(redis: Redis, log: Logger | undefined, what: string, where: string): void {
  let lastError = "";
  redis.on("error", (e: Error) => {
    if (e.message !== lastError) log?.warn({ err: e.message, redis: where }, what);
    lastError = e.message;
  });
  redis.on("ready", () => {
    lastError = "";
  });
}

/** Resolves true when `emitter` emits `event` within `ms`, false otherwise. */
export function eventWithin(
  emitter: Pick<EventEmitter, "on" | "off">,
  event: string,
  ms: number,
): Promise<boolean> {
  return new Promise((resolve) => {
    const done = (ok: boolean) => {
      clearTimeout(timer);
      emitter.off(event, onEvent);
      resolve(ok);
    };
    const onEvent = () => done(true);
    const timer = setTimeout(() => done(false), ms);
    emitter.on(event, onEvent);
  });
}

/** What keeps `redis` from failing closed (empty when it does). */
export function failClosedProblems(redis: Redis): string[] {
  const o = redis.options;
  const problems: string[] = [];
  if (o.enableOfflineQueue !== false)
    problems.push("enableOfflineQueue is not false (commands wait while disconnected)");
  if (o.autoResendUnfulfilledCommands !== false) {
    problems.push(
      "autoResendUnfulfilledCommands is not false (unanswered commands run again after a reconnect)",
    );
  }
  if (o.maxRetriesPerRequest !== 0)
    problems.push("maxRetriesPerRequest is not 0 (a failed command is retried)");
  if (!(typeof o.commandTimeout === "number" && o.commandTimeout > 0)) {
    problems.push("commandTimeout is not set (a command to a hung Redis never answers)");
  }
  return problems;
}

/**
 * Throws unless `redis` fails closed (see openFailClosedRedis): every component that runs
 * commands on a connection it was given checks it first, so a connection opened elsewhere with
 * ioredis's defaults (which queue, retry and resend) is refused at start.
 */
export function assertFailClosed(redis: Redis, what = "a Redis connection"): void {
  const problems = failClosedProblems(redis);
  if (problems.length > 0) throw new Error(`${what} must fail closed: ${problems.join("; ")}`);
}

/**
 * A connection for subscriptions only, beside `redis`: unlike a command connection it queues and
 * subscribes again after a reconnect, since a wake-up is a hint (missed ones are caught up by
 * whoever listens), never a decision. Never run commands that change anything on it.
 */
export function openSubscriber(redis: Redis): Redis {
  return redis.duplicate({
    enableOfflineQueue: true,
    autoResubscribe: true,
    maxRetriesPerRequest: null,
    commandTimeout: undefined,
  });
}

/** The URL without its password, for messages and logs. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return "(unparsable URL)";
  }
}
