// What the fault-injection suites share: a gateway on a faulty store, signed writes that show
// their status and fencing headers, and the audit records of one request.
import { randomUUID } from "node:crypto";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { type AuditRecord, allAuditRecords } from "../../support/safety-helpers.js";
import { objectPath, type RawResponse, signedRequest } from "../../support/signed-http.js";
import { waitFor } from "../../support/wait.js";
import type { FaultyStore } from "./faulty-store.js";

export type Answer = {
  status: number;
  /** x-fence-outcome ("unknown" when the gateway could not learn the write's outcome). */
  outcome: string | undefined;
  requestId: string;
  code: string | null;
  text: string;
};

/** A gateway on the faulty store (embedded lease store and audit log: commit intents in SQLite). */
export function gatewayOn(
  store: FaultyStore,
  backend: Record<string, unknown> = {},
  opts: { env?: Record<string, string>; dataDir?: string } = {},
) {
  return startTestGateway({
    overrides: { backend: store.backend(backend) },
    ...(opts.env ? { env: opts.env } : {}),
    ...(opts.dataDir ? { dataDir: opts.dataDir } : {}),
  });
}

export const newBucket = (store: FaultyStore) => `fg-${store.name}-${randomUUID().slice(0, 8)}`;

export function answerOf(res: RawResponse): Answer {
  const header = (name: string) => {
    const v = res.headers[name];
    return Array.isArray(v) ? v[0] : v;
  };
  const code = /<Code>([^<]+)<\/Code>/.exec(res.text)?.[1] ?? null;
  return {
    status: res.status,
    outcome: header("x-fence-outcome"),
    requestId: header("x-amz-request-id") ?? "",
    code,
    text: res.text,
  };
}

export async function put(
  gw: TestGateway,
  bucket: string,
  key: string,
  body: string,
  token?: string,
  headers: Record<string, string> = {},
): Promise<Answer> {
  return answerOf(
    await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, key),
      body,
      headers: { ...(token ? { "x-fence-token": token } : {}), ...headers },
    }),
  );
}

export async function del(gw: TestGateway, bucket: string, key: string, token?: string): Promise<Answer> {
  return answerOf(
    await signedRequest(gw.url, {
      method: "DELETE",
      path: objectPath(bucket, key),
      headers: token ? { "x-fence-token": token } : {},
    }),
  );
}

/** The object's bytes through the gateway, or null when it has none (404). */
export async function read(gw: TestGateway, bucket: string, key: string): Promise<string | null> {
  const res = await signedRequest(gw.url, { method: "GET", path: objectPath(bucket, key) });
  if (res.status === 404) return null;
  if (res.status !== 200) throw new Error(`GET ${bucket}/${key} answered ${res.status}: ${res.text}`);
  return res.text;
}

export async function createBucket(gw: TestGateway, bucket: string): Promise<void> {
  const res = await signedRequest(gw.url, { method: "PUT", path: `/${bucket}` });
  if (res.status !== 200) throw new Error(`CreateBucket ${bucket} answered ${res.status}: ${res.text}`);
}

/** The audit records of one request, in commit order. */
export async function recordsOf(gw: TestGateway, bucket: string, requestId: string): Promise<AuditRecord[]> {
  return (await allAuditRecords(gw.leases, { bucket })).filter((r) => r.requestId === requestId);
}

/** Waits until the request's audit records end with a decision other than unknown; returns them. */
export async function settledRecords(
  gw: TestGateway,
  bucket: string,
  requestId: string,
  timeoutMs = 30_000,
): Promise<AuditRecord[]> {
  let last: AuditRecord[] = [];
  return waitFor(
    async () => {
      last = await recordsOf(gw, bucket, requestId);
      const final = last.at(-1);
      return final && final.decision !== "unknown" ? last : null;
    },
    { what: `the outcome of request ${requestId}`, timeoutMs, details: () => JSON.stringify(last) },
  );
}

/**
 * What every write answer must be whatever the network did: accepted, or unknown (503 with
 * x-fence-outcome: unknown). Never a refusal nor a 500 for a write whose commit was sent.
 */
export function expectAcceptedOrUnknown(answer: Answer, accepted = 200): void {
  const ok = answer.status === accepted || (answer.status === 503 && answer.outcome === "unknown");
  if (!ok) {
    throw new Error(
      `expected ${accepted} or 503 with x-fence-outcome: unknown, got ${answer.status} ${answer.code} (outcome ${answer.outcome}): ${answer.text}`,
    );
  }
}
