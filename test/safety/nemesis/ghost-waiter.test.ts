/**
 * Found by the nemesis run (Redis commands whose answers were lost): a lease request that waited
 * in the shared wait queue and whose ticket could not be removed (the answer to its enqueue was
 * lost, or its leave never reached Redis) leaves the ticket in the queue until it expires (10 s).
 * Meanwhile every request for the key is refused with 409 LeaseHeld ("earlier requests are waiting
 * for an overlapping resource") although no lease is held and nobody waits: the contract answers
 * LeaseHeld only while a lease is held. Under repeated Redis faults the nemesis saw no grant on any
 * key for 19 s (seed 4157827738 on Azure). Liveness only: nothing unsafe is granted.
 *
 * The minimal form: one gateway on a Redis lease store reached through the Redis fault proxy; a
 * request waits behind a holder, and its ticket's enqueue answer (or its leave) is lost; the holder
 * releases; the next request is refused for about 10 s.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LeaseHeldError } from "../../../src/client/errors.js";
import { LuaScript } from "../../../src/core/lua-source.js";
import { ENQUEUE, LEAVE } from "../../../src/leases/redis/lua/wait-scripts.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { type RedisServer, startRedis } from "../../support/redis.js";
import { type RedisFaultProxy, startRedisFaultProxy } from "../../support/redis-fault-proxy.js";
import { requireTools } from "../../support/tools.js";
import { sleep, waitFor } from "../../support/wait.js";
import { createBucket } from "../faults/fault-kit.js";

requireTools("redis-server");

const sha = (source: string) => new LuaScript("wait", source).sha;

describe("a waiting lease request whose ticket Redis kept", () => {
  let redis: RedisServer;
  let proxy: RedisFaultProxy;
  let gw: TestGateway;

  beforeAll(async () => {
    redis = await startRedis();
    proxy = await startRedisFaultProxy(redis.port);
    gw = await startTestGateway({
      overrides: { leaseStore: { type: "redis", url: proxy.url, unsafeSettings: "warn" } },
    });
  }, 60_000);

  afterAll(async () => {
    await gw?.stop();
    await proxy?.close();
    await redis?.stop();
  });

  it("leaves nothing in front of the next request for a key nobody holds (lost enqueue answer)", async () => {
    const bucket = "ghost-enqueue";
    await createBucket(gw, bucket);
    const holder = await gw.leases.acquire({ bucket, key: "k", ttlMs: 5_000 });
    const lost = proxy.on(
      { command: "EVALSHA", args: (a) => a[0] === sha(ENQUEUE) },
      { kind: "drop-answer" },
    );
    const waiter = await gw.leases
      .acquire({ bucket, key: "k", ttlMs: 5_000, waitMs: 300 })
      .catch((e: Error) => e);
    lost.cancel();
    expect(lost.count).toBe(1);
    expect(waiter).toMatchObject({ status: 503 });
    await gw.leases.release(holder.leaseId);
    expect(await nextRequest(bucket)).toMatchObject({ bucket, key: "k" });
  }, 30_000);

  it("leaves nothing in front of the next request for a key nobody holds (lost leave answer)", async () => {
    const bucket = "ghost-leave";
    await createBucket(gw, bucket);
    const holder = await gw.leases.acquire({ bucket, key: "k", ttlMs: 5_000 });
    const lost = proxy.on({ command: "EVALSHA", args: (a) => a[0] === sha(LEAVE) }, { kind: "reset" });
    const waiter = await gw.leases
      .acquire({ bucket, key: "k", ttlMs: 5_000, waitMs: 300 })
      .catch((e: Error) => e);
    lost.cancel();
    expect(lost.count).toBe(1);
    expect(waiter).toBeInstanceOf(LeaseHeldError);
    // The reset dropped the gateway's Redis connection: until it is back, a release answers 503
    // and changes nothing. Release once it is back.
    await waitFor(
      async () =>
        gw.leases.release(holder.leaseId).then(
          () => true,
          () => false,
        ),
      {
        what: "the release once the gateway's Redis connection is back",
      },
    );
    expect(await nextRequest(bucket)).toMatchObject({ bucket, key: "k" });
  }, 30_000);

  /** The key's next grant once the lease store is reachable again, or the error that refused it. */
  async function nextRequest(bucket: string): Promise<unknown> {
    let next: unknown;
    for (let i = 0; i < 50; i++) {
      next = await gw.leases.acquire({ bucket, key: "k", ttlMs: 5_000 }).catch((e: Error) => e);
      if ((next as { status?: number }).status !== 503) break;
      await sleep(100);
    }
    return next instanceof LeaseHeldError ? `${next.code}: ${next.message}` : next;
  }
});
