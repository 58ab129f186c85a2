import { Sha256 } from "@aws-crypto/sha256-js";
import { SignatureV4 } from "@smithy/signature-v4";
import type { Lease } from "../api/lease-view.js";

export type { Lease };

export type LeaseClientOptions = {
  endpoint: string;
  accessKeyId: string;
  secretAccessKey: string;
  region?: string;
};

export class LeaseApiError extends Error {
  override name = "LeaseApiError";
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly body: unknown,
  ) {
    super(message);
  }
}

/** A small client for the lease API, signing every request with SigV4 (service s3). */
export class LeaseClient {
  private readonly signer: SignatureV4;
  private readonly base: URL;

  constructor(opts: LeaseClientOptions) {
    this.base = new URL(opts.endpoint);
    this.signer = new SignatureV4({
      service: "s3",
      region: opts.region ?? "us-east-1",
      credentials: { accessKeyId: opts.accessKeyId, secretAccessKey: opts.secretAccessKey },
      sha256: Sha256,
      uriEscapePath: false,
    });
  }

  acquire(req: {
    bucket: string;
    key?: string;
    prefix?: string;
    ttlMs: number;
    waitMs?: number;
    owner?: string;
  }): Promise<Lease> {
    return this.call("POST", "/_fence/v1/leases", req) as Promise<Lease>;
  }

  show(leaseId: string): Promise<Lease> {
    return this.call("GET", `/_fence/v1/leases/${encodeURIComponent(leaseId)}`) as Promise<Lease>;
  }

  renew(leaseId: string, ttlMs?: number): Promise<Lease> {
    const body = ttlMs === undefined ? {} : { ttlMs };
    return this.call(
      "POST",
      `/_fence/v1/leases/${encodeURIComponent(leaseId)}/renew`,
      body,
    ) as Promise<Lease>;
  }

  async release(leaseId: string): Promise<void> {
    await this.call("DELETE", `/_fence/v1/leases/${encodeURIComponent(leaseId)}`);
  }

  list(filter: { bucket?: string; prefix?: string } = {}): Promise<{ leases: Lease[] }> {
    return this.call("GET", "/_fence/v1/leases", undefined, filter) as Promise<{ leases: Lease[] }>;
  }

  audit(
    query: Record<string, string | undefined>,
  ): Promise<{ records: unknown[]; nextCursor: string | null }> {
    return this.call("GET", "/_fence/v1/audit", undefined, query) as Promise<{
      records: unknown[];
      nextCursor: string | null;
    }>;
  }

  async call(
    method: string,
    path: string,
    body?: unknown,
    query: Record<string, string | undefined> = {},
  ): Promise<unknown> {
    const q: Record<string, string> = {};
    for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== "") q[k] = v;
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const basePath = this.base.pathname.replace(/\/$/, "");
    const signed = await this.signer.sign({
      method,
      protocol: this.base.protocol,
      hostname: this.base.hostname,
      port: this.base.port ? Number(this.base.port) : undefined,
      path: basePath + path,
      query: q,
      headers: {
        host: this.base.host,
        ...(payload !== undefined ? { "content-type": "application/json" } : {}),
      },
      body: payload,
    });
    // Encode the query exactly as it was signed (RFC 3986, not form encoding).
    const search = Object.entries(q)
      .map(([k, v]) => `${awsEncode(k)}=${awsEncode(v)}`)
      .join("&");
    const url = new URL(basePath + path + (search ? `?${search}` : ""), this.base);
    const res = await fetch(url, {
      method,
      headers: signed.headers as Record<string, string>,
      body: payload,
    });
    const text = await res.text();
    const parsed = text ? safeJson(text) : undefined;
    if (!res.ok) {
      const err = (parsed as { error?: { code?: string; message?: string } } | undefined)?.error;
      throw new LeaseApiError(res.status, err?.code ?? `HTTP${res.status}`, err?.message ?? text, parsed);
    }
    return parsed;
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function awsEncode(s: string): string {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}
