import pino, { type Logger } from "pino";

export type { Logger };

/**
 * JSON logs on stdout. Secrets never reach a log line: credentials, signatures, fencing
 * token strings and the Authorization header are redacted wherever they appear.
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
  return destination ? pino(options, destination) : pino(options);
}
