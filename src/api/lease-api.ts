import type { IncomingMessage } from "node:http";
import type { Context } from "hono";
import { Hono } from "hono";
import type { AccessPolicy } from "../access/access-policy.js";
import type { AuditLog } from "../audit/audit-log.js";
import { DomainError, isOutcomeUnknown } from "../core/errors.js";
import type { RequestSummary } from "../core/log.js";
import type { Keyring } from "../fence/tokens.js";
import type { Caller, LeaseInfo, LeaseService } from "../leases/lease-service.js";
import type { DelegateRecord } from "../leases/lease-store.js";
import { Pools } from "../leases/pools.js";
import type { Transactions } from "../transactions/transactions.js";
import { toApiError } from "./errors.js";
import { leaseView } from "./lease-view.js";
import openapi from "./openapi.json" with { type: "json" };
import {
  AcquireRequest,
  AuditQuery,
  ClaimRequest,
  ListQuery,
  parseInput,
  parseQuery,
  RenewRequest,
} from "./schemas.js";

export const API_BASE = "/_fence/v1";

export type ApiEnv = {
  /** `summary`: what the gateway's request log line says of the request (filled in as learnt). */
  Bindings: { incoming: IncomingMessage; requestId: string; summary?: RequestSummary };
  Variables: { principal: string; body: Buffer };
};

/** An answer of the health endpoints: 200 when `ok`, 503 otherwise, with `body` as JSON. */
export type HealthReport = { ok: boolean; body: Record<string, unknown> };

/** What the health endpoints ask (src/server/health.ts). */
export type Health = {
  /** Liveness: answered from the process alone, no dependency is called. */
  live(): Record<string, unknown>;
  /** Readiness: every dependency checked, within the health deadline. */
  ready(): Promise<HealthReport>;
};

export type LeaseApiOptions = {
  leases: LeaseService;
  /** Signs the fencing tokens of the leases the API hands out. */
  keyring: Keyring;
  /** What each access key may lease, and who is an administrator. */
  access: AccessPolicy;
  audit: AuditLog;
  /** Authenticates with SigV4; resolves the access key id or throws. */
  authenticate: (c: Context<ApiEnv>) => Promise<{ principal: string; body: Buffer }>;
  health: Health;
  /** Ownership groups (configured pools). */
  pools?: Pools;
  /** GET /metrics: the Prometheus exposition, under its own access rules (src/metrics/endpoint.ts). */
  metrics?: (incoming: IncomingMessage) => Promise<Response>;
  /** Fenced transactions (none: their endpoints answer NotImplemented). */
  transactions?: Transactions;
};

/** The JSON lease API and health endpoint (contract: "Lease API"). */
export function leaseApi(opts: LeaseApiOptions): Hono<ApiEnv> {
  const app = new Hono<ApiEnv>().basePath(API_BASE);
  // The fencing token only for whoever acts for the lease (LeaseService.actsFor).
  const viewFor = (c: Context<ApiEnv>) => (lease: LeaseInfo) =>
    leaseView(lease, opts.keyring, opts.leases.actsFor(lease, caller(c)));
  // The view of the one lease a request was about, noted for its request log line.
  const viewOf = (c: Context<ApiEnv>, lease: LeaseInfo) => {
    noteLease(c.env.summary, lease);
    return viewFor(c)(lease);
  };

  app.onError((err, c) => {
    const e = toApiError(err);
    if (c.env.summary) c.env.summary.code = String(e.body.error.code);
    // A commit whose outcome is not known is never answered as refused.
    if (isOutcomeUnknown(err)) c.header("x-fence-outcome", "unknown");
    return c.json(e.body, e.status as 400);
  });
  app.notFound((c) => {
    const e = toApiError(
      new DomainError("NoSuchEndpoint", `no such endpoint: ${c.req.method} ${c.req.path}`),
    );
    if (c.env.summary) c.env.summary.code = String(e.body.error.code);
    return c.json(e.body, 404);
  });

  // Health needs no signature: load balancers and orchestrators poll it. /health is readiness
  // under its original name.
  const readiness = async (c: Context<ApiEnv>) => {
    const report = await opts.health.ready();
    return c.json(report.body, report.ok ? 200 : 503);
  };
  app.get("/health", readiness);
  app.get("/health/ready", readiness);
  app.get("/health/live", (c) => c.json(opts.health.live()));

  // The OpenAPI description of this API; like /health, readable without signing.
  app.get("/openapi.json", (c) =>
    c.json(
      servedBy(
        openapi,
        c.req.header("host"),
        c.req.header("x-forwarded-host"),
        c.req.header("x-forwarded-proto"),
      ),
    ),
  );
  // Metrics: no signature (Prometheus does not sign); loopback or a bearer token instead.
  app.get("/metrics", async (c) => {
    if (!opts.metrics) throw new DomainError("NoSuchEndpoint", "metrics are not served here");
    return opts.metrics(c.env.incoming);
  });

  app.use("*", async (c, next) => {
    const { principal, body } = await opts.authenticate(c);
    c.set("principal", principal);
    c.set("body", body);
    if (c.env.summary) c.env.summary.principal = principal;
    await next();
  });

  app.post("/leases", async (c) => {
    const { bucket, key, prefix, ttlMs, waitMs, ...body } = parseInput(AcquireRequest, jsonBody(c));
    const resource = key !== undefined ? { bucket, key } : { bucket, prefix: prefix ?? "" };
    const owner = body.owner ?? c.get("principal");
    noteLease(c.env.summary, resource);
    opts.pools?.checkOrdinary(resource);
    // A waiter whose client hangs up leaves the queue at once (the request's abort signal). A
    // request that will not wait needs none: asking for it builds a Fetch API Request.
    const signal = waitMs > 0 ? c.req.raw.signal : undefined;
    const lease = await opts.leases.acquire({ resource, ttlMs, waitMs, owner, signal }, caller(c));
    return c.json(viewOf(c, lease), 201);
  });

  app.get("/leases", async (c) => {
    return c.json({ leases: (await opts.leases.list(parseQuery(ListQuery, c))).map(viewFor(c)) });
  });

  app.get("/leases/:leaseId", async (c) => c.json(viewOf(c, await opts.leases.get(c.req.param("leaseId")))));

  app.post("/leases/:leaseId/renew", async (c) => {
    const { ttlMs } = parseInput(RenewRequest, c.get("body").length > 0 ? jsonBody(c) : {});
    return c.json(viewOf(c, await opts.leases.renew(c.req.param("leaseId"), ttlMs, caller(c))));
  });

  // Administrators only: ends the lease and fences what it covered (LeaseService.breakLease).
  app.post("/leases/:leaseId/break", async (c) => {
    optionalJsonBody(c);
    const { lease, floorToken } = await opts.leases.breakLease(c.req.param("leaseId"), caller(c));
    return c.json({ ...viewOf(c, lease), floorToken });
  });

  // Ownership groups: a worker claims a fair share of a pool's groups (also its heartbeat).
  app.post("/pools/:pool/claims", async (c) => {
    const { ttlMs, ...body } = parseInput(ClaimRequest, jsonBody(c));
    const owner = body.owner ?? c.get("principal");
    const pools = opts.pools ?? new Pools(opts.leases, {});
    const claim = await pools.claim(c.req.param("pool"), owner, ttlMs, caller(c));
    const view = viewFor(c);
    return c.json({ ...claim, groups: claim.groups.map((g) => ({ group: g.group, lease: view(g.lease) })) });
  });

  app.delete("/pools/:pool/claims/:owner", async (c) => {
    const pools = opts.pools ?? new Pools(opts.leases, {});
    return c.json({ released: await pools.leave(c.req.param("pool"), c.req.param("owner"), caller(c)) });
  });

  // Delegates: a second access key that renews the lease and writes with its token.
  app.post("/leases/:leaseId/delegates", async (c) => {
    optionalJsonBody(c);
    const { delegate, secretAccessKey } = await opts.leases.addDelegate(c.req.param("leaseId"), caller(c));
    return c.json({ ...delegateView(delegate), secretAccessKey }, 201);
  });

  app.get("/leases/:leaseId/delegates", async (c) => {
    const delegates = await opts.leases.listDelegates(c.req.param("leaseId"), caller(c));
    return c.json({ delegates: delegates.map(delegateView) });
  });

  app.delete("/leases/:leaseId/delegates/:delegateId", async (c) => {
    await opts.leases.removeDelegate(c.req.param("leaseId"), c.req.param("delegateId"), caller(c));
    return c.body(null, 204);
  });

  app.delete("/leases/:leaseId", async (c) => {
    await opts.leases.release(c.req.param("leaseId"), caller(c));
    return c.body(null, 204);
  });

  app.get("/audit", async (c) => c.json(await opts.audit.query(parseQuery(AuditQuery, c))));

  // Fenced transactions: writes staged under a lease, visible all together at the commit or never.
  const transactions = () => {
    if (!opts.transactions)
      throw new DomainError("NotImplemented", "this gateway does not offer fenced transactions");
    return opts.transactions;
  };
  app.post("/leases/:leaseId/transactions", async (c) => {
    optionalJsonBody(c);
    const tx = await transactions().begin(c.req.param("leaseId"), caller(c));
    noteLease(c.env.summary, { bucket: tx.bucket, leaseId: tx.leaseId, token: tx.token });
    const { transactionId, leaseId, token, bucket, expiresAt } = tx;
    return c.json({ transactionId, leaseId, token, bucket, expiresAt }, 201);
  });
  app.get("/transactions/:transactionId", async (c) =>
    c.json(await transactions().describe(c.req.param("transactionId"), caller(c))),
  );
  app.post("/transactions/:transactionId/commit", async (c) => {
    optionalJsonBody(c);
    return c.json(await transactions().commit(c.req.param("transactionId"), caller(c)));
  });
  app.delete("/transactions/:transactionId", async (c) => {
    await transactions().abort(c.req.param("transactionId"), caller(c));
    return c.body(null, 204);
  });

  return app;
}

/** A delegate as the API shows it (its secret only once, when it is created). */
function delegateView(d: DelegateRecord) {
  return {
    delegateId: d.delegateId,
    accessKeyId: d.delegateId,
    leaseId: d.leaseId,
    createdBy: d.createdBy,
    createdAt: new Date(d.createdAt).toISOString(),
  };
}

function caller(c: Context<ApiEnv>): Caller {
  return { principal: c.get("principal"), requestId: c.env.requestId };
}

function jsonBody(c: Context<ApiEnv>): Record<string, unknown> {
  const raw = c.get("body");
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.toString("utf8"));
  } catch {
    throw invalid("the request body must be a JSON object");
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw invalid("the request body must be a JSON object");
  }
  return parsed as Record<string, unknown>;
}

/**
 * A call that takes no fields may come with a body all the same (an SDK sends `{}`); one that is
 * not a JSON object is refused as every other call refuses it, never ignored.
 */
function optionalJsonBody(c: Context<ApiEnv>): void {
  if (c.get("body").length > 0) jsonBody(c);
}

function invalid(message: string): DomainError {
  return new DomainError("InvalidRequest", message);
}

const HOST = /^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\])(?::\d{1,5})?$/;

/**
 * The OpenAPI document naming the server that serves it: the address the client used (Host, or
 * X-Forwarded-Host and X-Forwarded-Proto behind a proxy), so that tools generate calls to this
 * gateway. A Host that is not a host name or address keeps the document's default server.
 */
function servedBy<D extends { servers?: unknown[] }>(
  doc: D,
  host: string | undefined,
  forwardedHost: string | undefined,
  forwardedProto: string | undefined,
): D {
  const name = (forwardedHost?.split(",")[0] ?? host ?? "").trim();
  if (!HOST.test(name)) return doc;
  const proto = forwardedProto?.split(",")[0]?.trim().toLowerCase();
  const scheme = proto === "https" || proto === "http" ? proto : "http";
  return {
    ...doc,
    servers: [{ url: `${scheme}://${name}/_fence/v1`, description: "the gateway that served this document" }],
  };
}

/** Notes a lease's resource (and, once known, its id and token) for the request log line. */
export function noteLease(
  summary: RequestSummary | undefined,
  lease: { bucket: string; key?: string; prefix?: string; leaseId?: string; token?: number },
): void {
  if (!summary) return;
  summary.bucket = lease.bucket;
  if (lease.key !== undefined) summary.key = lease.key;
  else summary.prefix = lease.prefix ?? "";
  if (lease.leaseId !== undefined) summary.leaseId = lease.leaseId;
  if (lease.token !== undefined) summary.token = lease.token;
}
