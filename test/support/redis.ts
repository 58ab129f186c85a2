import { spawn } from "node:child_process";
import { createConnection, createServer } from "node:net";
import { afterAll, beforeAll } from "vitest";
import { hasExited, trackChild } from "./processes.js";
import { tempDir } from "./temp.js";
import { requireTool, requireTools, TOOLS } from "./tools.js";
import { sleep } from "./wait.js";

/**
 * A private redis-server for a test: its own port on 127.0.0.1 (never 6379, where a machine's
 * own Redis may run) and its own directory. Suites that use it list "redis-server" in
 * requireTools so that a missing redis-server fails them at once.
 */
export type RedisServer = {
  /** redis://127.0.0.1:PORT */
  url: string;
  port: number;
  /** Its working directory: the append-only file lives here with persistence "aof". */
  dir: string;
  pid: number;
  persistence: RedisPersistence;
  /** What redis-server printed so far. */
  output(): string;
  /** Sends one command and returns its reply (see redisCommand). */
  command(...args: string[]): Promise<RedisReply>;
  /** Stops it (SIGTERM, a clean shutdown) and removes its directory. */
  stop(): Promise<void>;
  /** Kills it with SIGKILL, as a crash would; its directory stays, for restart(). */
  kill9(): Promise<void>;
  /**
   * Kills this one if it still runs (SIGKILL) and starts a new redis-server on the same port and
   * directory; with "aof" it reloads what was fsync'ed. Use the new handle from then on: it owns
   * the directory (this one's stop() no longer removes it).
   */
  restart(): Promise<RedisServer>;
};

/**
 * "none": no persistence at all (`--save "" --appendonly no`), what most tests want.
 * "aof": an append-only file fsync'ed on every write (`--appendonly yes --appendfsync always`),
 * so that everything acknowledged survives kill9() and restart().
 */
export type RedisPersistence = "none" | "aof";

export type RedisReply = string | number | null | RedisReply[] | { error: string };

/**
 * A port that was free a moment ago on 127.0.0.1: the kernel's choice for a socket bound to
 * port 0, closed again. Never 6379.
 */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = await new Promise<number>((resolve, reject) => {
      const server = createServer();
      server.unref();
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => {
        const address = server.address();
        const chosen = typeof address === "object" && address !== null ? address.port : 0;
        server.close(() => resolve(chosen));
      });
    });
    if (port !== 6379 && port !== 0) return port;
  }
}

/**
 * Starts redis-server on `port` (default: a free one) in `dir` (default: a new temporary
 * directory, removed by stop()), bound to 127.0.0.1 only. Resolves once it answers PING and
 * reports its own process id (not some other server that took the port); rejects with its output
 * when it exits first or is not ready within `timeoutMs`.
 */
export async function startRedis(
  opts: { persistence?: RedisPersistence; port?: number; dir?: string; timeoutMs?: number } = {},
): Promise<RedisServer> {
  requireTool("redis-server");
  if (opts.port === 6379) throw new Error("startRedis never uses port 6379: that is the machine's own Redis");
  const persistence = opts.persistence ?? "none";
  const owned = opts.dir === undefined ? tempDir("fencegate-redis-") : undefined;
  const dir = opts.dir ?? owned!.path;
  // A free port can be taken by someone else before redis-server binds it: then try another.
  for (let attempt = 1; ; attempt++) {
    const port = opts.port ?? (await freePort());
    try {
      return await launch({ port, dir, persistence, owned, timeoutMs: opts.timeoutMs ?? 20_000 });
    } catch (e) {
      const portTaken = e instanceof PortTaken;
      if (!portTaken || opts.port !== undefined || attempt >= 5) {
        owned?.cleanup();
        throw portTaken ? new Error(e.message) : e;
      }
    }
  }
}

class PortTaken extends Error {}

async function launch(o: {
  port: number;
  dir: string;
  persistence: RedisPersistence;
  owned: { cleanup(): void } | undefined;
  timeoutMs: number;
}): Promise<RedisServer> {
  const { port, dir, persistence } = o;
  const args = [
    "--port",
    String(port),
    "--bind",
    "127.0.0.1",
    "--dir",
    dir,
    "--save",
    "",
    ...(persistence === "aof" ? ["--appendonly", "yes", "--appendfsync", "always"] : ["--appendonly", "no"]),
    "--daemonize",
    "no",
    "--logfile",
    "",
  ];
  const child = spawn(TOOLS["redis-server"].path, args, { cwd: dir, stdio: ["ignore", "pipe", "pipe"] });
  trackChild(child);
  let out = "";
  child.stdout.on("data", (d) => {
    out += d;
  });
  child.stderr.on("data", (d) => {
    out += d;
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const spawnError = new Promise<Error>((resolve) => child.once("error", resolve));
  const stopChild = async (signal: NodeJS.Signals) => {
    if (!hasExited(child)) child.kill(signal);
    await exited;
  };

  const deadline = Date.now() + o.timeoutMs;
  for (;;) {
    const failed = await Promise.race([spawnError, sleep(0).then(() => null)]);
    if (failed) throw new Error(`cannot run ${TOOLS["redis-server"].path}: ${failed.message}`);
    if (hasExited(child)) {
      const message = `redis-server on port ${port} exited (${child.signalCode ?? `code ${child.exitCode}`}) before answering PING:\n${out}`;
      throw /address already in use/i.test(out) ? new PortTaken(message) : new Error(message);
    }
    const info = await redisCommand(port, "INFO", "server").catch(() => null);
    if (typeof info === "string" && new RegExp(`^process_id:${child.pid}\\r?$`, "m").test(info)) {
      if ((await redisCommand(port, "PING").catch(() => null)) === "PONG") break;
    }
    if (Date.now() > deadline) {
      await stopChild("SIGKILL");
      throw new Error(`redis-server on port ${port} did not answer PING within ${o.timeoutMs} ms:\n${out}`);
    }
    await sleep(20);
  }

  let handedOver = false;
  const server: RedisServer = {
    url: `redis://127.0.0.1:${port}`,
    port,
    dir,
    pid: child.pid!,
    persistence,
    output: () => out,
    command: (...command) => redisCommand(port, ...command),
    async stop() {
      await stopChild("SIGTERM");
      if (!handedOver) o.owned?.cleanup();
    },
    async kill9() {
      await stopChild("SIGKILL");
    },
    async restart() {
      await stopChild("SIGKILL");
      handedOver = true;
      return launch({ ...o });
    },
  };
  return server;
}

/**
 * Sends one command to the Redis on 127.0.0.1:`port` over a new connection and returns its
 * reply: a simple or bulk string, an integer, null, an array, or `{ error }` for an error reply.
 * Enough RESP for tests and readiness checks; not a client library.
 */
export function redisCommand(port: number, ...args: string[]): Promise<RedisReply> {
  const request = Buffer.concat([
    Buffer.from(`*${args.length}\r\n`),
    ...args.flatMap((a) => [
      Buffer.from(`$${Buffer.byteLength(a)}\r\n`),
      Buffer.from(a),
      Buffer.from("\r\n"),
    ]),
  ]);
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host: "127.0.0.1", port });
    let data = Buffer.alloc(0);
    socket.setTimeout(5_000, () => socket.destroy(new Error(`no reply from 127.0.0.1:${port}`)));
    socket.once("error", reject);
    socket.on("data", (chunk: Buffer) => {
      data = Buffer.concat([data, chunk]);
      const parsed = parseReply(data, 0);
      if (parsed !== undefined) {
        socket.end();
        resolve(parsed.value);
      }
    });
    socket.once("close", () => reject(new Error(`connection to 127.0.0.1:${port} closed without a reply`)));
    socket.write(request);
  });
}

/** One RESP2 reply at `at`, or undefined when `data` does not hold all of it yet. */
function parseReply(data: Buffer, at: number): { value: RedisReply; next: number } | undefined {
  const lineEnd = data.indexOf("\r\n", at);
  if (lineEnd < 0) return undefined;
  const line = data.toString("utf8", at + 1, lineEnd);
  const next = lineEnd + 2;
  switch (String.fromCharCode(data[at]!)) {
    case "+":
      return { value: line, next };
    case "-":
      return { value: { error: line }, next };
    case ":":
      return { value: Number(line), next };
    case "$": {
      const length = Number(line);
      if (length < 0) return { value: null, next };
      if (data.length < next + length + 2) return undefined;
      return { value: data.toString("utf8", next, next + length), next: next + length + 2 };
    }
    case "*": {
      const count = Number(line);
      if (count < 0) return { value: null, next };
      const items: RedisReply[] = [];
      let cursor = next;
      for (let i = 0; i < count; i++) {
        const item = parseReply(data, cursor);
        if (item === undefined) return undefined;
        items.push(item.value);
        cursor = item.next;
      }
      return { value: items, next: cursor };
    }
    default:
      throw new Error(`not a RESP reply: ${JSON.stringify(data.toString("utf8", at, at + 40))}`);
  }
}

/**
 * A redis-server and a directory for token epochs shared by the tests of one file (each test
 * keeps to a key prefix of its own): fails the file loudly without redis-server, starts both
 * before the file's tests and removes them after. Read the fields inside tests and hooks.
 */
export function useRedisForFile(): { server: RedisServer; epochDir: string } {
  requireTools("redis-server");
  const fixture = {} as { server: RedisServer; epochDir: string };
  let dir: { path: string; cleanup(): void } | undefined;
  beforeAll(async () => {
    fixture.server = await startRedis();
    dir = tempDir("fencegate-epochs-");
    fixture.epochDir = dir.path;
  });
  afterAll(async () => {
    await fixture.server?.stop();
    dir?.cleanup();
  });
  return fixture;
}
