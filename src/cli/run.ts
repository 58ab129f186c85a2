import { type ChildProcess, spawn } from "node:child_process";
import { constants } from "node:os";
import type { FenceClient } from "../client/fence-client.js";
import type { Transaction } from "../client/transaction.js";
import type { LeaseRecord } from "../client/types.js";
import {
  type AcquireValues,
  acquireRequest,
  apiErrorLine,
  CliError,
  clientFromEnv,
  EXIT,
  withApiErrors,
} from "./shared.js";

/** How long CMD gets to exit after SIGTERM when the lease is lost, before SIGKILL. */
const KILL_GRACE_MS = 5_000;

/**
 * `fencegate run`: hold a lease while a command runs, like flock(1) for shared storage.
 * The command gets FENCE_TOKEN and FENCE_TOKEN_NUMBER; the SDK's Lease handle renews the lease in
 * the background; if it is lost the command is stopped; afterwards the lease is released.
 *
 * With `--transaction`, a fenced transaction is opened once the lease is held and the command
 * gets its id as FENCE_TRANSACTION (its writes join it with `x-fence-transaction` or the
 * metadata `fence-transaction`): when the command exits 0 the transaction is committed (every
 * write of it becomes visible at once; a refused commit exits 83, an unknown outcome 84),
 * otherwise it is aborted (none does) and run exits with the command's code.
 */
export async function runCommand(
  command: string[],
  values: AcquireValues & { transaction?: boolean },
): Promise<number> {
  const [cmd, ...cmdArgs] = command as [string, ...string[]];
  const request = acquireRequest(values);
  const client = await clientFromEnv();
  let lost: Promise<Loss> | null = null;
  let lostCode: string | null = null;
  let lostReason: string | undefined;
  let child: ChildProcess | undefined;
  let record: LeaseRecord | undefined;
  // Why it ended, from the audit log and the leases now held (the command is stopped first).
  const explain = (rec: LeaseRecord, code: string) => {
    lost ??= whyLost(client, rec, code, lostReason).then((loss) => {
      process.stderr.write(
        `fencegate run: lease lost: lease ${rec.leaseId} (token ${rec.token}) ${loss.says}; stopping the command\n`,
      );
      return loss;
    });
  };
  const lease = await withApiErrors(() =>
    client.lease({
      ...request,
      onLost: (error) => {
        lostCode = error.code;
        lostReason = error.reason;
        if (child) stopChild(child);
        if (record) explain(record, error.code);
      },
    }),
  );
  record = lease.record;
  if (lostCode) explain(record, lostCode);

  let tx: Transaction | undefined;
  if (values.transaction) {
    try {
      tx = await withApiErrors(() => lease.openTransaction());
    } catch (e) {
      await lease.release().catch(() => undefined);
      throw e;
    }
  }

  child = spawn(cmd, cmdArgs, {
    stdio: "inherit",
    env: {
      ...process.env,
      FENCE_TOKEN: lease.fencingToken,
      FENCE_TOKEN_NUMBER: String(lease.token),
      FENCE_LEASE_ID: lease.leaseId,
      FENCE_BUCKET: lease.bucket,
      ...(lease.key !== undefined ? { FENCE_KEY: lease.key } : { FENCE_PREFIX: lease.prefix }),
      ...(tx ? { FENCE_TRANSACTION: tx.transactionId } : {}),
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
  const succeeded = !exit.error && !exit.signal && exit.code === 0;
  const committed = tx && !lost && !lease.lost ? await finishTransaction(tx, succeeded, exit) : undefined;
  if (tx && (lost || lease.lost)) await tx.abort().catch(() => undefined);
  // A lost lease is not released (there is nothing left to release).
  await lease.release().catch((e: unknown) => {
    process.stderr.write(`fencegate run: could not release ${lease.leaseId}: ${(e as Error).message}\n`);
  });
  if (exit.error) throw new CliError(`cannot run ${cmd}: ${exit.error.message}`, 127);
  if (lost) return (await (lost as Promise<Loss>)).exitCode;
  if (committed !== undefined && committed !== EXIT.ok) return committed;
  if (exit.signal) return 128 + (constants.signals[exit.signal] ?? 1);
  return exit.code ?? 1;
}

/**
 * Commits the transaction after the command succeeded, aborts it otherwise; says what happened on
 * stderr. Returns run's exit status for the commit (0 committed, 83 refused, 84 outcome unknown,
 * 69 not answered), or undefined when it aborted (run then exits with the command's code).
 */
async function finishTransaction(
  tx: Transaction,
  succeeded: boolean,
  exit: { code: number | null; signal: NodeJS.Signals | null },
): Promise<number | undefined> {
  const id = tx.transactionId;
  if (!succeeded) {
    const how = exit.signal ? `was stopped by ${exit.signal}` : `exited ${exit.code ?? "abnormally"}`;
    await tx.abort().then(
      () =>
        process.stderr.write(
          `fencegate run: the command ${how}: transaction ${id} aborted (nothing of it is visible)\n`,
        ),
      (e: unknown) =>
        process.stderr.write(
          `fencegate run: the command ${how}: transaction ${id} not committed; its abort failed: ${(e as Error).message}\n`,
        ),
    );
    return undefined;
  }
  const { FenceApiError, FenceConnectionError, LeaseLostError, OutcomeUnknownError } = await import(
    "../client/errors.js"
  );
  try {
    const commit = await tx.commit();
    process.stderr.write(
      `fencegate run: transaction ${id} committed (token ${commit.token}, ${commit.objects.length} object${commit.objects.length === 1 ? "" : "s"} visible)\n`,
    );
    return EXIT.ok;
  } catch (e) {
    if (e instanceof OutcomeUnknownError) {
      process.stderr.write(
        `fencegate run: the outcome of the commit of transaction ${id} is unknown (it may have committed): ` +
          `${e.code}: ${e.message}; \`fencegate transaction commit ${id}\` commits again and tells\n`,
      );
      return EXIT.outcomeUnknown;
    }
    if (e instanceof LeaseLostError && e.status === 0) {
      // Lost as this process measured it, before the commit was sent (already aborted).
      process.stderr.write(`fencegate run: transaction ${id} was not committed: ${e.message}\n`);
      return EXIT.leaseLost;
    }
    if (e instanceof FenceApiError && e.status >= 400 && e.status < 500) {
      process.stderr.write(
        `fencegate run: transaction ${id} was not committed: ${apiErrorLine(e)}; nothing of it is visible\n`,
      );
      return EXIT.commitRefused;
    }
    await tx.abort().catch(() => undefined);
    const why = e instanceof FenceConnectionError || e instanceof FenceApiError ? e.message : String(e);
    process.stderr.write(`fencegate run: transaction ${id} was not committed: ${why}\n`);
    return e instanceof FenceConnectionError || (e instanceof FenceApiError && e.status >= 500)
      ? EXIT.unavailable
      : EXIT.failure;
  }
}

function stopChild(child: ChildProcess): void {
  child.kill("SIGTERM");
  const killer = setTimeout(() => child.kill("SIGKILL"), KILL_GRACE_MS);
  killer.unref();
  child.once("exit", () => clearTimeout(killer));
}

/** How a lease was lost, in words and as run's exit status. */
type Loss = { says: string; exitCode: number };

/**
 * Tells "broken by an administrator", "released", "superseded by token N" and "expired" apart:
 * the lease's ending event in the audit log (LeaseBroken, LeaseReleased), else what the gateway's
 * refusal said (`reason`: a renewal of a broken or released lease says which, even to a caller
 * who may not read the audit log), else a newer lease that holds what it covered, else its expiry.
 */
export async function whyLost(
  client: FenceClient,
  lease: LeaseRecord,
  code: string,
  reason?: string,
): Promise<Loss> {
  const ending = (op: string) =>
    client.audit({ leaseId: lease.leaseId, op, decision: "accepted", limit: 10 }).then(
      (p) => p.records[0],
      () => undefined,
    );
  const [broken, released, now] = await Promise.all([
    ending("LeaseBroken"),
    ending("LeaseReleased"),
    client.list({ bucket: lease.bucket }).then(
      (l) => l.leases,
      () => [],
    ),
  ]);
  if (broken) {
    return {
      says: `was broken by an administrator (${broken.principal ?? "?"} at ${broken.time})`,
      exitCode: EXIT.leaseBroken,
    };
  }
  if (released) {
    return {
      says: `was released by ${released.principal ?? "?"} at ${released.time}`,
      exitCode: EXIT.leaseReleased,
    };
  }
  if (reason === "broken") return { says: "was broken by an administrator", exitCode: EXIT.leaseBroken };
  if (reason === "released") return { says: "was released", exitCode: EXIT.leaseReleased };
  const newer = now.find((l) => l.token > lease.token && overlaps(l, lease));
  if (newer) {
    return {
      says: `expired and was superseded by token ${newer.token} (lease ${newer.leaseId}, owner ${newer.owner})`,
      exitCode: EXIT.leaseSuperseded,
    };
  }
  return {
    says: `expired: it was not renewed in time (${code})`,
    exitCode: EXIT.leaseLost,
  };
}

type Resource = { bucket: string; key?: string; prefix?: string };

function overlaps(a: Resource, b: Resource): boolean {
  if (a.bucket !== b.bucket) return false;
  if (a.key !== undefined && b.key !== undefined) return a.key === b.key;
  if (a.key !== undefined) return a.key.startsWith(b.prefix ?? "");
  if (b.key !== undefined) return b.key.startsWith(a.prefix ?? "");
  return (a.prefix ?? "").startsWith(b.prefix ?? "") || (b.prefix ?? "").startsWith(a.prefix ?? "");
}
