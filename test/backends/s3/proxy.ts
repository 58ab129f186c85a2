import { createServer, type IncomingMessage, request, type Server } from "node:http";
import type { AddressInfo, Socket } from "node:net";

/** What the proxy does with a request: pass it on, lose it, or pass it on and lose the answer. */
export type ProxyAction = "forward" | "lose-request" | "lose-answer";

/** Forward this body instead of reading the request's (a decision that read the body itself). */
export type ForwardBody = { forward: Buffer };

export type Proxy = {
  url: string;
  /** Method and decoded path of every request seen. */
  seen: { method: string; path: string }[];
  close(): Promise<void>;
};

/**
 * An HTTP proxy in front of a store, for tests: it forwards requests unchanged (the Host header
 * too, so SigV4 signatures still verify), and can break the connection of chosen ones.
 */
export async function startProxy(
  target: string,
  /** May answer later: the request waits in the proxy (its body unread) until then. */
  decide: (
    req: IncomingMessage,
    path: string,
  ) => ProxyAction | ForwardBody | Promise<ProxyAction | ForwardBody> = () => "forward",
): Promise<Proxy> {
  const to = new URL(target);
  const seen: Proxy["seen"] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer(async (req, res) => {
    const path = decodeURIComponent(req.url ?? "");
    seen.push({ method: req.method ?? "", path });
    const decided = await decide(req, path);
    const action = typeof decided === "string" ? decided : "forward";
    if (action === "lose-request") {
      req.socket.destroy();
      return;
    }
    const upstream = request(
      { host: to.hostname, port: to.port, method: req.method, path: req.url, headers: req.headers },
      (up) => {
        if (action === "lose-answer") {
          up.resume();
          up.once("end", () => req.socket.destroy());
          return;
        }
        res.writeHead(up.statusCode ?? 502, up.headers);
        up.pipe(res);
      },
    );
    upstream.on("error", () => req.socket.destroy());
    // The client may be gone by now (a held request): its answer goes nowhere.
    res.on("error", () => undefined);
    if (typeof decided === "string") req.pipe(upstream);
    else upstream.end(decided.forward);
  });
  server.on("connection", (s) => {
    sockets.add(s);
    s.once("close", () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
