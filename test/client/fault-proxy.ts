import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from "node:http";
import type { AddressInfo } from "node:net";

/**
 * An HTTP proxy in front of a gateway that can fail chosen requests, to test the client's
 * retries: `plan(req)` says what to do with each request (in arrival order):
 * - "forward": pass it through;
 * - "503": answer 503 LeaseStoreUnavailable without forwarding (nothing was done);
 * - "drop-after": forward it, let the gateway act on it, then cut the client's connection
 *   without an answer (the outcome is unknown to the client).
 */
export type FaultAction = "forward" | "503" | "drop-after";

export type FaultProxy = {
  url: string;
  /** Every request seen, as "METHOD /path" with what was done. */
  seen: { method: string; path: string; action: FaultAction }[];
  close(): Promise<void>;
};

export async function startFaultProxy(
  target: string,
  plan: (req: IncomingMessage, index: number) => FaultAction,
  port = 0,
): Promise<FaultProxy> {
  const to = new URL(target);
  const seen: FaultProxy["seen"] = [];
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const action = plan(req, seen.length);
    seen.push({ method: req.method ?? "", path: (req.url ?? "").split("?")[0] ?? "", action });
    if (action === "503") {
      req.resume();
      res.writeHead(503, { "content-type": "application/json" });
      res.end(
        JSON.stringify({ error: { code: "LeaseStoreUnavailable", message: "made up by the test proxy" } }),
      );
      return;
    }
    const upstream = httpRequest(
      {
        host: to.hostname,
        port: Number(to.port),
        method: req.method,
        path: req.url,
        headers: req.headers,
      },
      (answer) => {
        if (action === "drop-after") {
          answer.resume();
          answer.on("end", () => req.socket.destroy());
          return;
        }
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on("error", () => req.socket.destroy());
    req.pipe(upstream);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve());
  });
  const { port: bound } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${bound}`,
    seen,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A port on 127.0.0.1 that nothing listens on (it was free a moment ago). */
export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", () => resolve()));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}
