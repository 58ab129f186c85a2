import type { Delegate, LeaseView } from "../client/types.js";
import { type Column, fromNow, type Out, outputMode, printList, printOne } from "./output.js";
import { acquireRequest, callGateway, intOption } from "./shared.js";

/** What a lease covers: its key, or its prefix and a star. */
export const leaseResource = (l: LeaseView) => (l.key !== undefined ? l.key : `${l.prefix ?? ""}*`);

const LEASE_COLUMNS: ReadonlyArray<Column<LeaseView>> = [
  ["LEASE ID", (l) => l.leaseId],
  ["BUCKET", (l) => l.bucket],
  ["RESOURCE", leaseResource],
  ["OWNER", (l) => l.owner],
  ["TOKEN", (l) => l.token],
  ["STATE", (l) => l.state],
  ["EXPIRES", (l) => fromNow(l.expiresAt)],
  ["WAITERS", (l) => l.waiters ?? 0],
];

/** A lease as "name: value" lines, with its expiry as a countdown. */
function leaseFields(l: LeaseView & { floorToken?: number }): Record<string, unknown> {
  return {
    leaseId: l.leaseId,
    bucket: l.bucket,
    ...(l.key !== undefined ? { key: l.key } : { prefix: l.prefix }),
    owner: l.owner,
    token: l.token,
    fencingToken: l.fencingToken,
    state: l.state,
    ttlMs: l.ttlMs,
    acquiredAt: l.acquiredAt,
    expiresAt: `${l.expiresAt} (${fromNow(l.expiresAt)})`,
    waiters: l.waiters,
    floorToken: l.floorToken,
  };
}

function printLease(output: string | undefined, lease: LeaseView & { floorToken?: number }): void {
  printOne(outputMode(output), lease as Record<string, unknown>, leaseFields(lease));
}

export async function acquire(opts: Parameters<typeof acquireRequest>[0] & Out): Promise<number> {
  const request = acquireRequest(opts);
  printLease(opts.output, await callGateway((client) => client.acquire(request)));
  return 0;
}

export async function list(opts: { bucket?: string; prefix?: string } & Out): Promise<number> {
  const { leases } = await callGateway((client) => client.list({ bucket: opts.bucket, prefix: opts.prefix }));
  printList(outputMode(opts.output), leases, { leases }, LEASE_COLUMNS, "no active leases");
  return 0;
}

export async function show(leaseId: string, opts: Out): Promise<number> {
  printLease(opts.output, await callGateway((client) => client.show(leaseId)));
  return 0;
}

export async function renew(leaseId: string, opts: { ttlMs?: string } & Out): Promise<number> {
  const ttlMs = intOption("ttl-ms", opts.ttlMs);
  printLease(opts.output, await callGateway((client) => client.renew(leaseId, ttlMs)));
  return 0;
}

export async function release(leaseId: string, opts: Out): Promise<number> {
  await callGateway((client) => client.release(leaseId));
  printOne(outputMode(opts.output), { leaseId, released: true });
  process.stderr.write(`released ${leaseId}\n`);
  return 0;
}

export async function breakLease(leaseId: string, opts: Out): Promise<number> {
  const broken = await callGateway((client) => client.breakLease(leaseId));
  printLease(opts.output, broken);
  process.stderr.write(
    `broke ${leaseId} (held by ${broken.owner}, token ${broken.token}); writes with a token below ${broken.floorToken} are refused\n`,
  );
  return 0;
}

const DELEGATE_COLUMNS: ReadonlyArray<Column<Delegate>> = [
  ["DELEGATE ID", (d) => d.delegateId],
  ["LEASE ID", (d) => d.leaseId],
  ["CREATED BY", (d) => d.createdBy],
  ["CREATED", (d) => `${d.createdAt} (${fromNow(d.createdAt)})`],
];

export async function addDelegate(leaseId: string, opts: Out): Promise<number> {
  const created = await callGateway((client) => client.delegate(leaseId));
  printOne(outputMode(opts.output), created);
  process.stderr.write(
    "the secret is shown only now: give the worker AWS_ACCESS_KEY_ID=<accessKeyId> AWS_SECRET_ACCESS_KEY=<secretAccessKey>\n",
  );
  return 0;
}

export async function listDelegates(leaseId: string, opts: Out): Promise<number> {
  const { delegates } = await callGateway((client) => client.listDelegates(leaseId));
  printList(
    outputMode(opts.output),
    delegates,
    { delegates },
    DELEGATE_COLUMNS,
    `lease ${leaseId} has no delegates`,
  );
  return 0;
}

export async function revokeDelegate(leaseId: string, delegateId: string, opts: Out): Promise<number> {
  await callGateway((client) => client.revokeDelegate(leaseId, delegateId));
  printOne(outputMode(opts.output), { leaseId, delegateId, revoked: true });
  process.stderr.write(`revoked ${delegateId} of ${leaseId}\n`);
  return 0;
}
