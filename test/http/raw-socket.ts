import { connect, type Socket } from "node:net";

/** One HTTP/1.1 answer as read off a raw socket. */
export type SocketAnswer = {
  status: number;
  headers: Record<string, string>;
  body: string;
  /** The socket was closed by the server (rather than left open after the answer). */
  closed: boolean;
  /** Nothing at all arrived within the wait. */
  silent: boolean;
};

/**
 * Writes bytes exactly as given on a fresh connection and reads the first answer: its status,
 * headers and body (by Content-Length, or until the server closes). Gives up after `waitMs`.
 */
export function sendRaw(
  endpoint: string,
  bytes: string | Buffer | Array<string | Buffer>,
  opts: { waitMs?: number } = {},
): Promise<SocketAnswer> {
  const url = new URL(endpoint);
  const waitMs = opts.waitMs ?? 5_000;
  return new Promise((resolve) => {
    const socket = connect(Number(url.port), url.hostname);
    let data = Buffer.alloc(0);
    let done = false;
    const finish = (closed: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(parseAnswer(data, closed));
    };
    const timer = setTimeout(() => finish(false), waitMs);
    socket.on("connect", () => {
      for (const piece of Array.isArray(bytes) ? bytes : [bytes]) socket.write(piece);
    });
    socket.on("data", (d: Buffer) => {
      data = Buffer.concat([data, d]);
      if (complete(data)) finish(false);
    });
    socket.on("close", () => finish(true));
    socket.on("error", () => finish(true));
  });
}

/** Whether a whole answer (head and Content-Length bytes of body) has arrived. */
function complete(data: Buffer): boolean {
  const end = data.indexOf("\r\n\r\n");
  if (end < 0) return false;
  const head = data.subarray(0, end).toString("latin1");
  const length = /\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1];
  if (length === undefined) return false;
  return data.length >= end + 4 + Number(length);
}

export function parseAnswer(data: Buffer, closed: boolean): SocketAnswer {
  const end = data.indexOf("\r\n\r\n");
  if (data.length === 0 || end < 0) {
    return { status: 0, headers: {}, body: data.toString("latin1"), closed, silent: data.length === 0 };
  }
  const [statusLine = "", ...lines] = data.subarray(0, end).toString("latin1").split("\r\n");
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(":");
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine)?.[1] ?? 0);
  return { status, headers, body: data.subarray(end + 4).toString("utf8"), closed, silent: false };
}

/** Opens a connection and keeps it: for idle and slowloris clients. */
export function openSocket(endpoint: string): Promise<Socket> {
  const url = new URL(endpoint);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(url.port), url.hostname, () => resolve(socket));
    socket.on("error", reject);
  });
}

/**
 * Resolves when the socket is closed (by either side), with the time it took. It reads (and
 * drops) what arrives: a socket that is not read never sees the server's end.
 */
export function closedWithin(socket: Socket): Promise<number> {
  const started = Date.now();
  return new Promise((resolve) => {
    if (socket.destroyed) resolve(0);
    socket.once("close", () => resolve(Date.now() - started));
    socket.resume();
  });
}
