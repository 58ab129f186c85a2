import { existsSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { type RedisServer, redisCommand, startRedis } from "./redis.js";
import { requireTools } from "./tools.js";

/** The test helper that later suites (Redis lease stores) start their private redis-server with. */

requireTools("redis-server");

const started: RedisServer[] = [];
async function redis(opts: Parameters<typeof startRedis>[0] = {}): Promise<RedisServer> {
  const server = await startRedis(opts);
  started.push(server);
  return server;
}

afterEach(async () => {
  await Promise.all(started.splice(0).map((s) => s.stop()));
});

describe("startRedis", () => {
  it("starts a private redis-server on 127.0.0.1, on a free port that is never 6379, without persistence", async () => {
    const [a, b] = await Promise.all([redis(), redis()]);
    for (const s of [a!, b!]) {
      expect(s.port).not.toBe(6379);
      expect(s.url).toBe(`redis://127.0.0.1:${s.port}`);
      expect(await s.command("PING")).toBe("PONG");
      expect(await s.command("CONFIG", "GET", "bind")).toEqual(["bind", "127.0.0.1"]);
      expect(await s.command("CONFIG", "GET", "save")).toEqual(["save", ""]);
      expect(await s.command("CONFIG", "GET", "appendonly")).toEqual(["appendonly", "no"]);
    }
    expect(a!.port).not.toBe(b!.port);
    expect(await a!.command("SET", "k", "only in a")).toBe("OK");
    expect(await b!.command("GET", "k")).toBeNull();
  });

  it("loses everything on kill9() without persistence", async () => {
    const first = await redis();
    await first.command("SET", "k", "v");
    await first.kill9();
    await expect(redisCommand(first.port, "PING")).rejects.toThrow();
    const again = await first.restart();
    started.push(again);
    expect(again.port).toBe(first.port);
    expect(again.pid).not.toBe(first.pid);
    expect(await again.command("GET", "k")).toBeNull();
  });

  it('keeps every acknowledged write across kill9() and restart() with persistence "aof"', async () => {
    const first = await redis({ persistence: "aof" });
    expect(await first.command("CONFIG", "GET", "appendfsync")).toEqual(["appendfsync", "always"]);
    for (let i = 0; i < 50; i++) expect(await first.command("INCR", "counter")).toBe(i + 1);
    await first.kill9();
    const again = await first.restart();
    started.push(again);
    expect(again.url).toBe(first.url);
    expect(await again.command("GET", "counter")).toBe("50");
    await again.stop();
    expect(existsSync(again.dir)).toBe(false);
  });

  it("answers errors as { error } and refuses port 6379", async () => {
    const s = await redis();
    expect(await s.command("NOSUCHCOMMAND")).toMatchObject({
      error: expect.stringMatching(/unknown command/i),
    });
    await expect(startRedis({ port: 6379 })).rejects.toThrow(/never uses port 6379/);
  });
});
