import type { Claim } from "../client/types.js";
import { fromNow, outputMode, printOne, table } from "./output.js";
import { clientFromEnv, intOption, withApiErrors } from "./shared.js";

/** `pools claim POOL --owner W`: POST /_fence/v1/pools/{pool}/claims (also the worker's heartbeat). */
export async function claim(
  pool: string,
  opts: { owner: string; ttlMs?: string; output?: string },
): Promise<number> {
  const ttlMs = intOption("ttl-ms", opts.ttlMs, 30_000)!;
  const client = await clientFromEnv();
  const result = (await withApiErrors(() =>
    client.call(
      "POST",
      `/_fence/v1/pools/${encodeURIComponent(pool)}/claims`,
      { owner: opts.owner, ttlMs },
      {},
      { idempotent: true },
    ),
  )) as Claim;
  const mode = outputMode(opts.output);
  if (mode !== "table") {
    printOne(mode, result);
    return 0;
  }
  process.stdout.write(
    `pool ${result.pool}: ${result.owner} holds ${result.groups.length} of its share ${result.target} ` +
      `(${result.workers} workers, fair share ${result.fairShare})\n`,
  );
  if (result.groups.length > 0) {
    process.stdout.write(
      table(result.groups, [
        ["GROUP", (g) => g.group],
        ["LEASE ID", (g) => g.lease.leaseId],
        ["RESOURCE", (g) => g.lease.key ?? `${g.lease.prefix ?? ""}*`],
        ["TOKEN", (g) => g.lease.token],
        ["EXPIRES", (g) => fromNow(g.lease.expiresAt)],
        ["FENCING TOKEN", (g) => g.lease.fencingToken],
      ]),
    );
  }
  return 0;
}

/** `pools leave POOL OWNER`: DELETE /_fence/v1/pools/{pool}/claims/{owner}. */
export async function leave(pool: string, owner: string, opts: { output?: string }): Promise<number> {
  const client = await clientFromEnv();
  const result = (await withApiErrors(() =>
    client.call(
      "DELETE",
      `/_fence/v1/pools/${encodeURIComponent(pool)}/claims/${encodeURIComponent(owner)}`,
      undefined,
      {},
      { idempotent: true },
    ),
  )) as { released: number };
  const mode = outputMode(opts.output);
  if (mode !== "table") printOne(mode, result);
  else process.stdout.write(`${owner} left pool ${pool}: released ${String(result.released)} group leases\n`);
  return 0;
}
