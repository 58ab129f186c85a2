/**
 * Closing the Redis stores does not wait on a Redis that has gone silent (SIGSTOP): the
 * connections are dropped (ioredis disconnect) rather than sent a QUIT that would wait for an
 * answer, so that a shutdown is not held up by them.
 */
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createRedisAuditLog, openRedis, redisReady } from "../../src/audit/redis/redis-audit-log.js";
import { systemClock } from "../../src/core/clock.js";
import { createRedisLeaseStore } from "../../src/leases/redis/redis-lease-store.js";
import { createFileEpochStore } from "../../src/leases/redis-shared/file-epoch-store.js";
import { createRedlockLeaseStore } from "../../src/leases/redlock/redlock-lease-store.js";
import { tempDir } from "../support/gateway.js";
import { type RedisServer, startRedis } from "../support/redis.js";
import { requireTools } from "../support/tools.js";

requireTools("redis-server");

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A Redis of its own, silenced with SIGSTOP by `silence()` (and let go on before it is stopped). */
async function redisToSilence(): Promise<RedisServer & { silence(): void }> {
  const redis = await startRedis();
  cleanups.push(() => redis.stop());
  return Object.assign(redis, {
    silence() {
      process.kill(redis.pid, "SIGSTOP");
      cleanups.push(() => {
        process.kill(redis.pid, "SIGCONT");
      });
    },
  });
}

const closeTime = async (close: () => Promise<void>) => {
  const started = performance.now();
  await close();
  return performance.now() - started;
};

/** A command timeout far above what a close may take: only not waiting keeps it short. */
const COMMAND_TIMEOUT_MS = 10_000;

describe("closing a store on a silent Redis", () => {
  it("the Redis lease store and the Redis audit log close at once", async () => {
    const redis = await redisToSilence();
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const leases = createRedisLeaseStore({
      url: redis.url,
      epochs: createFileEpochStore(join(dir.path, "epochs")),
      commandTimeoutMs: COMMAND_TIMEOUT_MS,
    });
    expect(await leases.ready(5_000)).toBe(true);
    const connection = openRedis(redis.url, COMMAND_TIMEOUT_MS);
    expect(await redisReady(connection, 5_000)).toBe(true);
    const audit = await createRedisAuditLog({
      redis: connection,
      ownsConnection: true,
      gatewayId: "gw-test",
    });

    redis.silence();
    // A command on its way: a QUIT would queue behind it.
    const pending = leases.ping().catch(() => undefined);
    expect(await closeTime(() => leases.close())).toBeLessThan(300);
    expect(await closeTime(() => audit.close())).toBeLessThan(300);
    await pending;
  });

  it("the Redlock lease store closes at once", async () => {
    const instances = [await redisToSilence(), await redisToSilence(), await redisToSilence()];
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const store = createRedlockLeaseStore({
      urls: instances.map((r) => r.url),
      epochs: createFileEpochStore(join(dir.path, "epochs")),
      clock: systemClock,
      quarantineMs: 60_000,
      commandTimeoutMs: COMMAND_TIMEOUT_MS,
    });
    expect(await store.ready(10_000)).toBe(true);
    for (const r of instances) r.silence();
    expect(await closeTime(() => store.close())).toBeLessThan(300);
  });
});
