import { randomBytes } from "node:crypto";
import type { IncomingMessage, Server } from "node:http";
import type { AddressInfo } from "node:net";
import { createAdaptorServer } from "@hono/node-server";
import { Hono } from "hono";
import { API_BASE, leaseApi } from "../api/lease-api.js";
import { apiAuthenticator } from "../api/request-auth.js";
import { resolveSecrets } from "../config/resolve.js";
import type { Config } from "../config/schema.js";
import { type Clock, systemClock } from "../core/clock.js";
import { LeaseService } from "../fence/lease-service.js";
import { WriteFencer } from "../fence/write-fencer.js";
import { createLogger, type Logger } from "../log.js";
import { bucketFromHost } from "../s3/addressing.js";
import { type S3Env, s3Handler } from "../s3/handler.js";
import { createRequestAuthenticator } from "../s3/request-auth.js";
import { installClientErrorHandler } from "./client-errors.js";
import { openComponents } from "./components.js";
import { installExpectContinue } from "./expect-continue.js";

export type Gateway = {
  /** e.g. http://127.0.0.1:9700 */
  url: string;
  host: string;
  port: number;
  gatewayId: string;
  server: Server;
  /**
   * Stops accepting connections, lets requests in flight finish for up to `graceMs`, then
   * drops the rest (an unfinished upload commits nothing) and closes the stores.
   */
  close(graceMs?: number): Promise<void>;
};

export type StartOptions = {
  clock?: Clock;
  log?: Logger;
  /** Sweep interval for expired leases (audit LeaseExpired events). */
  sweepMs?: number;
};

/** Opens the stores, builds the HTTP app and listens. Resolves once it is serving. */
export async function startGateway(config: Config, options: StartOptions = {}): Promise<Gateway> {
  const clock = options.clock ?? systemClock;
  const gatewayId = config.gatewayId ?? `gw-${randomBytes(4).toString("hex")}`;
  const log = options.log ?? createLogger(config.log.level, { gateway: gatewayId });
  const secrets = resolveSecrets(config);
  const components = await openComponents(config, { clock, gatewayId, log });
  const { backend, leaseStore, audit } = components;

  const policyFor = (bucket: string) => config.fencing.buckets[bucket] ?? config.fencing.default;
  const fencer = new WriteFencer({
    leases: leaseStore,
    audit,
    keyring: secrets.keyring,
    clock,
    policyFor,
    highestToken: (bucket, key) => backend.highestToken(bucket, key),
    appendInCommit: components.appendInCommit,
  });
  const leases = new LeaseService({
    store: leaseStore,
    audit,
    keyring: secrets.keyring,
    clock,
    limits: config.leases,
    appendInCommit: components.appendInCommit,
  });
  const authenticator = createRequestAuthenticator({ credentials: secrets.credentials, clock });

  const app = new Hono<S3Env>();
  app.use("*", async (c, next) => {
    const requestId = randomBytes(8).toString("hex").toUpperCase();
    const requestLog = log.child({ requestId });
    const started = performance.now();
    c.set("requestId", requestId);
    c.set("log", requestLog);
    await next();
    // The path only: a query string may hold a presigned signature or a fencing token.
    requestLog.info(
      {
        method: c.req.method,
        path: c.req.path,
        status: c.res.status,
        ms: Math.round(performance.now() - started),
      },
      "request",
    );
    c.res.headers.set("x-amz-request-id", requestId);
    c.res.headers.set("x-amz-id-2", Buffer.from(`${gatewayId}/${requestId}`).toString("base64"));
    c.res.headers.set("server", "fencegate");
  });
  const api = leaseApi({
    leases,
    audit,
    authenticate: apiAuthenticator(authenticator),
    health: async () => {
      await Promise.all([leaseStore.ping(), audit.ping(), backend.listBuckets()]);
      return { gateway: gatewayId, backend: backend.kind, leaseStore: leaseStore.kind, auditLog: audit.kind };
    },
  });
  const s3 = s3Handler({ services: { backend, fencer }, authenticator, domain: config.server.domain, log });
  app.all(`${API_BASE}/*`, async (c) => {
    // The lease API lives on the gateway's own host, never on a virtual-hosted bucket host.
    if (isBucketHost(c.env.incoming, config.server.domain)) return s3(c);
    return api.fetch(c.req.raw, { ...c.env, requestId: c.get("requestId") });
  });
  app.all("*", s3);

  const server = createAdaptorServer({
    fetch: app.fetch,
    serverOptions: {
      maxHeaderSize: config.server.maxHeaderBytes,
      requestTimeout: 0,
      keepAliveTimeout: 5_000,
    },
  }) as Server;
  installClientErrorHandler(server, log);
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
  }, sweepMs);
  sweeper.unref();

  let closing: Promise<void> | undefined;
  const close = (graceMs = 0) => {
    closing ??= (async () => {
      clearInterval(sweeper);
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
        const force = setTimeout(() => server.closeAllConnections(), graceMs);
        force.unref();
        server.once("close", () => clearTimeout(force));
      });
      await components.close();
    })();
    return closing;
  };
  log.info(
    { url, backend: backend.kind, leaseStore: leaseStore.kind, dataDir: config.dataDir },
    "fencegate listening",
  );
  return { url, host, port, gatewayId, server, close };
}

function isBucketHost(incoming: IncomingMessage, domain: string | undefined): boolean {
  return domain !== undefined && bucketFromHost(incoming.headers.host, domain) !== null;
}
