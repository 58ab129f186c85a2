/**
 * An HTTP/1.1 proxy that sits on the wire between the gateway and an HTTP store (an S3 upstream,
 * Azurite), for the safety tests: point the gateway's store endpoint at `proxy.url` and pick
 * requests by method, path, headers or query for a fault.
 *
 * What each action does, and the fault it stands for:
 * - `forward`: passed on unchanged (a healthy network);
 * - `hold`: its body read in full, then kept until `rule.release()`, and forwarded then even when
 *   its client went away meanwhile (a commit stuck in the network while its gateway pauses or dies);
 * - `delay`: forwarded after `ms` (a late request); not at all when its client went away meanwhile;
 * - `drop-answer`: forwarded, the store's whole answer read and thrown away, then the client's
 *   connection reset (the store acted, the client never hears: an unknown outcome);
 * - `delay-answer`: forwarded; the answer goes to the client after `ms` (an answer later than the
 *   client's timeout: it is thrown away when the client is gone by then);
 * - `reset`: the client's connection reset (RST), nothing forwarded (a request lost on the way);
 * - `duplicate`: its body read in full, forwarded, and forwarded again once the first answer
 *   began to come back; the client gets the first answer after the second was read (a request
 *   the network or a retrying middlebox delivered twice).
 *
 * `partition(true)` resets every new connection and every request until `partition(false)`; an
 * answer that comes back meanwhile is dropped (the client's connection is destroyed).
 * `chaos({ seed, probability, actions, match, holdMs })` draws an action for each matching request
 * from a seeded PRNG (the same seed replays the same sequence); `calm()` ends it.
 *
 * Headers go through as the client sent them (names, case, order, duplicates; Host too, so SigV4
 * signatures still verify), answers likewise; connections are kept alive on both sides. Bodies
 * stream both ways (`hold` and `duplicate` aside: they are meant for small requests such as
 * commits). The proxy never throws on a client or store that goes away: what went wrong is
 * written in the request's `seen` entry, and the client sees its connection close.
 *
 * For example, a commit on an S3 store whose answer is lost (the gateway must answer 503 with
 * `x-fence-outcome: unknown`), then the next one held while its gateway is killed:
 *
 *     const proxy = await startHttpFaultProxy(store.url); // the gateway's FENCEGATE_S3_ENDPOINT
 *     proxy.on({ method: "PUT", path: /\/\.fencegate\/r\// }, { kind: "drop-answer" });
 *     const held = proxy.on({ method: "PUT", path: `/${bucket}/.fencegate/r/${key}` }, { kind: "hold" });
 *     await held.reached; // kill -9 the gateway here
 *     held.release();     // the commit reaches the store all the same
 *
 * Meant for the safety scenarios that put a gateway on an S3 or Azure backend behind it, in time
 * in place of the ad-hoc proxies (test/backends/s3/proxy.ts, test/client/fault-proxy.ts, the
 * holds of test/safety/remote-stores.ts). Its own tests: fault-proxy.test.ts.
 */
import {
  Agent,
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  request,
  type ServerResponse,
} from "node:http";
import type { AddressInfo, Socket } from "node:net";
import type { Readable } from "node:stream";
import {
  type ChaosOptions,
  type FaultAction,
  type FaultKind,
  type FaultRule,
  FaultRules,
  type RuleOptions,
  resetSocket as reset,
} from "./fault-rules.js";
import { sleep } from "./wait.js";

export type HttpMatch = {
  /** One method or several (upper case, as on the wire). */
  method?: string | string[];
  /** A prefix of the decoded path, a RegExp tested on it, or a predicate on it (no query). */
  path?: string | RegExp | ((path: string) => boolean);
  headers?: (headers: IncomingHttpHeaders) => boolean;
  query?: (query: URLSearchParams) => boolean;
};

/** What `rule.reached` resolves with. */
export type HttpRequestInfo = {
  method: string;
  /** Decoded path, without the query. */
  path: string;
  /** The raw query string, without "?". */
  query: string;
  headers: IncomingHttpHeaders;
};

export type HttpSeen = {
  method: string;
  path: string;
  query: string;
  /** What the proxy did with it; "partitioned" while partition(true) was on. */
  action: FaultKind | "partitioned";
  /** When it arrived (Date.now()). */
  at: number;
  /** The store's status code, when its answer came (the first copy's for "duplicate"). */
  status?: number;
  /** "duplicate": the status code of the second copy. */
  duplicateStatus?: number;
  /** What went wrong: the client went away, the store could not be reached, the proxy closed... */
  error?: string;
};

export type HttpFaultProxy = {
  /** http://127.0.0.1:PORT */
  url: string;
  port: number;
  on(match: HttpMatch, action: FaultAction, options?: RuleOptions): FaultRule<HttpRequestInfo>;
  /** Every request, in arrival order. */
  seen: HttpSeen[];
  /** Connections accepted from clients and opened to the store so far. */
  stats: { clientConnections: number; storeConnections: number };
  partition(on: boolean): void;
  chaos(options: ChaosOptions<HttpMatch>): void;
  /** Ends the random mode and releases what it holds. */
  calm(): void;
  /** Back to a plain proxy: no rules (what they hold is released), no chaos, no partition, `seen` emptied. */
  clear(): void;
  /** Destroys every connection; held requests are never forwarded. */
  close(): Promise<void>;
};

export async function startHttpFaultProxy(targetUrl: string): Promise<HttpFaultProxy> {
  const target = new URL(targetUrl);
  const rules = new FaultRules<HttpMatch, HttpRequestInfo>(matchesHttp);
  const seen: HttpSeen[] = [];
  const stats = { clientConnections: 0, storeConnections: 0 };
  const storeSockets = new WeakSet<Socket>();
  // Idle store connections are closed after 2 s, before the store closes them itself (Node's
  // default is 5 s): a request sent on a connection the store is just closing would fail here
  // and look like a fault nobody asked for.
  const agent = new Agent({ keepAlive: true, timeout: 2_000 });
  let partitioned = false;

  /** Sends one copy of the request to the store; resolves with its answer, not yet read. */
  const send = (req: IncomingMessage, body: Buffer | Readable, entry: HttpSeen): Promise<IncomingMessage> =>
    new Promise((resolve, reject) => {
      // A late (delayed) request whose client is gone: its body went with it.
      if (!Buffer.isBuffer(body) && req.destroyed) {
        reject(new Error("the client went away before its request was forwarded"));
        return;
      }
      const out = request({
        host: target.hostname,
        port: target.port,
        method: req.method,
        path: req.url,
        // The client's headers as they came: same names, case, order and repeats.
        headers: req.rawHeaders,
        setHost: false,
        agent,
      });
      out.on("socket", (socket) => {
        if (storeSockets.has(socket)) return;
        storeSockets.add(socket);
        stats.storeConnections++;
      });
      out.on("response", (answer: IncomingMessage) => {
        entry.status ??= answer.statusCode;
        resolve(answer);
      });
      out.on("error", reject);
      if (Buffer.isBuffer(body)) out.end(body);
      else {
        body.pipe(out);
        // A client that went away mid-body: the store sees the request cut off, as it would.
        body.on("close", () => {
          if (!req.complete) out.destroy(new Error("the client went away before its request was sent"));
        });
      }
    });

  const handle = async (
    req: IncomingMessage,
    res: ServerResponse,
    info: HttpRequestInfo,
    entry: HttpSeen,
  ) => {
    const decision = rules.decide(info);
    const action = decision.action;
    entry.action = action.kind;
    const client = req.socket;
    switch (action.kind) {
      case "reset":
        reset(client);
        return;
      case "hold": {
        const body = await readAll(req);
        if (!(await decision.hold())) throw new Error("the proxy closed while the request was held");
        return deliver(res, await send(req, body, entry));
      }
      case "delay":
        await sleep(action.ms);
        return deliver(res, await send(req, req, entry));
      case "drop-answer": {
        const answer = await send(req, req, entry);
        await drain(answer);
        reset(client);
        return;
      }
      case "delay-answer": {
        const answer = await send(req, req, entry);
        await sleep(action.ms);
        return deliver(res, answer);
      }
      case "duplicate": {
        const body = await readAll(req);
        const first = await send(req, body, entry);
        const second = await send(req, body, entry);
        entry.duplicateStatus = second.statusCode;
        await drain(second);
        return deliver(res, first);
      }
      case "forward":
        return deliver(res, await send(req, req, entry));
    }
  };

  /** Hands the store's answer to the client, or throws it away when the client cannot hear. */
  const deliver = async (res: ServerResponse, answer: IncomingMessage) => {
    const client = res.req.socket;
    if (client.destroyed) {
      await drain(answer);
      throw new Error("the client went away before its answer came");
    }
    if (partitioned) {
      await drain(answer);
      reset(client);
      throw new Error("the answer came during a partition");
    }
    res.writeHead(answer.statusCode ?? 502, answer.statusMessage, answer.rawHeaders);
    answer.pipe(res);
    await new Promise<void>((resolve, reject) => {
      answer.on("error", reject);
      res.on("close", () => {
        if (!answer.complete) {
          answer.destroy();
          reject(new Error("the answer was cut off"));
        } else resolve();
      });
      answer.on("end", resolve);
    }).catch((e: Error) => {
      // The client must not take a cut-off answer for a whole one.
      res.destroy();
      throw e;
    });
  };

  const server = createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
    const info = requestInfo(req);
    const entry: HttpSeen = {
      method: info.method,
      path: info.path,
      query: info.query,
      action: "forward",
      at: Date.now(),
    };
    seen.push(entry);
    // A client gone mid-answer must not take the proxy down with it.
    res.on("error", (e: Error) => {
      entry.error ??= e.message;
    });
    if (partitioned) {
      entry.action = "partitioned";
      reset(req.socket);
      return;
    }
    handle(req, res, info, entry).catch((e: Error) => {
      entry.error ??= e.message;
      // Nothing sensible can be answered: the client sees its connection go, as on a broken wire.
      if (!res.headersSent) reset(req.socket);
      else res.destroy();
    });
  });
  server.on("connection", (socket: Socket) => {
    stats.clientConnections++;
    if (partitioned) reset(socket);
  });
  server.on("clientError", (_e, socket) => socket.destroy());
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    port,
    on: (match, action, options) => rules.add(match, action, options),
    seen,
    stats,
    partition(on) {
      partitioned = on;
    },
    chaos: (options) => rules.chaos(options),
    calm: () => rules.calm(),
    clear() {
      rules.clear();
      partitioned = false;
      seen.length = 0;
    },
    async close() {
      rules.close();
      server.closeAllConnections();
      agent.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function matchesHttp(match: HttpMatch, req: HttpRequestInfo): boolean {
  if (match.method !== undefined) {
    const methods = Array.isArray(match.method) ? match.method : [match.method];
    if (!methods.includes(req.method)) return false;
  }
  const { path } = match;
  if (typeof path === "string" && !req.path.startsWith(path)) return false;
  if (path instanceof RegExp && !path.test(req.path)) return false;
  if (typeof path === "function" && !path(req.path)) return false;
  if (match.headers && !match.headers(req.headers)) return false;
  if (match.query && !match.query(new URLSearchParams(req.query))) return false;
  return true;
}

function requestInfo(req: IncomingMessage): HttpRequestInfo {
  const url = req.url ?? "/";
  const cut = url.indexOf("?");
  return {
    method: req.method ?? "",
    path: decodePath(cut < 0 ? url : url.slice(0, cut)),
    query: cut < 0 ? "" : url.slice(cut + 1),
    headers: req.headers,
  };
}

function decodePath(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

/** The whole body (for hold and duplicate only); rejects when the client goes away first. */
async function readAll(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  if (!req.complete) throw new Error("the client went away before its request was read");
  return Buffer.concat(chunks);
}

/** Reads an answer to its end and throws it away (so that its connection can serve again). */
function drain(answer: IncomingMessage): Promise<void> {
  return new Promise((resolve) => {
    answer.on("end", resolve);
    answer.on("error", () => resolve());
    answer.on("close", () => resolve());
    answer.resume();
  });
}
