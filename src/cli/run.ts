import { type ChildProcess, spawn } from "node:child_process";
import { type Lease, LeaseApiError } from "../client/lease-client.js";
import {
  ACQUIRE_OPTIONS,
  acquireRequest,
  CliError,
  clientFromEnv,
  EXIT,
  parse,
  withApiErrors,
} from "./shared.js";

/** How long CMD gets to exit after SIGTERM when the lease is lost, before SIGKILL. */
const KILL_GRACE_MS = 5_000;

/**
 * `fencegate run`: hold a lease while a command runs, like flock(1) for shared storage.
 * The command gets FENCE_TOKEN and FENCE_TOKEN_NUMBER; the lease is renewed at a third of its
 * TTL; if it is lost the command is stopped; afterwards the lease is released.
 */
export async function runCommand(args: string[]): Promise<number> {
  const dashdash = args.indexOf("--");
  if (dashdash === -1 || dashdash === args.length - 1) {
    throw new CliError(
      "usage: fencegate run --bucket B (--key K | --prefix P) [options] -- CMD [ARGS...]",
      EXIT.usage,
    );
  }
  const { values } = parse(args.slice(0, dashdash), ACQUIRE_OPTIONS);
  const [cmd, ...cmdArgs] = args.slice(dashdash + 1) as [string, ...string[]];
  const request = acquireRequest(values);
  const ttlMs = request.ttlMs;
  const client = clientFromEnv();
  const lease = await withApiErrors(() => client.acquire(request));

  const child = spawn(cmd, cmdArgs, {
    stdio: "inherit",
    env: {
      ...process.env,
      FENCE_TOKEN: lease.fencingToken,
      FENCE_TOKEN_NUMBER: String(lease.token),
      FENCE_LEASE_ID: lease.leaseId,
      FENCE_BUCKET: lease.bucket,
      ...(lease.key !== undefined ? { FENCE_KEY: lease.key } : { FENCE_PREFIX: lease.prefix }),
    },
  });
  const forward = (signal: NodeJS.Signals) => () => child.kill(signal);
  const onInt = forward("SIGINT");
  const onTerm = forward("SIGTERM");
  process.on("SIGINT", onInt);
  process.on("SIGTERM", onTerm);

  let lost: string | null = null;
  const keeper = keepRenewed(lease, ttlMs, (reason) => {
    lost = reason;
    process.stderr.write(`fencegate run: lease lost (${reason}); stopping the command\n`);
    stopChild(child);
  });

  const exit = await new Promise<{ code: number | null; signal: NodeJS.Signals | null; error?: Error }>(
    (resolve) => {
      child.once("error", (error) => resolve({ code: null, signal: null, error }));
      child.once("exit", (code, signal) => resolve({ code, signal }));
    },
  );
  keeper.stop();
  process.off("SIGINT", onInt);
  process.off("SIGTERM", onTerm);
  if (!lost) {
    await client.release(lease.leaseId).catch((e: unknown) => {
      process.stderr.write(`fencegate run: could not release ${lease.leaseId}: ${(e as Error).message}\n`);
    });
  }
  if (exit.error) throw new CliError(`cannot run ${cmd}: ${exit.error.message}`, 127);
  if (lost) return EXIT.leaseLost;
  if (exit.signal) return 128 + (signalNumber(exit.signal) ?? 1);
  return exit.code ?? 1;
}

function keepRenewed(lease: Lease, ttlMs: number, onLost: (reason: string) => void) {
  const client = clientFromEnv();
  let expiresAt = Date.parse(lease.expiresAt);
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const interval = Math.max(100, Math.floor(ttlMs / 3));
  const tick = async () => {
    if (stopped) return;
    try {
      const renewed = await client.renew(lease.leaseId, ttlMs);
      expiresAt = Date.parse(renewed.expiresAt);
    } catch (e) {
      if (stopped) return;
      if (e instanceof LeaseApiError && (e.code === "LeaseLost" || e.code === "LeaseNotFound")) {
        onLost(e.code);
        return;
      }
      // A transient failure: keep trying while the lease can still be alive.
      if (Date.now() >= expiresAt) {
        onLost(`not renewed before expiry: ${(e as Error).message}`);
        return;
      }
    }
    if (!stopped) timer = setTimeout(tick, interval);
  };
  timer = setTimeout(tick, interval);
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

function stopChild(child: ChildProcess): void {
  child.kill("SIGTERM");
  const killer = setTimeout(() => child.kill("SIGKILL"), KILL_GRACE_MS);
  killer.unref();
  child.once("exit", () => clearTimeout(killer));
}

function signalNumber(signal: NodeJS.Signals): number | undefined {
  return (
    { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGKILL: 9, SIGTERM: 15, SIGUSR1: 10, SIGUSR2: 12 } as Record<
      string,
      number
    >
  )[signal];
}
