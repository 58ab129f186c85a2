/**
 * Tokens never go back when Redis loses its data: a redis-server without persistence killed
 * with SIGKILL and started again on the same port, a flush, a counter that runs out. The epoch
 * lives in a directory (createFileEpochStore), the counter in Redis.
 */
import { afterEach, describe, expect, it } from "vitest";
import { fakeClock } from "../../../src/core/clock.js";
import { DomainError } from "../../../src/core/errors.js";
import { createRedisLeaseStore, type RedisLeaseStore } from "../../../src/leases/redis/redis-lease-store.js";
import type { EpochStore } from "../../../src/leases/redis-shared/epoch-store.js";
import { createFileEpochStore } from "../../../src/leases/redis-shared/file-epoch-store.js";
import { type RedisServer, startRedis } from "../../support/redis.js";
import { tempDir } from "../../support/temp.js";
import { requireTools } from "../../support/tools.js";

requireTools("redis-server");

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function redisServer(): Promise<{ current: RedisServer }> {
  const holder = { current: await startRedis({ persistence: "none" }) };
  cleanups.push(() => holder.current.stop());
  return holder;
}

function epochDir(): string {
  const dir = tempDir("fencegate-epochs-");
  cleanups.push(() => dir.cleanup());
  return dir.path;
}

async function store(url: string, epochs: EpochStore): Promise<RedisLeaseStore> {
  const s = createRedisLeaseStore({ url, epochs, commandTimeoutMs: 1_000 });
  cleanups.push(() => s.close());
  if (!(await s.ready(5_000))) throw new Error(`no connection to ${url}`);
  return s;
}

/** Grants (and releases) `n` leases on distinct keys, retrying while the store answers 503. */
async function grants(s: RedisLeaseStore, tag: string, n: number): Promise<number[]> {
  const tokens: number[] = [];
  for (let i = 0; i < n; i++) {
    for (let attempt = 0; ; attempt++) {
      try {
        const r = await s.tryAcquire({
          resource: { bucket: "b", key: `${tag}/${i}` },
          ttlMs: 60_000,
          owner: tag,
        });
        if (!r.granted) throw new Error(`not granted: ${JSON.stringify(r)}`);
        tokens.push(r.lease.token);
        break;
      } catch (e) {
        if (!(e instanceof DomainError && e.code === "LeaseStoreUnavailable") || attempt > 100) throw e;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
  }
  return tokens;
}

describe("token epochs", () => {
  it("kill -9 of a Redis without persistence, then a restart: no token after is lower than one before", async () => {
    const redis = await redisServer();
    const epochs = createFileEpochStore(epochDir());
    const a = await store(redis.current.url, epochs);
    const b = await store(redis.current.url, epochs); // a second replica on the same Redis and epochs
    const before = [...(await grants(a, "a1", 20)), ...(await grants(b, "b1", 20))];
    const highestBefore = Math.max(...before);

    for (let round = 0; round < 3; round++) {
      await redis.current.kill9();
      redis.current = await redis.current.restart();
      expect(await redis.current.command("DBSIZE")).toBe(0); // everything was lost
      // Both replicas find the counter gone and race to advance the epoch.
      const [afterA, afterB] = await Promise.all([
        grants(a, `a${round + 2}`, 20),
        grants(b, `b${round + 2}`, 20),
      ]);
      const after = [...afterA, ...afterB];
      expect(Math.min(...after)).toBeGreaterThan(highestBefore);
      expect(new Set([...before, ...after]).size).toBe(before.length + after.length);
      for (const t of after) expect(Number.isSafeInteger(t)).toBe(true);
      before.push(...after);
    }
    expect(await epochs.highest()).toBeGreaterThanOrEqual(3);
  }, 60_000);

  it("advances the epoch when the counter is missing (a flush, an eviction)", async () => {
    const redis = await redisServer();
    const epochs = createFileEpochStore(epochDir());
    const s = await store(redis.current.url, epochs);
    const before = await grants(s, "x", 5);
    await redis.current.command("DEL", "{fencegate}:floor");
    const after = await grants(s, "y", 5);
    expect(Math.min(...after)).toBeGreaterThan(Math.max(...before));
    expect(after[0]).toBe(2 ** 32 + 1); // epoch 1, counter 1
  });

  it("advances the epoch when Redis's run id changed, even with the counter intact", async () => {
    const redis = await redisServer();
    const epochs = createFileEpochStore(epochDir());
    const s = await store(redis.current.url, epochs);
    await grants(s, "x", 3);
    // What a restart that reloaded an older append-only file leaves: the floor is there, its
    // run id is another server's, and the counter may be behind tokens already granted.
    await redis.current.command("HSET", "{fencegate}:floor", "runid", "0".repeat(40), "last", "1");
    const [token] = await grants(s, "y", 1);
    expect(token).toBe(2 ** 32 + 1);
  });

  it("grants nothing while the floor is unknown and the epoch store cannot be reached, and resumes after", async () => {
    const redis = await redisServer();
    const files = createFileEpochStore(epochDir());
    let reachable = true;
    const epochs: EpochStore = {
      kind: "flaky",
      highest: () => (reachable ? files.highest() : Promise.reject(new Error("epoch store unreachable"))),
      create: (e) => (reachable ? files.create(e) : Promise.reject(new Error("epoch store unreachable"))),
    };
    const s = await store(redis.current.url, epochs);
    const before = await grants(s, "x", 3);
    reachable = false;
    await redis.current.kill9();
    redis.current = await redis.current.restart();
    await s.ready(5_000);
    for (let i = 0; i < 3; i++) {
      const attempt = s.tryAcquire({ resource: { bucket: "b", key: "k" }, ttlMs: 1_000, owner: "o" });
      await expect(attempt).rejects.toMatchObject({ code: "LeaseStoreUnavailable" });
    }
    await expect(s.beginCommit({ kind: "unfenced", bucket: "b", key: "k" })).rejects.toMatchObject({
      code: "LeaseStoreUnavailable",
    });
    reachable = true;
    const after = await grants(s, "y", 3);
    expect(Math.min(...after)).toBeGreaterThan(Math.max(...before));
  });

  it("moves to the next epoch when an epoch's counter is used up, keeping tokens below 2^53", async () => {
    const redis = await redisServer();
    const epochs = createFileEpochStore(epochDir());
    const s = await store(redis.current.url, epochs);
    await grants(s, "x", 1);
    await redis.current.command("HSET", "{fencegate}:floor", "last", String(2 ** 32 - 2));
    const tokens = await grants(s, "y", 3);
    expect(tokens).toEqual([2 ** 32 - 1, 2 ** 32 + 1, 2 ** 32 + 2]);
  });

  it("with a quarantine, grants nothing after Redis lost its data until every earlier lease has expired", async () => {
    const redis = await redisServer();
    const clock = fakeClock();
    const s = createRedisLeaseStore({
      url: redis.current.url,
      epochs: createFileEpochStore(epochDir()),
      clock,
      quarantineMs: 10_000,
      commandTimeoutMs: 1_000,
    });
    cleanups.push(() => s.close());
    await s.ready(5_000);
    // The first epoch of a deployment follows no loss: no quarantine.
    const before = await grants(s, "x", 2);
    await redis.current.kill9();
    redis.current = await redis.current.restart();
    const attempt = () => s.tryAcquire({ resource: { bucket: "b", key: "q" }, ttlMs: 1_000, owner: "o" });
    for (let i = 0; ; i++) {
      const error = await attempt().then(
        () => null,
        (e: DomainError) => e,
      );
      expect(error, "granted during the quarantine").not.toBeNull();
      if (/lost its data.*nothing is granted until/.test(error!.message)) break;
      if (i > 200) throw error; // not reconnected yet: Redis is starting
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    await expect(s.beginCommit({ kind: "unfenced", bucket: "b", key: "x/0" })).rejects.toMatchObject({
      code: "LeaseStoreUnavailable",
    });
    clock.advance(9_999);
    await expect(attempt()).rejects.toMatchObject({ code: "LeaseStoreUnavailable" });
    clock.advance(1);
    const after = await grants(s, "y", 2);
    expect(Math.min(...after)).toBeGreaterThan(Math.max(...before));
    // A used-up counter moves to the next epoch without a quarantine: nothing was lost.
    await redis.current.command("HINCRBY", "{fencegate}:floor", "last", String(2 ** 32 - 10));
    expect((await grants(s, "z", 12)).length).toBe(12);
  });

  it("file epochs: a conditional create, the highest one found again by a new store on the same directory", async () => {
    const dir = epochDir();
    const one = createFileEpochStore(dir);
    expect(await one.highest()).toBe(-1);
    expect(await one.create(0)).toBe(true);
    expect(await one.create(0)).toBe(false);
    expect(await one.create(7)).toBe(true);
    expect(await createFileEpochStore(dir).highest()).toBe(7);
  });
});
