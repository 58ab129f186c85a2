import type { FenceApiError } from "../client/errors.js";
import type { FenceClient } from "../client/fence-client.js";
import type { HeldBy as WireHeldBy } from "../client/types.js";

export class CliError extends Error {
  override name = "CliError";
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}

/**
 * Exit codes of every command, each with the line `fencegate --help` prints for it. The
 * sysexits(3) numbers where one fits; `run` otherwise exits with its command's code.
 */
const EXIT_CODES = {
  ok: [0, "success"],
  failure: [1, "failure (an error the gateway answered, e.g. LeaseNotFound; a check that failed)"],
  usage: [2, "usage: unknown command, option or value"],
  unavailable: [69, "the gateway is unreachable, or answered 503 (its lease store or audit log is down)"],
  leaseHeld: [75, "LeaseHeld: an overlapping lease is held (its holder and expiry are printed)"],
  leaseLost: [76, "lease lost: LeaseLost, or run's lease expired (not renewed in time)"],
  denied: [77, "AccessDenied, or the access key / secret / clock was refused"],
  config: [78, "invalid configuration (serve, backend verify)"],
  leaseBroken: [80, "run: the lease was broken by an administrator"],
  leaseReleased: [81, "run: the lease was released by someone else"],
  leaseSuperseded: [82, "run: the lease was superseded by a newer lease (token N)"],
  commitRefused: [
    83,
    "run --transaction, transaction commit: the commit was refused; nothing of it is visible",
  ],
  outcomeUnknown: [
    84,
    "run --transaction, transaction commit: the commit's outcome is unknown (commit again to learn it)",
  ],
} as const;

export const EXIT = Object.fromEntries(Object.entries(EXIT_CODES).map(([name, [code]]) => [name, code])) as {
  readonly [K in keyof typeof EXIT_CODES]: (typeof EXIT_CODES)[K][0];
};

export const EXIT_CODES_HELP = `Exit codes:
${Object.values(EXIT_CODES)
  .map(([code, meaning]) => `  ${String(code).padEnd(4)}${meaning}`)
  .join("\n")}
  run otherwise exits with CMD's exit code (128+N when CMD died of signal N).`;

/** The development pair (src/config/resolve.ts; not imported, to keep client commands light). */
export const DEV_ACCESS_KEY_ID = "fencegate";
export const DEV_SECRET_ACCESS_KEY = "fencegate-secret";

export async function clientFromEnv(env = process.env): Promise<FenceClient> {
  const [{ FenceClient }, { nodeHttpTransport }] = await Promise.all([
    import("../client/fence-client.js"),
    import("../client/transport.js"),
  ]);
  // node:http rather than fetch: the same requests, without fetch's ~50-100 ms of start-up.
  return new FenceClient({
    transport: nodeHttpTransport,
    endpoint: env.FENCEGATE_ENDPOINT || "http://127.0.0.1:9700",
    accessKeyId: env.AWS_ACCESS_KEY_ID || DEV_ACCESS_KEY_ID,
    secretAccessKey: env.AWS_SECRET_ACCESS_KEY || DEV_SECRET_ACCESS_KEY,
    sessionToken: env.AWS_SESSION_TOKEN || undefined,
    region: env.AWS_REGION || env.AWS_DEFAULT_REGION || "us-east-1",
  });
}

/** `fn` called with a client from the environment, its API errors made CliErrors (withApiErrors). */
export async function callGateway<T>(fn: (client: FenceClient) => Promise<T>): Promise<T> {
  const client = await clientFromEnv();
  return withApiErrors(() => fn(client));
}

export function intOption(name: string, value: string | undefined, fallback?: number): number | undefined {
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value))
    throw new CliError(`--${name} must be a whole number, got "${value}"`, EXIT.usage);
  return Number(value);
}

/** An ISO 8601 date-time (as the audit API takes it), or a usage error naming the option. */
export function isoOption(name: string, value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (!/^\d{4}-\d{2}-\d{2}/.test(value) || Number.isNaN(Date.parse(value))) {
    throw new CliError(
      `--${name} must be an ISO 8601 date-time (e.g. 2026-11-22T12:00:00Z), got "${value}"`,
      EXIT.usage,
    );
  }
  return new Date(Date.parse(value)).toISOString();
}

type HeldBy = Partial<WireHeldBy>;

/** API errors become a one-line message and a distinct exit code. */
export async function withApiErrors<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    const { FenceApiError, FenceConnectionError, OutcomeUnknownError } = await import("../client/errors.js");
    if (e instanceof OutcomeUnknownError) {
      const status = e.status ? ` (HTTP ${e.status})` : "";
      throw new CliError(`outcome unknown, ${e.code}${status}: ${e.message}`, EXIT.outcomeUnknown);
    }
    if (e instanceof FenceApiError) {
      let message = apiErrorLine(e);
      const heldBy = e.details.heldBy as HeldBy | undefined;
      if (e.code === "LeaseHeld" && heldBy) message += `; ${describeHolder(heldBy)}`;
      throw new CliError(message, exitCodeOf(e.code, e.status));
    }
    if (e instanceof FenceConnectionError) throw new CliError(e.message, EXIT.unavailable);
    throw e;
  }
}

/** An error the gateway answered, in one line: its code, status and message. */
export function apiErrorLine(e: FenceApiError): string {
  return `${e.code} (HTTP ${e.status}): ${e.message}`;
}

export function describeHolder(h: HeldBy): string {
  const what = h.key !== undefined ? `key ${h.key}` : h.prefix !== undefined ? `prefix ${h.prefix}` : "it";
  const until = h.expiresAt ? ` until ${h.expiresAt}${inSeconds(h.expiresAt)}` : "";
  return `held by ${h.owner ?? "?"} (lease ${h.leaseId ?? "?"}, token ${h.token ?? "?"}, ${what})${until}`;
}

function inSeconds(iso: string): string {
  const s = Math.round((Date.parse(iso) - Date.now()) / 1000);
  return Number.isFinite(s) && s >= 0 ? ` (in ${s}s)` : "";
}

function exitCodeOf(code: string, status: number): number {
  if (code === "LeaseHeld") return EXIT.leaseHeld;
  if (code === "LeaseLost" || code === "LeaseExpired") return EXIT.leaseLost;
  if (status === 401 || status === 403) return EXIT.denied;
  if (status === 503) return EXIT.unavailable;
  return EXIT.failure;
}

export const DEFAULT_TTL_MS = 30_000;

export type AcquireValues = {
  bucket?: string;
  key?: string;
  prefix?: string;
  ttlMs?: string;
  waitMs?: string;
  owner?: string;
};

export function acquireRequest(values: AcquireValues) {
  if (!values.bucket) throw new CliError("--bucket is required", EXIT.usage);
  if ((values.key === undefined) === (values.prefix === undefined)) {
    throw new CliError("give exactly one of --key or --prefix", EXIT.usage);
  }
  return {
    bucket: values.bucket,
    ...(values.key !== undefined ? { key: values.key } : { prefix: values.prefix }),
    ttlMs: intOption("ttl-ms", values.ttlMs, DEFAULT_TTL_MS)!,
    waitMs: intOption("wait-ms", values.waitMs, 0),
    owner: values.owner,
  };
}
