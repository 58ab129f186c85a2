import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRedisAuditLog } from "../../../src/audit/redis/redis-audit-log.js";
import {
  assertFailClosed,
  failClosedProblems,
  openFailClosedRedis,
  openSubscriber,
} from "../../../src/core/redis-connection.js";
import { createRedisLeaseStore } from "../../../src/leases/redis/redis-lease-store.js";
import { createRedisWaiting } from "../../../src/leases/redis/redis-wait-queue.js";
import { createFileEpochStore } from "../../../src/leases/redis-shared/file-epoch-store.js";
import { freePort, type RedisServer, startRedis } from "../../support/redis.js";
import { tempDir } from "../../support/temp.js";
import { requireTools } from "../../support/tools.js";
import { waitFor } from "../../support/wait.js";

requireTools("redis-server");

/**
 * The one ioredis connection factory (src/core/redis-connection.ts) and its check: connections
 * that fail closed (no offline queue, no retry, no resend after a reconnect, a command timeout),
 * and components that refuse a connection opened with ioredis's defaults.
 */
describe("fail-closed Redis connections", () => {
  let server: RedisServer;
  const opened: Redis[] = [];
  const track = (r: Redis) => {
    opened.push(r);
    return r;
  };

  beforeAll(async () => {
    server = await startRedis();
  }, 30_000);

  afterAll(async () => {
    for (const r of opened) r.disconnect();
    await server?.stop();
  });

  it("are what the factory opens, and they run commands", async () => {
    const redis = track(openFailClosedRedis(server.url, { timeoutMs: 1_000 }));
    expect(failClosedProblems(redis)).toEqual([]);
    expect(redis.options).toMatchObject({
      enableOfflineQueue: false,
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 0,
      commandTimeout: 1_000,
      connectTimeout: 1_000,
    });
    await waitFor(() => redis.status === "ready", { what: "the connection to be ready", timeoutMs: 5_000 });
    await redis.set("k", "v");
    expect(await redis.get("k")).toBe("v");
  });

  it("answer at once while Redis cannot be reached, instead of queueing the command", async () => {
    const redis = track(openFailClosedRedis(`redis://127.0.0.1:${await freePort()}`, { timeoutMs: 1_000 }));
    const started = Date.now();
    await expect(redis.get("k")).rejects.toThrow(/enableOfflineQueue/);
    expect(Date.now() - started).toBeLessThan(500);
  });

  it("are not what ioredis opens by default: the check names each missing setting", () => {
    const redis = track(new Redis(server.url, { lazyConnect: true }));
    expect(failClosedProblems(redis)).toEqual([
      expect.stringMatching(/^enableOfflineQueue/),
      expect.stringMatching(/^autoResendUnfulfilledCommands/),
      expect.stringMatching(/^maxRetriesPerRequest/),
      expect.stringMatching(/^commandTimeout/),
    ]);
    expect(() => assertFailClosed(redis, "the test's connection")).toThrow(
      /the test's connection must fail closed: enableOfflineQueue is not false/,
    );
    // One setting off is enough to refuse it.
    const resends = track(
      new Redis(server.url, {
        lazyConnect: true,
        enableOfflineQueue: false,
        maxRetriesPerRequest: 0,
        commandTimeout: 1_000,
      }),
    );
    expect(failClosedProblems(resends)).toEqual([expect.stringMatching(/^autoResendUnfulfilledCommands/)]);
  });

  it("are required by the Redis audit log: one opened with ioredis's defaults is refused", async () => {
    const redis = track(new Redis(server.url, { lazyConnect: true }));
    await expect(createRedisAuditLog({ redis, gatewayId: "gw-1" })).rejects.toThrow(
      /the Redis audit log's connection must fail closed/,
    );
    expect(redis.status).toBe("wait");
  });

  it("are required by the shared wait queue", () => {
    const redis = track(new Redis(server.url, { lazyConnect: true }));
    const refused = () => Promise.reject(new Error("no script runs here"));
    expect(() =>
      createRedisWaiting({ redis, keyPrefix: "{t}", run: refused, runAcquire: refused, ticketTtlMs: 1_000 }),
    ).toThrow(/the Redis wait queue's connection must fail closed/);
  });

  it("are what the Redis lease store runs on", async () => {
    const epochs = tempDir("fencegate-epochs-");
    const store = createRedisLeaseStore({ url: server.url, epochs: createFileEpochStore(epochs.path) });
    try {
      expect(failClosedProblems(store.redis)).toEqual([]);
      expect(store.redis.options.commandTimeout).toBe(2_000);
    } finally {
      await store.close();
      epochs.cleanup();
    }
  });

  it("have a subscriber beside them that queues and subscribes again (wake-ups only)", () => {
    const redis = track(openFailClosedRedis(server.url, { timeoutMs: 1_000 }));
    const sub = track(openSubscriber(redis));
    expect(sub.options).toMatchObject({
      enableOfflineQueue: true,
      autoResubscribe: true,
      maxRetriesPerRequest: null,
    });
    expect(sub.options.commandTimeout).toBeUndefined();
    expect(failClosedProblems(sub)).not.toEqual([]);
  });
});
