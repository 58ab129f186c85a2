import { timingSafeEqual } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Metrics } from "./metrics.js";

/** Where the metrics are served and who may read them (docs/operations.md, "Metrics"). */
export type MetricsSettings = {
  /** A listener of its own for /_fence/v1/metrics (0: any free port); none when undefined. */
  port?: number;
  /** Its address (default: the gateway's host). */
  host?: string;
  /** The bearer token a scrape from another machine must send; without it only loopback reads. */
  token?: string;
};

/** FENCEGATE_METRICS_PORT, FENCEGATE_METRICS_HOST and FENCEGATE_METRICS_TOKEN. */
export function metricsSettingsFromEnv(env: NodeJS.ProcessEnv): MetricsSettings {
  const settings: MetricsSettings = {};
  const port = env.FENCEGATE_METRICS_PORT;
  if (port !== undefined && port !== "") {
    if (!/^\d+$/.test(port) || Number(port) > 65_535) {
      throw new Error(`FENCEGATE_METRICS_PORT: expected a port number from 0 to 65535, got "${port}"`);
    }
    settings.port = Number(port);
  }
  if (env.FENCEGATE_METRICS_HOST) settings.host = env.FENCEGATE_METRICS_HOST;
  if (env.FENCEGATE_METRICS_TOKEN) settings.token = env.FENCEGATE_METRICS_TOKEN;
  return settings;
}

type MetricsAnswer = { status: number; headers: Record<string, string>; body: string };

/** Whether a peer address is this machine's loopback interface. */
export function isLoopback(address: string | undefined): boolean {
  if (!address) return false;
  const v4 = address.startsWith("::ffff:") ? address.slice("::ffff:".length) : address;
  return v4.startsWith("127.") || address === "::1";
}

/**
 * The answer to GET /_fence/v1/metrics: the exposition for a loopback peer or a request with the
 * configured bearer token; 401 otherwise, with a JSON error that says what is missing.
 */
export async function metricsAnswer(
  metrics: Metrics,
  request: { remoteAddress: string | undefined; authorization: string | undefined },
  token: string | undefined,
): Promise<MetricsAnswer> {
  if (!isLoopback(request.remoteAddress) && !bearerMatches(request.authorization, token)) {
    const message =
      token === undefined
        ? "metrics are served without a token only on loopback; set FENCEGATE_METRICS_TOKEN and send it as a bearer token"
        : "metrics need the bearer token (Authorization: Bearer <FENCEGATE_METRICS_TOKEN>)";
    return {
      status: 401,
      headers: { "content-type": "application/json", "www-authenticate": 'Bearer realm="fencegate metrics"' },
      body: JSON.stringify({ error: { code: "Unauthorized", message } }),
    };
  }
  return {
    status: 200,
    headers: { "content-type": metrics.contentType, "cache-control": "no-store" },
    body: await metrics.exposition(),
  };
}

function bearerMatches(authorization: string | undefined, token: string | undefined): boolean {
  if (token === undefined || authorization === undefined) return false;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
  if (!match) return false;
  const given = Buffer.from(match[1]!);
  const wanted = Buffer.from(token);
  return given.length === wanted.length && timingSafeEqual(given, wanted);
}

export const METRICS_PATH = "/_fence/v1/metrics";

/**
 * The separate metrics listener (FENCEGATE_METRICS_PORT): GET /_fence/v1/metrics (and /metrics,
 * where Prometheus looks by default), under the same rules as on the gateway's port; 404 for
 * anything else.
 */
export async function startMetricsListener(
  metrics: Metrics,
  settings: { port: number; host: string; token?: string | undefined },
): Promise<{ server: Server; port: number; url: string; close(): Promise<void> }> {
  const server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    if (path !== METRICS_PATH && path !== "/metrics") {
      res.writeHead(404, { "content-type": "application/json" });
      res.end(
        JSON.stringify({ error: { code: "NotFound", message: `only ${METRICS_PATH} is served here` } }),
      );
      return;
    }
    if (req.method !== "GET") {
      res.writeHead(405, { "content-type": "application/json", allow: "GET" });
      res.end(JSON.stringify({ error: { code: "MethodNotAllowed", message: "metrics are read with GET" } }));
      return;
    }
    metricsAnswer(
      metrics,
      { remoteAddress: req.socket.remoteAddress, authorization: req.headers.authorization },
      settings.token,
    ).then(
      (answer) => {
        res.writeHead(answer.status, answer.headers);
        res.end(answer.body);
      },
      (err: unknown) => {
        res.writeHead(500, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { code: "InternalError", message: (err as Error).message } }));
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(settings.port, settings.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  const host = settings.host;
  return {
    server,
    port,
    url: `http://${host.includes(":") ? `[${host}]` : host}:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
