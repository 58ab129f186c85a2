/**
 * A TCP proxy in front of one redis-server that reads the Redis protocol both ways, for the
 * safety tests: point a lease store (or any ioredis client) at `proxy.url` and pick commands by
 * name and arguments for a fault. Each client connection gets its own connection to Redis; the
 * commands of a connection are read in order (pipelines included) and the replies paired with
 * them in that order, as Redis answers them.
 *
 * What each action does to a command, and the fault it stands for:
 * - `forward`: passed on unchanged;
 * - `hold`: kept until `rule.release()`, and with it every later command of its connection, as on a
 *   stalled connection; forwarded then even when the client went away meanwhile (a script stuck in
 *   the network while its gateway pauses or dies);
 * - `delay`: forwarded after `ms` (later commands of the connection wait behind it);
 * - `drop-answer`: forwarded; its reply is thrown away and the connection closed (Redis acted, the
 *   client never hears: an unknown outcome);
 * - `delay-answer`: forwarded; its reply, and the later replies of its connection, go to the
 *   client after `ms` (a reply later than the client's command timeout);
 * - `reset`: the connection is reset, nothing forwarded (a command lost on the way);
 * - `duplicate`: forwarded twice; the client gets the first reply, the second is thrown away.
 *
 * `partition(true)` resets new connections, and any connection on which a command or a reply
 * comes, until `partition(false)`. `killConnections()` resets every connection now (ioredis
 * reconnects by itself). `chaos(...)` and `calm()` work as in the HTTP proxy (fault-proxy.ts).
 *
 * Handshakes (HELLO, CLIENT, INFO, SELECT), EVALSHA answered NOSCRIPT then EVAL, MULTI/EXEC and
 * RESP3 all pair one reply with one command and need nothing special. A connection that
 * subscribes (SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE), runs MONITOR or CLIENT REPLY gets replies that do
 * not pair with commands: from then on its replies pass through as they come, and only `hold`,
 * `delay` and `reset` apply to its commands (the others forward them; `seen` says so). RESP3
 * pushes pass through unpaired at any time. Replies are passed on whole, one at a time (no
 * backpressure: this is for test-sized values).
 *
 * For example, a lease script that Redis runs but whose reply never comes back, then a
 * connection stalled on its next script:
 *
 *     const proxy = await startRedisFaultProxy(redis.port); // the lease store's URL: proxy.url
 *     proxy.on({ command: ["EVALSHA", "EVAL"] }, { kind: "drop-answer" });
 *     const stalled = proxy.on({ command: "EVALSHA" }, { kind: "hold" });
 *     await stalled.reached; // SIGSTOP the lease holder, take the lease elsewhere...
 *     stalled.release();
 *
 * Meant for the safety tests of the Redis and Redlock lease stores and of the Redis audit log.
 * Its own tests: redis-fault-proxy.test.ts.
 */
import { connect, createServer, type Socket } from "node:net";
import {
  type ChaosOptions,
  type FaultAction,
  type FaultKind,
  type FaultRule,
  FaultRules,
  type RuleOptions,
  resetSocket as reset,
} from "./fault-rules.js";
import { commandArgs, RespReader, replySummary } from "./resp-reader.js";
import { sleep } from "./wait.js";

export type RedisMatch = {
  /** A command name or several, any case (e.g. "EVALSHA", ["SET", "GET"]); default: any. */
  command?: string | string[];
  /** A predicate on the arguments after the command name. */
  args?: (args: string[]) => boolean;
};

/** What `rule.reached` resolves with. */
export type RedisCommandInfo = {
  /** The command name, upper case. */
  command: string;
  args: string[];
  /** Which connection it came on (1 for the first the proxy accepted). */
  connection: number;
};

export type RedisSeen = {
  command: string;
  /** Its arguments, each cut to 200 characters. */
  args: string[];
  connection: number;
  action: FaultKind | "partitioned";
  /** When it arrived (Date.now()). */
  at: number;
  /** The first line of its reply (a short bulk string as `$content`), once it came. */
  reply?: string;
  /** What went wrong: the connection closed before the reply, the client was gone... */
  error?: string;
};

export type RedisFaultProxy = {
  /** redis://127.0.0.1:PORT */
  url: string;
  port: number;
  on(match: RedisMatch, action: FaultAction, options?: RuleOptions): FaultRule<RedisCommandInfo>;
  /** Every command, in arrival order. */
  seen: RedisSeen[];
  /** Connections accepted so far. */
  stats: { connections: number };
  partition(on: boolean): void;
  /** Resets every open connection (client and Redis side). */
  killConnections(): void;
  chaos(options: ChaosOptions<RedisMatch>): void;
  calm(): void;
  /** Back to a plain proxy: no rules (what they hold is released), no chaos, no partition, `seen` emptied. */
  clear(): void;
  /** Resets every connection; held commands are never forwarded. */
  close(): Promise<void>;
};

/** Commands after which a connection's replies no longer pair with its commands. */
const UNPAIRED = new Set(["SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "MONITOR"]);

/** A forwarded command waiting for its reply. */
type Awaited = {
  entry: RedisSeen | null;
  /** Throw the reply away (the second copy of a duplicate). */
  discard?: boolean;
  dropAnswer?: boolean;
  delayMs?: number;
  /** Replies stop pairing once those before this point are in. */
  unpairedFromHere?: boolean;
};

export async function startRedisFaultProxy(
  redisPort: number,
  redisHost = "127.0.0.1",
): Promise<RedisFaultProxy> {
  const rules = new FaultRules<RedisMatch, RedisCommandInfo>(matchesRedis);
  const seen: RedisSeen[] = [];
  const stats = { connections: 0 };
  const open = new Set<() => void>();
  let partitioned = false;

  const server = createServer((client: Socket) => {
    const id = ++stats.connections;
    if (partitioned) {
      reset(client);
      return;
    }
    const store = connect(redisPort, redisHost);
    const commands = new RespReader("commands");
    const replies = new RespReader("replies");
    /** Commands read, not yet forwarded (behind a held or delayed one). */
    const queue: { frame: Buffer; entry: RedisSeen | null; args: string[] }[] = [];
    const awaiting: Awaited[] = [];
    let pumping = false;
    let unpaired = false;
    let clientGone = false;
    let killed = false;
    // Replies go to the client in order: straight away while nothing waits, else through one
    // chain (a delayed reply delays those after it, as on a stalled connection).
    let out: Promise<void> = Promise.resolve();
    let outWaiting = 0;
    const toClient = (bytes: Buffer, delayMs = 0, entry: RedisSeen | null = null) => {
      const write = () => {
        if (client.destroyed) noteError(entry, "the client went away before its reply");
        else client.write(bytes);
      };
      if (outWaiting === 0 && delayMs === 0) {
        write();
        return;
      }
      outWaiting++;
      out = out.then(async () => {
        if (delayMs > 0) await sleep(delayMs);
        outWaiting--;
        write();
      });
    };

    /**
     * Ends both sides (reset, drop-answer, partition, kill): nothing more goes through. `graceful`
     * (Redis closed its side): the replies already on their way reach the client first.
     */
    const kill = (why: string, graceful = false) => {
      if (killed) return;
      killed = true;
      open.delete(killConn);
      for (const c of queue.splice(0)) noteError(c.entry, `${why} before it was forwarded`);
      for (const a of awaiting.splice(0)) if (!a.discard) noteError(a.entry, `${why} before its reply`);
      reset(store);
      if (graceful) out.then(() => client.end());
      else reset(client);
    };
    const killConn = () => kill("the connection was killed");
    open.add(killConn);

    /** Forwards the queued commands in order, waiting out holds and delays. */
    const pump = async () => {
      if (pumping) return;
      pumping = true;
      try {
        while (queue.length > 0 && !killed) await forwardOne(queue[0]!);
      } finally {
        pumping = false;
      }
      // A client that went away: Redis still gets what it sent, then the connection ends.
      if (clientGone && !killed) store.end();
    };

    const forwardOne = async (c: { frame: Buffer; entry: RedisSeen | null; args: string[] }) => {
      const entry = c.entry;
      if (entry === null) {
        // An empty inline line: Redis answers nothing.
        queue.shift();
        store.write(c.frame);
        return;
      }
      const decision = rules.decide({ command: entry.command, args: c.args, connection: id });
      const action = decision.action;
      entry.action = action.kind;
      if (action.kind === "reset") {
        queue.shift();
        kill("the connection was reset");
        return;
      }
      if (action.kind === "hold" && !(await decision.hold())) {
        kill("the proxy closed");
        return;
      }
      if (action.kind === "delay") await sleep(action.ms);
      if (killed) return;
      queue.shift();
      const expect: Awaited = { entry };
      if (unpaired && ["drop-answer", "delay-answer", "duplicate"].includes(action.kind)) {
        entry.error = `${action.kind} does not apply once replies no longer pair: forwarded as is`;
      } else if (action.kind === "drop-answer") expect.dropAnswer = true;
      else if (action.kind === "delay-answer") expect.delayMs = action.ms;
      store.write(c.frame);
      const name = entry.command;
      const stopsPairing = UNPAIRED.has(name) || (name === "CLIENT" && c.args[0]?.toUpperCase() === "REPLY");
      if (stopsPairing) {
        expect.unpairedFromHere = true;
        // Its own reply (and everything after it) passes through as it comes.
        expect.entry = null;
      }
      awaiting.push(expect);
      if (action.kind === "duplicate" && !unpaired) {
        store.write(c.frame);
        awaiting.push({ entry, discard: true });
      }
      startPassThroughIfDue();
    };

    /** Once the replies owed before a subscribe are in, everything else passes through. */
    const startPassThroughIfDue = () => {
      if (unpaired || !awaiting[0]?.unpairedFromHere) return;
      unpaired = true;
      awaiting.length = 0;
      const rest = replies.rest();
      if (rest.length > 0) toClient(rest);
    };

    const onReply = (frame: Buffer) => {
      // A RESP3 push (pub/sub message, invalidation) answers no command.
      if (frame[0] === 0x3e) {
        toClient(frame);
        return;
      }
      const expect = awaiting.shift();
      if (!expect) {
        // A reply nobody asked for: stop pairing rather than mislabel what follows.
        unpaired = true;
        toClient(Buffer.concat([frame, replies.rest()]));
        return;
      }
      if (expect.entry && !expect.discard) expect.entry.reply = replySummary(frame);
      if (partitioned && !expect.discard) {
        kill("the connection was reset (partition)");
        noteError(expect.entry, "its reply came during a partition");
        return;
      }
      if (expect.discard) return;
      if (expect.dropAnswer) {
        noteError(expect.entry, "its reply was dropped");
        kill("the connection was closed after a dropped reply");
        return;
      }
      toClient(frame, expect.delayMs ?? 0, expect.entry);
      startPassThroughIfDue();
    };

    client.on("data", (chunk: Buffer) => {
      if (killed) return;
      commands.push(chunk);
      try {
        for (let frame = commands.next(); frame; frame = commands.next()) {
          const args = commandArgs(frame);
          let entry: RedisSeen | null = null;
          if (args.length > 0) {
            entry = {
              command: args[0]!.toUpperCase(),
              args: args.slice(1).map((a) => (a.length > 200 ? `${a.slice(0, 200)}…` : a)),
              connection: id,
              action: "forward",
              at: Date.now(),
            };
            seen.push(entry);
          }
          if (partitioned && entry) entry.action = "partitioned";
          queue.push({ frame, entry, args: args.slice(1) });
        }
      } catch (e) {
        kill(`the client sent what is not RESP (${(e as Error).message})`);
        return;
      }
      if (partitioned) {
        kill("the connection was reset (partition)");
        return;
      }
      pump().catch(() => kill("the proxy failed"));
    });
    store.on("data", (chunk: Buffer) => {
      if (killed) return;
      if (unpaired) {
        if (partitioned) kill("the connection was reset (partition)");
        else toClient(chunk);
        return;
      }
      replies.push(chunk);
      try {
        for (let frame = replies.next(); frame && !unpaired && !killed; frame = replies.next())
          onReply(frame);
      } catch (e) {
        kill(`Redis sent what is not RESP (${(e as Error).message})`);
      }
    });
    client.on("close", () => {
      clientGone = true;
      if (!pumping && queue.length === 0 && !killed) store.end();
    });
    store.on("close", () => {
      // Redis went away (or closed the connection): so does the client's connection, at once.
      if (!killed) kill("Redis closed the connection", true);
    });
    client.on("error", () => undefined);
    store.on("error", () => undefined);
  });
  server.on("error", () => undefined);

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  const killAll = () => {
    for (const kill of [...open]) kill();
  };

  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    on: (match, action, options) => rules.add(match, action, options),
    seen,
    stats,
    partition(on) {
      partitioned = on;
    },
    killConnections: killAll,
    chaos: (options) => rules.chaos(options),
    calm: () => rules.calm(),
    clear() {
      rules.clear();
      partitioned = false;
      seen.length = 0;
    },
    async close() {
      rules.close();
      killAll();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function matchesRedis(match: RedisMatch, info: RedisCommandInfo): boolean {
  if (match.command !== undefined) {
    const names = (Array.isArray(match.command) ? match.command : [match.command]).map((n) =>
      n.toUpperCase(),
    );
    if (!names.includes(info.command)) return false;
  }
  return match.args === undefined || match.args(info.args);
}

function noteError(entry: RedisSeen | null, error: string): void {
  if (entry && entry.error === undefined) entry.error = error;
}
