import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { expect } from "vitest";
import type { LeaseRecord } from "../../src/client/types.js";
import type { TestGateway } from "../support/gateway.js";
import { objectPath, type RawResponse, signedRequest } from "../support/signed-http.js";

/** A lease API call, signed, with a JSON body when given. */
export async function api(
  gw: { url: string },
  method: string,
  path: string,
  body?: unknown,
): Promise<RawResponse & { json: Record<string, unknown> }> {
  const res = await signedRequest(gw.url, {
    method,
    path: `/_fence/v1${path}`,
    ...(body !== undefined
      ? { body: JSON.stringify(body), headers: { "content-type": "application/json" } }
      : {}),
  });
  let json: Record<string, unknown> = {};
  try {
    json = res.text === "" ? {} : (JSON.parse(res.text) as Record<string, unknown>);
  } catch {
    json = {};
  }
  return Object.assign(res, { json });
}

export type OpenTransaction = { transactionId: string; leaseId: string; token: number; bucket: string };

/** Opens a transaction on a lease (201 expected). */
export async function openTransaction(gw: { url: string }, leaseId: string): Promise<OpenTransaction> {
  const res = await api(gw, "POST", `/leases/${leaseId}/transactions`, {});
  expect(res.status, res.text).toBe(201);
  return res.json as OpenTransaction;
}

/** A PutObject in a transaction (the lease's token and the transaction header). */
export function putIn(
  gw: { url: string },
  lease: Pick<LeaseRecord, "fencingToken">,
  transactionId: string | null,
  bucket: string,
  key: string,
  body: string,
  extra: Record<string, string> = {},
): Promise<RawResponse> {
  return signedRequest(gw.url, {
    method: "PUT",
    path: objectPath(bucket, key),
    body,
    headers: {
      "x-fence-token": lease.fencingToken!,
      ...(transactionId !== null ? { "x-fence-transaction": transactionId } : {}),
      ...extra,
    },
  });
}

export async function getBody(gw: { url: string }, bucket: string, key: string): Promise<string | null> {
  const res = await signedRequest(gw.url, { method: "GET", path: objectPath(bucket, key) });
  if (res.status === 404) return null;
  expect(res.status, res.text).toBe(200);
  return res.text;
}

export async function listKeys(gw: { url: string }, bucket: string): Promise<string[]> {
  const res = await signedRequest(gw.url, { method: "GET", path: `/${bucket}`, query: { "list-type": "2" } });
  expect(res.status).toBe(200);
  return [...res.text.matchAll(/<Key>([^<]*)<\/Key>/g)].map((m) => m[1]!);
}

export async function makeBucket(gw: TestGateway | { url: string }, bucket: string): Promise<void> {
  const res = await signedRequest(gw.url, { method: "PUT", path: `/${bucket}` });
  expect(res.status, res.text).toBe(200);
}

/** Every file under a directory (the blob files of a data directory), sorted. */
export function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...filesUnder(p));
    else out.push(p);
  }
  return out.sort();
}

/**
 * Waits until the lease has expired (its expiresAt, and a margin). Tests that need a lease to end
 * give it a TTL long enough for their staged writes on a busy machine, then wait here.
 */
export async function untilExpired(lease: { expiresAt: string }): Promise<void> {
  const left = Date.parse(lease.expiresAt) - Date.now();
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, left) + 200));
}
