import { type ChildProcess, spawn } from "node:child_process";
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
 * The command gets FENCE_TOKEN and FENCE_TOKEN_NUMBER; the SDK's Lease handle renews the lease in
 * the background; if it is lost the command is stopped; afterwards the lease is released.
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
  const client = clientFromEnv();
  let lost: string | null = null;
  let child: ChildProcess | undefined;
  const lease = await withApiErrors(() =>
    client.lease({
      ...request,
      onLost: (error) => {
        lost = `${error.code}: ${error.message}`;
        process.stderr.write(`fencegate run: lease lost (${lost}); stopping the command\n`);
        if (child) stopChild(child);
      },
    }),
  );

  child = spawn(cmd, cmdArgs, {
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
  const running = child;
  if (lease.lost) stopChild(running);
  const forward = (signal: NodeJS.Signals) => () => running.kill(signal);
  const onInt = forward("SIGINT");
  const onTerm = forward("SIGTERM");
  process.on("SIGINT", onInt);
  process.on("SIGTERM", onTerm);

  const exit = await new Promise<{ code: number | null; signal: NodeJS.Signals | null; error?: Error }>(
    (resolve) => {
      running.once("error", (error) => resolve({ code: null, signal: null, error }));
      running.once("exit", (code, signal) => resolve({ code, signal }));
    },
  );
  process.off("SIGINT", onInt);
  process.off("SIGTERM", onTerm);
  // A lost lease is not released (there is nothing left to release).
  await lease.release().catch((e: unknown) => {
    process.stderr.write(`fencegate run: could not release ${lease.leaseId}: ${(e as Error).message}\n`);
  });
  if (exit.error) throw new CliError(`cannot run ${cmd}: ${exit.error.message}`, 127);
  if (lost) return EXIT.leaseLost;
  if (exit.signal) return 128 + (signalNumber(exit.signal) ?? 1);
  return exit.code ?? 1;
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
