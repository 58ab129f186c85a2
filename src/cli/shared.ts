import { type ParseArgsConfig, parseArgs } from "node:util";
import { FenceApiError, FenceConnectionError } from "../client/errors.js";
import { FenceClient } from "../client/fence-client.js";
import { DEV_ACCESS_KEY_ID, DEV_SECRET_ACCESS_KEY } from "../config/resolve.js";

export class CliError extends Error {
  override name = "CliError";
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}

/** Exit codes of the client commands. */
export const EXIT = { usage: 2, leaseHeld: 75, leaseLost: 76, unavailable: 69 } as const;

export function clientFromEnv(env = process.env): FenceClient {
  return new FenceClient({
    endpoint: env.FENCEGATE_ENDPOINT || "http://127.0.0.1:9700",
    accessKeyId: env.AWS_ACCESS_KEY_ID || DEV_ACCESS_KEY_ID,
    secretAccessKey: env.AWS_SECRET_ACCESS_KEY || DEV_SECRET_ACCESS_KEY,
    sessionToken: env.AWS_SESSION_TOKEN || undefined,
    region: env.AWS_REGION || env.AWS_DEFAULT_REGION || "us-east-1",
  });
}

type Parsed<T extends ParseArgsConfig["options"]> = ReturnType<
  typeof parseArgs<{ args: string[]; options: T; allowPositionals: boolean; strict: true }>
>;

export function parse<T extends ParseArgsConfig["options"]>(
  args: string[],
  options: T,
  allowPositionals = false,
): Parsed<T> {
  try {
    return parseArgs({ args, options, allowPositionals, strict: true });
  } catch (e) {
    throw new CliError((e as Error).message, EXIT.usage);
  }
}

export function intOption(name: string, value: string | undefined, fallback?: number): number | undefined {
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value))
    throw new CliError(`--${name} must be a whole number, got "${value}"`, EXIT.usage);
  return Number(value);
}

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** API errors become a one-line message and a distinct exit code. */
export async function withApiErrors<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    if (e instanceof FenceApiError) {
      const code = e.code === "LeaseHeld" ? EXIT.leaseHeld : e.code === "LeaseLost" ? EXIT.leaseLost : 1;
      throw new CliError(`${e.code} (HTTP ${e.status}): ${e.message}`, code);
    }
    if (e instanceof FenceConnectionError) throw new CliError(e.message, EXIT.unavailable);
    throw e;
  }
}

export const DEFAULT_TTL_MS = 30_000;

/** The options of `lease acquire` and `run` that describe the lease. */
export const ACQUIRE_OPTIONS = {
  bucket: { type: "string" },
  key: { type: "string" },
  prefix: { type: "string" },
  "ttl-ms": { type: "string" },
  "wait-ms": { type: "string" },
  owner: { type: "string" },
} as const;

type AcquireValues = { [K in keyof typeof ACQUIRE_OPTIONS]?: string };

export function acquireRequest(values: AcquireValues) {
  if (!values.bucket) throw new CliError("--bucket is required", EXIT.usage);
  if ((values.key === undefined) === (values.prefix === undefined)) {
    throw new CliError("give exactly one of --key or --prefix", EXIT.usage);
  }
  return {
    bucket: values.bucket,
    ...(values.key !== undefined ? { key: values.key } : { prefix: values.prefix }),
    ttlMs: intOption("ttl-ms", values["ttl-ms"], DEFAULT_TTL_MS)!,
    waitMs: intOption("wait-ms", values["wait-ms"], 0),
    owner: values.owner,
  };
}
