import type { TransactionObject, TransactionView } from "../client/types.js";
import { type Column, fromNow, type Out, outputMode, printList, printOne } from "./output.js";
import { apiErrorLine, CliError, callGateway, EXIT } from "./shared.js";

const OBJECT_COLUMNS: ReadonlyArray<Column<TransactionObject>> = [
  ["KEY", (o) => o.key],
  ["ETAG", (o) => ("etag" in o ? o.etag : "-")],
  ["DELETED", (o) => ("deleted" in o ? "yes" : "no")],
];

function transactionFields(t: TransactionView): Record<string, unknown> {
  return {
    transactionId: t.transactionId,
    leaseId: t.leaseId,
    bucket: t.bucket,
    token: t.token,
    state: t.state,
    reason: t.reason,
    expiresAt: t.expiresAt ? `${t.expiresAt} (${fromNow(t.expiresAt)})` : undefined,
    objects: t.objects.length,
  };
}

/** `fencegate transaction show ID`: its state and objects. */
export async function show(transactionId: string, opts: Out): Promise<number> {
  const view = await callGateway((client) => client.transactionState(transactionId));
  const mode = outputMode(opts.output);
  printOne(mode, view as Record<string, unknown>, transactionFields(view));
  if (mode === "table" && view.objects.length > 0) {
    process.stdout.write("\n");
    printList(mode, view.objects, {}, OBJECT_COLUMNS, "");
  }
  return 0;
}

/**
 * `fencegate transaction commit ID`: commits it (idempotent: a committed one answers the same);
 * 83 when refused, 84 when the outcome is unknown.
 */
export async function commit(transactionId: string, opts: Out): Promise<number> {
  const done = await callGateway(async (client) => {
    try {
      return await client.commitTransaction(transactionId);
    } catch (e) {
      const { FenceApiError, OutcomeUnknownError } = await import("../client/errors.js");
      // A refusal (409), whatever its code: nothing of the transaction is visible.
      if (e instanceof FenceApiError && !(e instanceof OutcomeUnknownError) && e.status === 409) {
        throw new CliError(`${apiErrorLine(e)}; nothing of the transaction is visible`, EXIT.commitRefused);
      }
      throw e;
    }
  });
  printOne(outputMode(opts.output), done as Record<string, unknown>);
  return 0;
}

/** `fencegate transaction abort ID`. */
export async function abort(transactionId: string, opts: Out): Promise<number> {
  await callGateway((client) => client.abortTransaction(transactionId));
  printOne(outputMode(opts.output), { transactionId, aborted: true });
  process.stderr.write(`aborted ${transactionId}\n`);
  return 0;
}
