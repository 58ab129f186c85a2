import pino, { type Logger } from "pino";

export type { Logger };

/**
 * What the request log line says about one request besides its method, path, status and
 * duration: filled in by the handler as it learns it (src/s3/handler.ts, src/api/lease-api.ts,
 * src/console/console-app.ts), logged by the gateway
 * once the answer is ready. `token` is the fencing token's number, never the signed string.
 */
export type RequestSummary = {
  principal?: string | null;
  operation?: string;
  bucket?: string | null;
  key?: string | null;
  /** The prefix of a prefix lease (lease API and console requests). */
  prefix?: string;
  token?: number | null;
  /** The lease a lease API or console request was about. */
  leaseId?: string;
  /** accepted, rejected, or unknown (the outcome of a write the store did not answer). */
  decision?: "accepted" | "rejected" | "unknown";
  /** The error code of a refused or failed request. */
  code?: string;
};

/**
 * JSON logs on stdout. Secrets never reach a log line: credentials, signatures, fencing
 * token strings and the Authorization header are redacted wherever they appear.
 *
 * Writing never blocks the event loop: lines go to an asynchronous destination (sonic-boom,
 * sync: false) that writes whatever has piled up while the previous write was in flight. pino
 * flushes it synchronously when the process exits normally (process.exit, the end of the
 * event loop), and flushLogger() flushes it on a graceful shutdown. A log line still buffered
 * when the process is killed with SIGKILL is lost; nothing else depends on it.
 */
export function createLogger(
  level: string,
  base: Record<string, unknown> = {},
  destination?: pino.DestinationStream,
): Logger {
  const options: pino.LoggerOptions = {
    level,
    base: { pid: process.pid, ...base },
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: {
      paths: [
        "authorization",
        "headers.authorization",
        "*.headers.authorization",
        'headers["x-fence-token"]',
        'headers["x-amz-meta-fence-token"]',
        'headers["x-amz-security-token"]',
        "secretAccessKey",
        "*.secretAccessKey",
        "fencingToken",
        "*.fencingToken",
        "tokenString",
        "secret",
        "*.secret",
      ],
      censor: "[redacted]",
    },
  };
  return pino(options, destination ?? stdoutDestination());
}

/**
 * Backlog bound: a stdout nobody reads must not grow the gateway without limit. Beyond it lines
 * are dropped (sonic-boom's maxLength), which is better than running out of memory.
 */
const MAX_BACKLOG_BYTES = 16 * 1024 * 1024;

let stdout: pino.DestinationStream | undefined;

/** One asynchronous stdout destination per process, shared by every logger. */
function stdoutDestination(): pino.DestinationStream {
  stdout ??= pino.destination({ dest: 1, sync: false, maxLength: MAX_BACKLOG_BYTES });
  return stdout;
}

/** Writes out what the logger has buffered (on shutdown); resolves once it is written. */
export function flushLogger(log: Logger): Promise<void> {
  return new Promise((resolve) => log.flush(() => resolve()));
}
