import type { Claim } from "../client/types.js";
import { leaseResource } from "./lease.js";
import { fromNow, type Out, outputMode, printOne, table } from "./output.js";
import { callGateway, DEFAULT_TTL_MS, intOption } from "./shared.js";

const poolPath = (pool: string) => `/_fence/v1/pools/${encodeURIComponent(pool)}/claims`;

/** `pools claim POOL --owner W`: POST /_fence/v1/pools/{pool}/claims (also the worker's heartbeat). */
export async function claim(pool: string, opts: { owner: string; ttlMs?: string } & Out): Promise<number> {
  const body = { owner: opts.owner, ttlMs: intOption("ttl-ms", opts.ttlMs, DEFAULT_TTL_MS)! };
  const result = (await callGateway((client) =>
    client.call("POST", poolPath(pool), body, {}, { idempotent: true }),
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
        ["RESOURCE", (g) => leaseResource(g.lease)],
        ["TOKEN", (g) => g.lease.token],
        ["EXPIRES", (g) => fromNow(g.lease.expiresAt)],
        ["FENCING TOKEN", (g) => g.lease.fencingToken],
      ]),
    );
  }
  return 0;
}

/** `pools leave POOL OWNER`: DELETE /_fence/v1/pools/{pool}/claims/{owner}. */
export async function leave(pool: string, owner: string, opts: Out): Promise<number> {
  const path = `${poolPath(pool)}/${encodeURIComponent(owner)}`;
  const result = (await callGateway((client) =>
    client.call("DELETE", path, undefined, {}, { idempotent: true }),
  )) as { released: number };
  const mode = outputMode(opts.output);
  if (mode !== "table") printOne(mode, result);
  else process.stdout.write(`${owner} left pool ${pool}: released ${String(result.released)} group leases\n`);
  return 0;
}
