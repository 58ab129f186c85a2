import { createHmac, randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { getRequestListener, type HttpBindings } from "@hono/node-server";
import { Hono } from "hono";
import { toApiError } from "../api/errors.js";
import { API_BASE, leaseApi } from "../api/lease-api.js";
import openapi from "../api/openapi.json" with { type: "json" };
import { apiAuthenticator } from "../api/request-auth.js";
import { resolveSecrets } from "../config/resolve.js";
import type { Config } from "../config/schema.js";
import { consoleApp, isConsolePath } from "../console/console-app.js";
import { type Clock, systemClock } from "../core/clock.js";
import { DomainError } from "../core/errors.js";
import { createLogger, type Logger, logRequestLine, type RequestSummary } from "../core/log.js";
import { VERSION } from "../core/version.js";
import { Outcomes } from "../fence/outcomes.js";
import { WriteFencer } from "../fence/write-fencer.js";
import { fencingWithRecords } from "../fence/write-notes.js";
import { createRequestAuthenticator } from "../http/authenticator.js";
import { type EdgeAnswer, type EdgeRenderer, installEdgeAnswers } from "../http/edge-answers.js";
import { installExpectContinue } from "../http/expect-continue.js";
import { sendNodeBody } from "../http/node-body.js";
import { splitRawUrl } from "../http/raw-url.js";
import { currentRequest, guardRequests } from "../http/request-guard.js";
import { newRequestId } from "../http/request-id.js";
import { withDelegates } from "../leases/delegate-access.js";
import { LeaseService } from "../leases/lease-service.js";
import { Pools } from "../leases/pools.js";
import {
  METRICS_PATH,
  type MetricsSettings,
  metricsAnswer,
  startMetricsListener,
} from "../metrics/endpoint.js";
import { createMetrics } from "../metrics/metrics.js";
import { apiOperations } from "../metrics/operations.js";
import { bucketFromHost } from "../s3-endpoint/addressing.js";
import { s3EdgeAnswer } from "../s3-endpoint/client-errors.js";
import { type S3Env, s3Handler } from "../s3-endpoint/handler.js";
import { completedUploads } from "../s3-endpoint/operations/completed-uploads.js";
import { Transactions } from "../transactions/transactions.js";
import { openComponents } from "./components.js";
import { createHealth, type Dependency } from "./health.js";
import { InFlight, type RawAnswer } from "./in-flight.js";
import { wireMetrics } from "./metrics-wiring.js";

export type Gateway = {
  /** e.g. http://127.0.0.1:9700 */
  url: string;
  host: string;
  port: number;
  gatewayId: string;
  server: Server;
  log: Logger;
  /** The separate metrics listener's URL (FENCEGATE_METRICS_PORT), when there is one. */
  metricsUrl?: string;
  /**
   * Without a bound: stops accepting connections, drops every connection at once and closes the
   * stores. With `boundMs` (SIGTERM): stops accepting connections, lets requests in flight
   * finish, answers those still running shortly before the bound with 503, and closes the stores
   * without waiting on one that does not answer; resolves within `boundMs`.
   */
  close(boundMs?: number): Promise<void>;
};

type StartOptions = {
  clock?: Clock;
  log?: Logger;
  /** Sweep interval for expired leases (audit LeaseExpired events). */
  sweepMs?: number;
  /** Where metrics are served and who may read them; default: the configuration's `metrics`. */
  metrics?: MetricsSettings;
};

/** Opens the stores, builds the HTTP app and listens. Resolves once it is serving. */
export async function startGateway(config: Config, options: StartOptions = {}): Promise<Gateway> {
  const clock = options.clock ?? systemClock;
  const gatewayId = config.gatewayId ?? `gw-${randomBytes(4).toString("hex")}`;
  const log = options.log ?? createLogger(config.log.level, { gateway: gatewayId });
  const secrets = resolveSecrets(config);
  const metricsSettings = options.metrics ?? config.metrics;
  const metrics = createMetrics({ gatewayId, version: VERSION });
  const components = await openComponents(config, { clock, gatewayId, log, metrics });
  const { backend, leaseStore, audit } = components;
  /** Set once a shutdown began: readiness fails, answers close their connection. */
  let draining: string | null = null;
  /** The request id of each request, for an answer given at the shutdown's bound. */
  const requestIds = new WeakMap<IncomingMessage, string>();

  const policyFor = (bucket: string) =>
    config.buckets[bucket]?.fencing ?? config.fencing.buckets[bucket] ?? config.fencing.default;
  // Writes answered "unknown" until their outcome is learnt and recorded.
  const outcomes = new Outcomes({ audit, leases: leaseStore, log: log.child({ component: "outcomes" }) });
  const fencer = new WriteFencer({
    leases: leaseStore,
    audit,
    keyring: secrets.keyring,
    clock,
    policyFor,
    writeState: (bucket, key) => backend.writeState(bucket, key),
    highestToken: (bucket, key) => backend.highestToken(bucket, key),
    domainOf: (bucket) => backend.domainOf(bucket),
    outcomes,
    gatewayId,
    observe: (op, decision, reason) => metrics.decision(op, decision, reason),
  });
  const leases = new LeaseService({
    store: leaseStore,
    audit,
    clock,
    limits: config.leases,
    fenceObject: fencingWithRecords({
      raise: (bucket, key, token) => backend.raiseHighestToken(bucket, key, token),
      noteOf: async (bucket, key) => (backend.writeNote ? backend.writeNote(bucket, key) : null),
      audit,
    }),
    access: secrets.access,
    // A delegate's secret is derived from the token-signing key: all replicas agree, none stores it.
    delegateSecret: (id) =>
      createHmac("sha256", secrets.keyring.active.secret)
        .update(`fencegate delegate ${id}`)
        .digest("base64url"),
    observe: {
      event: (event, token) => metrics.leaseEvent(event, token),
      refused: (event, reason) => metrics.leaseRefused(event, reason),
      waited: (outcome, seconds) => metrics.leaseWait(outcome, seconds),
    },
  });
  // Fenced transactions: writes staged under a lease, committed together in one step.
  const transactions = new Transactions({
    leases,
    store: leaseStore,
    audit,
    clock,
    domainOf: (bucket) => backend.domainOf(bucket),
    limits: config.transactions,
    logOf: (bucket) => backend.transactionLog(bucket),
    ...txTestPause(),
    log: log.child({ component: "transactions" }),
    observe: (outcome) => metrics.transaction(outcome),
  });
  fencer.transactions = transactions;
  wireMetrics(metrics, { leaseStore, audit, backends: components.backends.values(), leases, transactions });
  const apiOperation = apiOperations(openapi, API_BASE);
  // Without them (the lease store unreachable at start), delegates get 403 until they are re-issued.
  await leases.loadDelegates().catch((err) => log.warn({ err }, "lease delegates not loaded"));
  const access = withDelegates(secrets.access, (id) => leases.delegateScope(id));
  const secretOf = (accessKeyId: string) =>
    secrets.credentials.get(accessKeyId) ?? leases.delegateSecretOf(accessKeyId);
  const authenticator = createRequestAuthenticator({ lookup: secretOf, clock });
  // The browser console: signs in with the same access keys, sees what the lease API shows.
  const consoleUi = consoleApp({
    leases,
    keyring: secrets.keyring,
    access,
    audit,
    secretOf,
    highestToken: (bucket, key) => backend.highestToken(bucket, key),
    gatewayId,
    log: log.child({ component: "console" }),
    now: clock,
  });

  const domain = config.server.domain;
  const app = new Hono<S3Env>();
  app.use("*", async (c, next) => {
    const requestId = newRequestId();
    const started = performance.now();
    const summary: RequestSummary = {};
    c.set("requestId", requestId);
    c.set("summary", summary);
    requestIds.set(c.env.incoming, requestId);
    await next();
    const apiTarget = isLeaseApiTarget(c.env.incoming.url, c.env.incoming.headers.host, domain);
    const op =
      (c.get("op") as string | undefined) ??
      (apiTarget ? apiOperation(c.req.method, c.req.path) : "s3_unrouted");
    if (apiTarget && summary.operation === undefined)
      summarizeApiRequest(summary, c.req.method, c.req.path, op, c.res.status);
    metrics.request(op, c.res.status, (performance.now() - started) / 1000);
    // The path only: a query string may hold a presigned signature or a fencing token. The
    // request id comes first, where a child logger's binding would put it; no child logger is
    // made per request for this one line (nor at all when the level drops it).
    if (log.isLevelEnabled("info")) {
      logRequestLine(log, {
        requestId,
        method: c.req.method,
        path: c.req.path,
        status: c.res.status,
        summary,
        durationMs: Math.round((performance.now() - started) * 10) / 10,
      });
    }
    c.res.headers.set("x-amz-request-id", requestId);
    c.res.headers.set("x-amz-id-2", Buffer.from(`${gatewayId}/${requestId}`).toString("base64"));
    c.res.headers.set("server", "fencegate");
    if (draining !== null) c.res.headers.set("connection", "close");
  });
  const api = leaseApi({
    leases,
    keyring: secrets.keyring,
    access,
    audit,
    authenticate: apiAuthenticator(authenticator),
    pools: new Pools(leases, config.pools),
    transactions,
    metrics: (incoming) => metricsResponse(incoming),
    health: createHealth({
      dependencies: [
        ...[...components.backends].map(
          ([name, b]): Dependency => ({
            name: name === "default" ? "backend" : `backends.${name}`,
            kind: b.kind,
            check: () => b.listBuckets(),
          }),
        ),
        { name: "leaseStore", kind: leaseStore.kind, check: () => leaseStore.ping() },
        { name: "auditLog", kind: audit.kind, check: () => audit.ping() },
      ],
      timeoutMs: config.server.healthTimeoutMs,
      describe: {
        gateway: gatewayId,
        backend: backend.kind,
        leaseStore: leaseStore.kind,
        auditLog: audit.kind,
      },
      draining: () => draining,
      onReport: (checks) => {
        for (const [name, check] of Object.entries(checks))
          metrics.dependency(name, check.kind, check.status === "ok");
      },
    }),
  });
  const s3 = s3Handler({
    services: { backend, fencer, access, region: config.server.region, completions: completedUploads() },
    authenticator,
    domain: config.server.domain,
    log,
  });
  const metricsResponse = async (incoming: IncomingMessage): Promise<Response> => {
    const answer = await metricsAnswer(
      metrics,
      { remoteAddress: incoming.socket.remoteAddress, authorization: incoming.headers.authorization },
      metricsSettings.token,
    );
    return new Response(answer.body, { status: answer.status, headers: answer.headers });
  };
  app.all("*", async (c) => {
    // Every path of the lease API's namespace gets the lease API's JSON, 404s and auth failures
    // included; only a virtual-hosted bucket host makes it an object key.
    if (isLeaseApiTarget(c.env.incoming.url, c.env.incoming.headers.host, domain)) {
      if (isConsolePath(c.req.path)) {
        return consoleUi.fetch(c.req.raw, {
          ...c.env,
          requestId: c.get("requestId"),
          summary: c.get("summary"),
        });
      }
      return api.fetch(c.req.raw, { ...c.env, requestId: c.get("requestId"), summary: c.get("summary") });
    }
    // The S3 handler logs with the request id bound; the lease API has no use for a child logger.
    c.set("log", log.child({ requestId: c.get("requestId") }));
    return s3(c);
  });

  const render: EdgeRenderer = (err, where, requestId) =>
    isLeaseApiTarget(where.target, where.host, domain)
      ? apiEdgeAnswer(err)
      : s3EdgeAnswer(err, where.target, requestId);
  // The adapter cannot build a URL for this request (a backslash in the path, a bad Host, an
  // unusable absolute-form target); it would answer a bare 400.
  const refuseTarget = (err: unknown, incoming: IncomingMessage | undefined) => {
    const host = incoming?.headers.host;
    const refusal = validHost(host)
      ? new DomainError("InvalidURI", "Couldn't parse the specified URI.")
      : new DomainError("InvalidArgument", "The Host header is not valid.");
    log.info({ err: (err as Error).message }, "request target refused");
    const requestId = newRequestId();
    return edgeResponse(render(refusal, { target: incoming?.url, host }, requestId), requestId);
  };
  const listener = getRequestListener(
    async (req, env) => {
      const { incoming, outgoing } = env as HttpBindings;
      let res: Response;
      try {
        res = await app.fetch(req, env);
      } catch (err) {
        // Hono builds the path from the URL too; a failure there is the adapter's failure.
        res = refuseTarget(err, incoming);
      }
      // Answered with 503 at the shutdown's bound while it ran: this answer goes nowhere.
      if (inFlight.wasCut(outgoing)) return discardAnswer(res, outgoing);
      return sendNodeBody(res, outgoing);
    },
    // The adapter calls this synchronously from the listener, while currentRequest() is its request.
    { errorHandler: (err) => refuseTarget(err, currentRequest()) },
  );
  const { server: serverConfig } = config;
  const maxHeadersCount = 2000;
  const server = createServer(
    {
      maxHeaderSize: serverConfig.maxHeaderBytes,
      headersTimeout: serverConfig.headersTimeoutMs,
      requestTimeout: serverConfig.requestTimeoutMs,
      keepAliveTimeout: serverConfig.keepAliveTimeoutMs,
      // Header and request deadlines are checked this often: a fraction of the shortest one.
      connectionsCheckingInterval: Math.max(
        50,
        Math.min(1_000, Math.floor(serverConfig.headersTimeoutMs / 4)),
      ),
      // Answered by guardRequests in the endpoint's own format instead of Node's bare 400.
      requireHostHeader: false,
    },
    guardRequests(listener as Parameters<typeof guardRequests>[0], { render, maxHeadersCount, log }),
  );
  server.maxHeadersCount = maxHeadersCount;
  const inFlight = new InFlight(server);
  // Idle sockets, stalled uploads and readers that stopped reading are closed after this long.
  server.timeout = serverConfig.idleTimeoutMs;
  installEdgeAnswers(server, { log, render });
  installExpectContinue(server);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(config.server.port, config.server.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const host = config.server.host;
  const url = `http://${host.includes(":") ? `[${host}]` : host}:${port}`;

  const sweepMs = options.sweepMs ?? 1000;
  const sweeper = setInterval(() => {
    leases.sweepExpired().catch((err) => log.warn({ err }, "lease expiry sweep failed"));
    transactions.sweep().catch((err) => log.warn({ err }, "transaction sweep failed"));
  }, sweepMs);
  sweeper.unref();

  /** What a request still running at the shutdown's bound is answered. */
  const cutOffAnswer = (req: IncomingMessage): RawAnswer => {
    const requestId = requestIds.get(req) ?? newRequestId();
    const refusal = new DomainError(
      "ServiceUnavailable",
      "the gateway is shutting down and could not finish this request in time; please retry",
    );
    const where = { target: req.url, host: req.headers.host };
    const answer = render(refusal, where, requestId);
    const write = !isLeaseApiTarget(req.url, req.headers.host, domain) && WRITE_METHODS.has(req.method ?? "");
    return {
      status: answer.status,
      headers: {
        "content-type": answer.contentType,
        "x-amz-request-id": requestId,
        server: "fencegate",
        "retry-after": "1",
        // A write may have reached its commit: its outcome is unknown, never "refused".
        ...(write ? { "x-fence-outcome": "unknown" } : {}),
      },
      body: answer.body,
    };
  };

  const closeNow = async () => {
    await new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
    await components.close();
  };
  const metricsListener =
    metricsSettings.port === undefined
      ? undefined
      : await startMetricsListener(metrics, {
          port: metricsSettings.port,
          host: metricsSettings.host ?? host,
          token: metricsSettings.token,
        }).catch(async (err: unknown) => {
          clearInterval(sweeper);
          outcomes.close();
          await closeNow();
          throw new Error(`the metrics listener could not start: ${(err as Error).message}`, { cause: err });
        });

  const shutdown = async (boundMs: number) => {
    const started = performance.now();
    const left = () => Math.max(0, boundMs - (performance.now() - started));
    log.info({ inFlight: inFlight.size, boundMs }, "shutting down");
    server.close();
    server.closeIdleConnections();
    // Requests get the bound, less a moment kept for closing the stores and flushing the log.
    await inFlight.drained(boundMs - Math.min(STORES_CLOSE_RESERVE_MS, boundMs / 4));
    if (inFlight.size > 0) {
      log.warn({ requests: inFlight.size }, "answering the requests still running with 503");
      await inFlight.cutOff(cutOffAnswer, Math.min(CUT_OFF_FLUSH_MS, left()));
    }
    server.closeAllConnections();
    // Open transactions end with the process: aborted, their staged bytes removed, one record each.
    await transactions
      .close()
      .catch((err: unknown) => log.warn({ err }, "aborting open transactions failed"));
    let timer: NodeJS.Timeout | undefined;
    const stores = components.close().then(
      () => true,
      (err: unknown) => {
        log.warn({ err }, "closing the stores failed");
        return true;
      },
    );
    const closed = await Promise.race([
      stores,
      new Promise<false>((resolve) => {
        timer = setTimeout(() => resolve(false), left());
      }),
    ]);
    clearTimeout(timer);
    if (!closed) log.warn("the stores did not close within the shutdown's bound");
  };

  let closing: Promise<void> | undefined;
  const close = (boundMs?: number) => {
    closing ??= (async () => {
      draining = "the gateway is shutting down";
      clearInterval(sweeper);
      await metricsListener?.close();
      consoleUi.close();
      outcomes.close();
      if (boundMs === undefined) await transactions.close().catch(() => undefined);
      await (boundMs === undefined ? closeNow() : shutdown(boundMs));
    })();
    return closing;
  };
  log.info(
    {
      url,
      backend: backend.kind,
      leaseStore: leaseStore.kind,
      dataDir: config.dataDir,
      ...(metricsListener ? { metricsUrl: `${metricsListener.url}${METRICS_PATH}` } : {}),
    },
    "fencegate listening",
  );
  return {
    url,
    host,
    port,
    gatewayId,
    server,
    log,
    close,
    ...(metricsListener ? { metricsUrl: metricsListener.url } : {}),
  };
}

/** Of a shutdown's bound, what is kept for closing the stores once requests had their time. */
const STORES_CLOSE_RESERVE_MS = 1_000;
/** How long the answers given at the bound get to be written before every connection closes. */
const CUT_OFF_FLUSH_MS = 200;
/** The S3 methods that may change an object (an answer at the bound leaves their outcome unknown). */
const WRITE_METHODS = new Set(["PUT", "POST", "DELETE"]);

/** The answer the app gave to a request that was already answered: dropped, its body too. */
function discardAnswer(res: Response, outgoing: ServerResponse): Response {
  if (!outgoing.destroyed) outgoing.destroy();
  // With the connection gone, sendNodeBody only releases an object stream the answer held.
  sendNodeBody(res, outgoing);
  res.body?.cancel().catch(() => undefined);
  return new Response(null, { headers: { "x-hono-already-sent": "true" } });
}

/**
 * Whether a request target belongs to the lease API: its first path segment, however it is
 * encoded or preceded by empty segments, is the API's (`_fence` is no valid bucket name, so no
 * S3 request is taken from S3), on any host but a virtual-hosted bucket's.
 */
export function isLeaseApiTarget(
  target: string | undefined,
  host: string | undefined,
  domain: string | undefined,
): boolean {
  if (target === undefined) return false;
  if (domain !== undefined && bucketFromHost(host, domain) !== null) return false;
  // What every lease API client sends: the first segment as is, no decoding to do.
  if (target.startsWith(API_FIRST_PATH)) {
    const next = target.charCodeAt(API_FIRST_PATH.length);
    // "/_fence" then "/", "?" or the end.
    if (Number.isNaN(next) || next === 0x2f || next === 0x3f) return true;
  }
  const path = safeDecode(splitRawUrl(target).rawPath);
  const [first = ""] = path.split("/").filter((seg) => seg !== "");
  return first === API_FIRST_SEGMENT;
}

/** The lease API's first path segment ("_fence"), and it as a target starts with it ("/_fence"). */
const API_FIRST_SEGMENT = API_BASE.split("/").filter((seg) => seg !== "")[0]!;
const API_FIRST_PATH = `/${API_FIRST_SEGMENT}`;

function validHost(host: string | undefined): boolean {
  if (!host) return false;
  try {
    return new URL(`http://${host}/`).host !== "";
  } catch {
    return false;
  }
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** A lease API refusal outside the lease API's own app: its JSON error form. */
function apiEdgeAnswer(err: DomainError): EdgeAnswer {
  const e = toApiError(err);
  return { status: e.status, contentType: "application/json", body: JSON.stringify(e.body) };
}

function edgeResponse(answer: EdgeAnswer, requestId: string): Response {
  return new Response(answer.body, {
    status: answer.status,
    headers: { "content-type": answer.contentType, "x-amz-request-id": requestId, server: "fencegate" },
  });
}

/**
 * The rest of a lease API or console request's log line, once answered (the API notes the
 * principal, the lease and the error code as it learns them): its operation (the API's
 * operationId; `console:<METHOD> <path>` for the console), the lease id of its path, and the
 * decision: accepted below 400, rejected for a 4xx, unknown for a 5xx (the store did not answer,
 * so whether a grant or a release took effect is not known). Unsigned reads (health, metrics,
 * the OpenAPI document) that succeed get no decision.
 */
function summarizeApiRequest(
  summary: RequestSummary,
  method: string,
  path: string,
  op: string,
  status: number,
): void {
  const consolePath = path.startsWith("/_fence/console");
  summary.operation = consolePath ? `console:${method} ${path.slice("/_fence/console".length) || "/"}` : op;
  const leaseId = /^\/_fence\/(?:v1|console\/api)\/leases\/([^/]+)/.exec(path)?.[1];
  if (leaseId !== undefined && summary.leaseId === undefined) {
    try {
      summary.leaseId = decodeURIComponent(leaseId);
    } catch {
      summary.leaseId = leaseId;
    }
  }
  if (status >= 500) summary.decision = "unknown";
  else if (status >= 400) summary.decision = "rejected";
  else if (summary.principal !== undefined) summary.decision = "accepted";
}

/**
 * FENCEGATE_TEST_TX_PAUSE_AFTER_COMMIT_MS: a pause right after a compare-and-swap transaction's
 * commit point, before its keys are rolled forward (tests kill the gateway there). Tests only.
 */
function txTestPause(): { afterCommitPoint?: () => Promise<void> } {
  const ms = Number(process.env.FENCEGATE_TEST_TX_PAUSE_AFTER_COMMIT_MS ?? "");
  if (!(ms > 0)) return {};
  return { afterCommitPoint: () => new Promise((resolve) => setTimeout(resolve, ms)) };
}
