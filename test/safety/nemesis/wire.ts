// The clients' side of the wire in a nemesis run: SigV4-signed S3 requests that give up after a
// deadline (a replica stopped with SIGSTOP answers nothing), and lease calls that are never
// retried, so that each operation in the history is exactly one request.
import { Agent, request } from "node:http";
import { FenceApiError } from "../../../src/client/errors.js";
import { FenceClient } from "../../../src/client/fence-client.js";
import type { LeaseRecord } from "../../../src/client/types.js";
import { CREDENTIALS } from "../../support/gateway.js";
import { objectPath, signRequest } from "../../support/signed-http.js";

export type WireAnswer = {
  status: number;
  requestId: string | null;
  /** x-fence-outcome */
  outcome: string | null;
  /** The S3 error code, when the answer is an S3 error. */
  code: string | null;
  text: string;
};

/** A replica as the clients reach it. */
export type Endpoint = {
  url: string;
  agent: Agent;
  leases: FenceClient;
};

export function endpointOf(url: string, timeoutMs: number): Endpoint {
  return {
    url,
    agent: new Agent({ keepAlive: true, maxSockets: 64 }),
    leases: new FenceClient({ endpoint: url, ...CREDENTIALS, timeoutMs, retry: { attempts: 1 } }),
  };
}

/** One signed S3 request; rejects when no whole answer came within `timeoutMs`. */
export async function s3Call(
  ep: Endpoint,
  req: { method: string; bucket: string; key: string; body?: string; headers?: Record<string, string> },
  timeoutMs: number,
): Promise<WireAnswer> {
  const url = new URL(ep.url);
  const signed = await signRequest(ep.url, {
    method: req.method,
    path: objectPath(req.bucket, req.key),
    ...(req.body !== undefined ? { body: req.body } : {}),
    headers: req.headers ?? {},
  });
  return new Promise((resolve, reject) => {
    const r = request(
      {
        host: url.hostname,
        port: Number(url.port),
        method: signed.method,
        path: signed.path,
        headers: signed.headers,
        agent: ep.agent,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("error", reject);
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          const header = (name: string) => {
            const v = res.headers[name];
            return (Array.isArray(v) ? v[0] : v) ?? null;
          };
          resolve({
            status: res.statusCode ?? 0,
            requestId: header("x-amz-request-id"),
            outcome: header("x-fence-outcome"),
            code: /<Code>([^<]+)<\/Code>/.exec(text)?.[1] ?? null,
            text,
          });
        });
      },
    );
    r.setTimeout(timeoutMs, () => r.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    r.on("error", reject);
    if (signed.body !== undefined) r.write(signed.body);
    r.end();
  });
}

/** How a lease call ended: the lease (when it succeeded), or the error's status and code. */
export type LeaseAnswer =
  | { ok: true; lease: LeaseRecord | null }
  | { ok: false; status: number | null; code: string | null; requestId: string | null; error: string };

export async function leaseCall(call: () => Promise<unknown>): Promise<LeaseAnswer> {
  try {
    const lease = (await call()) as LeaseRecord | undefined;
    return { ok: true, lease: lease ?? null };
  } catch (e) {
    if (e instanceof FenceApiError && e.status > 0) {
      return { ok: false, status: e.status, code: e.code, requestId: e.requestId ?? null, error: e.message };
    }
    return { ok: false, status: null, code: null, requestId: null, error: (e as Error).message };
  }
}
