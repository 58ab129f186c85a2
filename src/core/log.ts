import pino, { type Logger } from "pino";

export type { Logger };

/**
 * What the request log line says about one request besides its method, path, status and
 * duration: filled in by the handler as it learns it (src/s3-endpoint/handler.ts, src/api/lease-api.ts,
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

/** The paths pino redacts on every line of a logger made by createLogger. */
const REDACT_PATHS = [
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
];

/** Where createLogger keeps the logger without redaction that writes request lines. */
const REQUEST_LINES = Symbol("fencegate.requestLines");

/**
 * JSON logs on stdout. Secrets never reach a log line: credentials, signatures, fencing
 * token strings and the Authorization header are redacted wherever they appear.
 *
 * The one exception to the redaction, for speed, is the request line (logRequestLine): pino's
 * redaction, whose wildcard paths walk every field of every line, cost most of what a request
 * line costs (about 8-12 of 15 microseconds). That line is written by a sibling logger on the
 * same destination, with the same level and base fields and no redaction, and holds only the
 * fields logRequestLine copies one by one: ids, method, path (never its query string), status,
 * principal (an access key id), operation, bucket, key or prefix, token number, lease id,
 * decision, code and duration. None of them can hold a header, a credential or a signed token.
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
  const dest = destination ?? stdoutDestination();
  const options: pino.LoggerOptions = {
    level,
    base: { pid: process.pid, ...base },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  const log = pino({ ...options, redact: { paths: REDACT_PATHS, censor: "[redacted]" } }, dest);
  Object.defineProperty(log, REQUEST_LINES, { value: pino(options, dest), enumerable: false });
  return log;
}

/** What the request line says: method, path, status, duration and the request's summary. */
type RequestLine = {
  requestId: string;
  method: string;
  /** The path only: a query string may hold a presigned signature or a fencing token. */
  path: string;
  status: number;
  durationMs: number;
  summary: RequestSummary;
};

/**
 * Logs a request line at info (when `log` logs info). Only the fields named here are written,
 * whatever else an object passed in carries, so a secret put there by mistake never reaches the
 * line. On a logger made by createLogger itself it skips pino's redaction (nothing it writes
 * is redacted); on any other logger (a child) it goes through that logger as is.
 */
export function logRequestLine(log: Logger, line: RequestLine): void {
  if (!log.isLevelEnabled("info")) return;
  const s = line.summary;
  const record: Record<string, unknown> = {
    requestId: line.requestId,
    method: line.method,
    path: line.path,
    status: line.status,
  };
  if (s.principal !== undefined) record.principal = s.principal;
  if (s.operation !== undefined) record.operation = s.operation;
  if (s.bucket !== undefined) record.bucket = s.bucket;
  if (s.key !== undefined) record.key = s.key;
  if (s.prefix !== undefined) record.prefix = s.prefix;
  if (typeof s.token === "number" || s.token === null) record.token = s.token;
  if (s.leaseId !== undefined) record.leaseId = s.leaseId;
  if (s.decision !== undefined) record.decision = s.decision;
  if (s.code !== undefined) record.code = s.code;
  record.durationMs = line.durationMs;
  const plain = Object.hasOwn(log, REQUEST_LINES)
    ? (log as unknown as Record<symbol, Logger>)[REQUEST_LINES]
    : undefined;
  if (plain === undefined) return void log.info(record, "request");
  if (plain.level !== log.level) plain.level = log.level;
  plain.info(record, "request");
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
