import { connect, type Socket } from "node:net";
import { Redis, type RedisOptions } from "ioredis";
import { afterEach, describe, expect, it } from "vitest";
import { createRedisLeaseStore } from "../../src/leases/redis/redis-lease-store.js";
import { createFileEpochStore } from "../../src/leases/redis-shared/file-epoch-store.js";
import { redisCommand, useRedisForFile } from "./redis.js";
import { type RedisFaultProxy, startRedisFaultProxy } from "./redis-fault-proxy.js";
import { tempDir } from "./temp.js";
import { sleep, waitFor } from "./wait.js";

/**
 * The Redis fault proxy against a real redis-server, driven with ioredis (as the lease stores
 * use it) and with raw RESP where the bytes are the point; what reached Redis is read directly.
 */

const redis = useRedisForFile();

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function proxy(): Promise<RedisFaultProxy> {
  const p = await startRedisFaultProxy(redis.server.port);
  cleanups.push(() => p.close());
  return p;
}

/** An ioredis client through the proxy, set up like the lease stores' (no queue, no resend). */
function client(p: RedisFaultProxy, extra: RedisOptions = {}): Redis {
  const c = new Redis(p.url, {
    enableOfflineQueue: false,
    autoResendUnfulfilledCommands: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => 50,
    lazyConnect: true,
    ...extra,
  });
  c.on("error", () => undefined);
  cleanups.push(() => c.disconnect());
  return c;
}

async function connected(c: Redis): Promise<Redis> {
  await c.connect();
  return c;
}

/** What Redis holds at `key`, read directly (not through the proxy). */
const direct = (...args: string[]) => redisCommand(redis.server.port, ...args);

/** Rejects when `promise` has not settled within `ms`: a hold that never happens fails fast. */
function within<T>(promise: Promise<T>, ms = 5_000): Promise<T> {
  return Promise.race([
    promise,
    sleep(ms).then(() => Promise.reject(new Error(`not reached within ${ms} ms`))),
  ]);
}

let n = 0;
const unique = (name: string) => `${name}:${++n}:${Date.now()}`;

describe("pairing", () => {
  it("ioredis works through it: ready check, CLIENT SETNAME, SELECT, and a pipeline paired in order", async () => {
    const p = await proxy();
    const c = await connected(client(p, { connectionName: "fenced-test", db: 3 }));
    expect(await c.client("GETNAME")).toBe("fenced-test");
    const k = unique("pipe");
    const pipeline = c.pipeline();
    for (let i = 0; i < 100; i++) {
      pipeline.set(`${k}:${i}`, `v${i}`);
      pipeline.get(`${k}:${i}`);
      pipeline.incr(`${k}:count`);
    }
    // An error reply in the middle pairs like any other.
    pipeline.incr(`${k}:0`);
    pipeline.get(`${k}:99`);
    const results = await pipeline.exec();
    expect(results).toHaveLength(302);
    for (let i = 0; i < 100; i++) {
      expect(results![3 * i]).toEqual([null, "OK"]);
      expect(results![3 * i + 1]).toEqual([null, `v${i}`]);
      expect(results![3 * i + 2]).toEqual([null, i + 1]);
    }
    expect(String(results![300]![0])).toMatch(/not an integer/);
    expect(results![301]).toEqual([null, "v99"]);

    const commands = p.seen.map((s) => s.command);
    expect(commands).toEqual(expect.arrayContaining(["INFO", "CLIENT", "SELECT"]));
    const setName = p.seen.find((s) => s.command === "CLIENT" && s.args[0]?.toUpperCase() === "SETNAME");
    expect(setName).toMatchObject({ args: [expect.any(String), "fenced-test"], reply: "+OK" });
    const gets = p.seen.filter((s) => s.command === "GET");
    expect(gets).toHaveLength(101);
    gets.slice(0, 100).forEach((s, i) => {
      expect(s).toMatchObject({ args: [`${k}:${i}`], reply: `$v${i}`, action: "forward" });
    });
    expect(p.seen.filter((s) => s.command === "INCR").map((s) => s.reply)).toEqual([
      ...Array.from({ length: 100 }, (_, i) => `:${i + 1}`),
      expect.stringMatching(/^-ERR/),
    ]);
    // Selected database 3: the keys are there and not in 0.
    expect(await redisCommand(redis.server.port, "EXISTS", `${k}:0`)).toBe(0);
  });

  it("carries values of several MiB both ways, arriving in many pieces", async () => {
    const p = await proxy();
    const c = await connected(client(p));
    const k = unique("big");
    const value = Buffer.alloc(3 * 1024 * 1024, "abcdefgh");
    value.write("start", 0);
    value.write("end", value.length - 3);
    const pipeline = c.pipeline().set(k, value).getBuffer(k).strlen(k);
    const results = await pipeline.exec();
    expect(results![0]).toEqual([null, "OK"]);
    expect((results![1]![1] as Buffer).equals(value)).toBe(true);
    expect(results![2]).toEqual([null, value.length]);
    expect(p.seen.map((s) => [s.command, s.reply?.slice(0, 8)])).toContainEqual([
      "STRLEN",
      `:${value.length}`,
    ]);
  });

  it("faults in the middle of a pipeline leave the pairing intact", async () => {
    const p = await proxy();
    const c = await connected(client(p));
    const k = unique("mid");
    p.on({ command: "GET", args: (a) => a[0] === `${k}:25` }, { kind: "delay-answer", ms: 150 });
    p.on({ command: "SET", args: (a) => a[0] === `${k}:30` }, { kind: "delay", ms: 100 });
    p.on({ command: "INCR" }, { kind: "duplicate" });
    const pipeline = c.pipeline();
    for (let i = 0; i < 50; i++) pipeline.set(`${k}:${i}`, `v${i}`).get(`${k}:${i}`);
    pipeline.incr(`${k}:n`).get(`${k}:49`);
    const started = Date.now();
    const results = await pipeline.exec();
    // The reply of GET :25 waits 150 ms; SET :30 waits 100 ms meanwhile; replies stay in order.
    // Node's timers count from the event loop's cached time: one may fire a few ms early by Date.now().
    expect(Date.now() - started).toBeGreaterThanOrEqual(145);
    for (let i = 0; i < 50; i++)
      expect(results!.slice(2 * i, 2 * i + 2)).toEqual([
        [null, "OK"],
        [null, `v${i}`],
      ]);
    // The client heard of one INCR; Redis ran two.
    expect(results!.slice(100)).toEqual([
      [null, 1],
      [null, "v49"],
    ]);
    expect(await direct("GET", `${k}:n`)).toBe("2");
    expect(p.seen.find((s) => s.args[0] === `${k}:25` && s.command === "GET")).toMatchObject({
      action: "delay-answer",
      reply: "$v25",
    });
  });

  it("EVALSHA answered NOSCRIPT falls back to EVAL, both paired", async () => {
    const p = await proxy();
    const c = await connected(client(p));
    c.defineCommand("echoKey", { numberOfKeys: 1, lua: "return KEYS[1] .. ARGV[1]" });
    const echo = (key: string, arg: string) =>
      (c as unknown as { echoKey(k: string, a: string): Promise<string> }).echoKey(key, arg);
    // ioredis sends EVAL on a connection the first time, then EVALSHA.
    expect(await echo("k", "!")).toBe("k!");
    await direct("SCRIPT", "FLUSH");
    expect(await echo("j", "?")).toBe("j?");
    expect(await echo("i", ".")).toBe("i.");
    const scripted = p.seen.filter((s) => s.command === "EVALSHA" || s.command === "EVAL");
    expect(scripted.map((s) => [s.command, s.reply?.slice(0, 9)])).toEqual([
      ["EVAL", "$k!"],
      ["EVALSHA", "-NOSCRIPT"],
      ["EVAL", "$j?"],
      ["EVALSHA", "$i."],
    ]);
  });

  it("RESP3 after HELLO 3, inline commands, and pushes that answer no command", async () => {
    const p = await proxy();
    const k = unique("resp3");
    await direct("HSET", k, "f", "v");
    const { socket, read } = await rawConnection(p.port);
    // RESP3 with client tracking: a change to a read key brings an invalidation push.
    socket.write(resp("HELLO", "3") + resp("CLIENT", "TRACKING", "on") + resp("HGETALL", k) + "PING\r\n");
    await waitFor(() => p.seen.filter((s) => s.reply !== undefined).length === 4, { what: "four replies" });
    await direct("HSET", k, "f", "w");
    socket.write(resp("GET", "nothing"));
    await waitFor(() => p.seen.length === 5 && p.seen[4]!.reply !== undefined, { what: "the fifth reply" });
    expect(p.seen.map((s) => [s.command, s.reply?.slice(0, s.command === "HELLO" ? 1 : 2)])).toEqual([
      ["HELLO", "%"],
      ["CLIENT", "+O"],
      ["HGETALL", "%1"],
      ["PING", "+P"],
      ["GET", "_"],
    ]);
    // The push reached the client, unpaired.
    expect(read()).toContain(">2\r\n$10\r\ninvalidate\r\n");
  });
});

describe("actions", () => {
  it("hold: the command and those after it on its connection wait; others pass; release lets them go", async () => {
    const p = await proxy();
    const [c, other] = [await connected(client(p)), await connected(client(p))];
    const k = unique("held");
    const rule = p.on({ command: "SET", args: (a) => a[0] === k }, { kind: "hold" });
    const set = c.set(k, "1");
    const info = await within(rule.reached);
    expect(info).toMatchObject({ command: "SET", args: [k, "1"] });
    const after = c.get(k);
    let answered = false;
    void Promise.allSettled([set, after]).then(() => {
      answered = true;
    });
    expect(await other.get(k)).toBeNull();
    await sleep(150);
    expect(answered).toBe(false);
    expect(await direct("GET", k)).toBeNull();
    rule.release();
    expect(await set).toBe("OK");
    expect(await after).toBe("1");
  });

  it("hold: a released command reaches Redis even when its client went away", async () => {
    const p = await proxy();
    const c = await connected(client(p));
    const k = unique("orphan");
    const rule = p.on({ command: "SET" }, { kind: "hold" });
    const set = c.set(k, "from a dead client");
    await within(rule.reached);
    c.disconnect();
    await expect(set).rejects.toThrow();
    await sleep(50);
    expect(await direct("GET", k)).toBeNull();
    rule.release();
    expect(await waitFor(() => direct("GET", k), { what: "the released SET", timeoutMs: 5_000 })).toBe(
      "from a dead client",
    );
    expect(p.seen.find((s) => s.command === "SET")).toMatchObject({ action: "hold", reply: "+OK" });
  });

  it("delay: the command reaches Redis after the delay", async () => {
    const p = await proxy();
    const c = await connected(client(p));
    const k = unique("late");
    p.on({ command: "SET" }, { kind: "delay", ms: 500 });
    const started = Date.now();
    const set = c.set(k, "v");
    await sleep(100);
    expect(await direct("GET", k)).toBeNull();
    expect(await set).toBe("OK");
    // Node's timers count from the event loop's cached time: one may fire a few ms early by Date.now().
    expect(Date.now() - started).toBeGreaterThanOrEqual(495);
  });

  it("drop-answer: Redis ran the command, the client's connection closed without the reply", async () => {
    const p = await proxy();
    const c = await connected(client(p));
    const k = unique("dropped");
    p.on({ command: "INCR" }, { kind: "drop-answer" });
    // ioredis says so in its words for a connection closed under a command in flight.
    await expect(c.incr(k)).rejects.toThrow(/Connection is closed|max retries per request/);
    expect(await direct("GET", k)).toBe("1");
    expect(p.seen.find((s) => s.command === "INCR")).toMatchObject({
      action: "drop-answer",
      reply: ":1",
      error: "its reply was dropped",
    });
    // ioredis reconnects by itself.
    await waitFor(() => c.status === "ready", { what: "ioredis reconnected" });
    expect(await c.incr(k)).toBe(2);
  });

  it("delay-answer: the reply comes after the client's command timeout; the command ran", async () => {
    const p = await proxy();
    const c = await connected(client(p, { commandTimeout: 200 }));
    const k = unique("slow");
    p.on({ command: "SET" }, { kind: "delay-answer", ms: 600 });
    await expect(c.set(k, "v")).rejects.toThrow(/timed out/);
    expect(await direct("GET", k)).toBe("v");
    expect(p.seen.find((s) => s.command === "SET")).toMatchObject({ action: "delay-answer", reply: "+OK" });
  });

  it("reset: the connection is reset and nothing reaches Redis", async () => {
    const p = await proxy();
    const c = await connected(client(p));
    const k = unique("reset");
    p.on({ command: "SET" }, { kind: "reset" });
    await expect(c.set(k, "v")).rejects.toThrow();
    await sleep(50);
    expect(await direct("GET", k)).toBeNull();
    await waitFor(() => c.status === "ready", { what: "ioredis reconnected" });
    expect(await c.set(k, "w")).toBe("OK");
    expect(p.seen.filter((s) => s.command === "SET").map((s) => s.action)).toEqual(["reset", "forward"]);
  });

  it("partition and killConnections: commands fail, ioredis reconnects once it ends", async () => {
    const p = await proxy();
    const c = await connected(client(p));
    const k = unique("cut");
    p.partition(true);
    await expect(c.set(k, "during")).rejects.toThrow();
    await sleep(200);
    expect(c.status).not.toBe("ready");
    p.partition(false);
    await waitFor(() => c.status === "ready", { what: "ioredis reconnected" });
    expect(await c.set(k, "after")).toBe("OK");
    expect(p.seen.find((s) => s.command === "SET")).toMatchObject({ action: "partitioned" });

    const before = p.stats.connections;
    p.killConnections();
    await waitFor(() => p.stats.connections > before && c.status === "ready", { what: "a new connection" });
    expect(await c.get(k)).toBe("after");
  });
});

describe("chaos", () => {
  it("the same seed replays the same actions on the same commands", async () => {
    const p = await proxy();
    const c = await connected(client(p));
    const run = async (seed: number) => {
      p.clear();
      p.chaos({
        seed,
        probability: 0.5,
        actions: [{ kind: "duplicate" }, { kind: "delay", ms: 2 }, { kind: "delay-answer", ms: 2 }],
        match: { command: "INCR" },
      });
      const k = unique("chaos");
      const heard: number[] = [];
      for (let i = 0; i < 30; i++) heard.push(await c.incr(`${k}:${i}`));
      p.calm();
      const stored = await Promise.all(heard.map((_, i) => direct("GET", `${k}:${i}`)));
      return { kinds: p.seen.filter((s) => s.command === "INCR").map((s) => s.action), heard, stored };
    };
    const a = await run(11);
    const b = await run(11);
    const other = await run(12);
    expect(b.kinds).toEqual(a.kinds);
    expect(other.kinds).not.toEqual(a.kinds);
    expect(new Set(a.kinds)).toEqual(new Set(["forward", "duplicate", "delay", "delay-answer"]));
    // The client always hears 1; a duplicated INCR ran twice.
    expect(a.heard.every((h) => h === 1)).toBe(true);
    expect(a.stored).toEqual(a.kinds.map((kind) => (kind === "duplicate" ? "2" : "1")));
  });
});

describe("pub/sub and the lease store", () => {
  it("a subscriber's messages pass through, and it subscribes again after its connection is killed", async () => {
    const p = await proxy();
    const sub = await connected(client(p, { enableOfflineQueue: true, maxRetriesPerRequest: null }));
    const channel = unique("chan");
    const got: string[] = [];
    sub.on("message", (_c: string, m: string) => got.push(m));
    await sub.subscribe(channel);
    await direct("PUBLISH", channel, "one");
    await waitFor(() => got.includes("one"), { what: "the first message" });
    // Commands on a subscribed connection are still seen (and may be held or reset).
    expect(p.seen.map((s) => s.command)).toContain("SUBSCRIBE");

    const before = p.stats.connections;
    p.killConnections();
    // Back on a new connection (the old one is gone from Redis well before ioredis reconnects).
    const subscribers = async () => ((await direct("PUBSUB", "NUMSUB", channel)) as [string, number])[1];
    await waitFor(async () => p.stats.connections > before && (await subscribers()) === 1, {
      what: "subscribed again",
    });
    await direct("PUBLISH", channel, "two");
    await waitFor(() => got.includes("two"), { what: "the message after the reconnect" });
    expect(got).toEqual(["one", "two"]);
  });

  it("a subscribed connection's replies pass through unpaired; answer faults do not apply there", async () => {
    const p = await proxy();
    const [a, b] = [unique("a"), unique("b")];
    const { socket, read } = await rawConnection(p.port);
    // Two confirmations answer one SUBSCRIBE; had they been paired, the second would count as
    // PING's reply, and the drop-answer rule would drop it and close the connection.
    const dropped = p.on({ command: "PING" }, { kind: "drop-answer" });
    socket.write(resp("SUBSCRIBE", a, b) + resp("PING"));
    await waitFor(() => read().includes("pong"), { what: "the pong" });
    expect(dropped.count).toBe(1);
    await direct("PUBLISH", b, "still here");
    await waitFor(() => read().includes("still here"), { what: "the message" });
    expect(read()).toMatch(
      new RegExp(`subscribe\\r\\n\\$${a.length}\\r\\n${a}[^]*subscribe[^]*${b}[^]*pong[^]*still here`),
    );
    expect(socket.destroyed).toBe(false);
    expect(p.seen.find((s) => s.command === "PING")).toMatchObject({
      action: "drop-answer",
      error: expect.stringMatching(/forwarded as is/),
    });
  });

  it("the Redis lease store works through it, and again after its connection is killed", async () => {
    const p = await proxy();
    const dir = tempDir("fencegate-epochs-");
    cleanups.push(() => dir.cleanup());
    const store = createRedisLeaseStore({
      url: p.url,
      epochs: createFileEpochStore(dir.path),
      keyPrefix: `{${unique("proxied")}}`,
      commandTimeoutMs: 1_000,
    });
    cleanups.push(() => store.close());
    expect(await store.ready(5_000)).toBe(true);
    const first = await store.tryAcquire({ resource: { bucket: "b", key: "k" }, ttlMs: 60_000, owner: "o" });
    if (!first.granted) throw new Error("not granted");
    expect(p.seen.some((s) => s.command === "EVALSHA" || s.command === "EVAL")).toBe(true);

    const before = p.stats.connections;
    p.killConnections();
    await waitFor(async () => p.stats.connections > before && (await store.ready(200)), {
      what: "the lease store back on a new connection",
      timeoutMs: 10_000,
    });
    const second = await store.tryAcquire({
      resource: { bucket: "b", key: "k2" },
      ttlMs: 60_000,
      owner: "o",
    });
    if (!second.granted) throw new Error("not granted");
    expect(second.lease.token).toBeGreaterThan(first.lease.token);
  });
});

/** RESP for one command. */
function resp(...args: string[]): string {
  return `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join("")}`;
}

async function rawConnection(port: number): Promise<{ socket: Socket; read: () => string }> {
  const socket = connect(port, "127.0.0.1");
  await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject));
  cleanups.push(() => {
    socket.destroy();
  });
  let received = "";
  socket.on("data", (d: Buffer) => {
    received += d.toString();
  });
  return { socket, read: () => received };
}
