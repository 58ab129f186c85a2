/**
 * The acceptance test of fair waiting across replicas, end to end: three gateway processes on one
 * Redis, 20 waiters (waitMs) queued on one key through the replicas in turn, over HTTP. They get
 * the lease in arrival order whichever replica releases it; each release makes exactly one grant
 * attempt (the grant script's calls, counted at Redis with MONITOR); a waiter whose client
 * disconnects is skipped. In-process replicas and pools: replicas-fifo.test.ts.
 */
import { createHash } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LeaseClient } from "../../../src/client/lease-client.js";
import type { LeaseRecord } from "../../../src/client/types.js";
import { ACQUIRE_AS_HEAD } from "../../../src/leases/redis/lua/wait-scripts.js";
import { CREDENTIALS, type GatewayProcess, spawnGateway, tempDir } from "../../support/gateway.js";
import { type RedisServer, startRedis } from "../../support/redis.js";
import { requireTools } from "../../support/tools.js";
import { sleep } from "../../support/wait.js";

requireTools("redis-server");

const GRANT_SCRIPT = createHash("sha1").update(ACQUIRE_AS_HEAD).digest("hex");

describe("fair waiting across three gateway processes on one Redis", () => {
  let redis: RedisServer;
  const dirs: Array<{ path: string; cleanup(): void }> = [];
  const replicas: GatewayProcess[] = [];
  let base: Redis | undefined;
  let monitor: Redis | undefined;

  beforeAll(async () => {
    redis = await startRedis();
    for (let i = 0; i < 3; i++) {
      const dir = tempDir();
      dirs.push(dir);
      replicas.push(
        await spawnGateway(dir.path, {
          FENCEGATE_REDIS_URL: redis.url,
          FENCEGATE_GATEWAY_ID: `replica-${i}`,
          FENCEGATE_TOKEN_SIGNING_KEY: "one-signing-key-for-every-replica",
        }),
      );
    }
  }, 120_000);

  afterAll(async () => {
    monitor?.disconnect();
    base?.disconnect();
    for (const r of replicas) await r.kill("SIGKILL");
    await redis?.stop();
    for (const d of dirs) d.cleanup();
  });

  it("20 waiters queued on one resource through three replicas get the lease in arrival order, and each release wakes exactly one waiter; a waiter that disconnects is skipped", async () => {
    const clients = replicas.map(
      (r) => new LeaseClient({ endpoint: r.url, ...CREDENTIALS, timeoutMs: 40_000, retry: { attempts: 0 } }),
    );
    // Warm-up: the token epoch installed and the scripts loaded (a first call answers NOSCRIPT or
    // asks for an epoch, and is repeated), so that from here one attempt is one script call.
    for (const [i, c] of clients.entries()) {
      const warm = await c.acquire({ bucket: "fifo", key: `warm-${i}`, ttlMs: 60_000 });
      await c.release(warm.leaseId);
    }
    // Every grant attempt of a queued waiter is one call of the grant script, whichever replica.
    let attempts = 0;
    base = new Redis(redis.url);
    base.on("error", () => undefined);
    monitor = await base.monitor();
    monitor.on("error", () => undefined);
    monitor.on("monitor", (_time: string, args: string[]) => {
      if (args[0]?.toLowerCase() === "evalsha" && args[1] === GRANT_SCRIPT) attempts++;
    });
    const queued = async (via: LeaseClient) =>
      (await via.list({ bucket: "fifo" })).leases.reduce((n, l) => n + (l.waiters ?? 0), 0);
    const until = async (check: () => boolean | Promise<boolean>, what: string) => {
      const start = Date.now();
      while (!(await check())) {
        if (Date.now() - start > 15_000) throw new Error(`timed out waiting for ${what}`);
        await sleep(10);
      }
    };

    const holder = await clients[0]!.acquire({ bucket: "fifo", key: "k", ttlMs: 60_000, owner: "holder" });
    const aborts = Array.from({ length: 20 }, () => new AbortController());
    const outcomes: Array<{ lease?: LeaseRecord; error?: unknown }> = [];
    for (let i = 0; i < 20; i++) {
      const outcome: { lease?: LeaseRecord; error?: unknown } = {};
      outcomes.push(outcome);
      clients[i % 3]!.acquire(
        { bucket: "fifo", key: "k", ttlMs: 60_000, waitMs: 30_000, owner: `w${i}` },
        { signal: aborts[i]!.signal },
      ).then(
        (lease) => {
          outcome.lease = lease;
        },
        (error: unknown) => {
          outcome.error = error;
        },
      );
      // Arrival order: each is queued (seen through another replica) before the next is sent.
      await until(async () => (await queued(clients[(i + 1) % 3]!)) === i + 1, `waiter ${i} queued`);
    }
    // The holder's grant and the first waiter's try on arrival; the others queued without one.
    await until(() => attempts >= 2, "MONITOR's report of the first attempts");
    await sleep(100);
    expect(attempts).toBe(2);

    aborts[7]!.abort(); // the client of waiter 7 (through replica 1) hangs up
    await until(async () => (await queued(clients[2]!)) === 19, "the disconnected waiter's ticket to leave");

    const order: string[] = [];
    let current = holder;
    for (let served = 0; served < 19; served++) {
      const before = attempts;
      await clients[(served + 2) % 3]!.release(current.leaseId);
      await until(() => outcomes.some((o) => o.lease && !order.includes(o.lease.owner)), "the next grant");
      const next = outcomes.find((o) => o.lease && !order.includes(o.lease.owner))!.lease!;
      order.push(next.owner);
      // MONITOR's report of the grant may trail its answer; a second attempt would show here or
      // in the total below.
      await until(() => attempts >= before + 1, "MONITOR's report of the grant");
      await sleep(20);
      expect(attempts - before).toBe(1);
      current = next;
    }
    expect(order).toEqual(Array.from({ length: 20 }, (_, i) => `w${i}`).filter((o) => o !== "w7"));
    expect(outcomes[7]!.lease).toBeUndefined();
    await sleep(300);
    expect(attempts).toBe(2 + 19);
    await clients[0]!.release(current.leaseId);
  }, 90_000);
});
