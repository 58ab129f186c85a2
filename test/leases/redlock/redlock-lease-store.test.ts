import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fakeClock } from "../../../src/core/clock.js";
import type { LeaseEvents } from "../../../src/leases/lease-store.js";
import { createFileEpochStore } from "../../../src/leases/redis-shared/file-epoch-store.js";
import {
  createRedlockLeaseStore,
  type RedlockLeaseStore,
} from "../../../src/leases/redlock/redlock-lease-store.js";
import { type RedisServer, startRedis } from "../../support/redis.js";
import { tempDir } from "../../support/temp.js";
import { requireTools } from "../../support/tools.js";
import { describeLeaseStoreContract, type FakeClock } from "../lease-store.contract.js";

requireTools("redis-server");

// Three independent redis-servers: the quorum every test of this file runs on.
let servers: RedisServer[] = [];
let epochDir: { path: string; cleanup(): void };
beforeAll(async () => {
  servers = await Promise.all([startRedis(), startRedis(), startRedis()]);
  epochDir = tempDir("fencegate-redlock-epochs-");
}, 60_000);
afterAll(async () => {
  await Promise.all(servers.map((s) => s.stop()));
  epochDir?.cleanup();
});

let harnesses = 0;
/** A store on the three servers under a key prefix of its own, so tests share nothing. */
async function open(clock: FakeClock, prefix: string, events?: LeaseEvents): Promise<RedlockLeaseStore> {
  const store = createRedlockLeaseStore({
    urls: servers.map((s) => s.url),
    keyPrefix: prefix,
    epochs: createFileEpochStore(`${epochDir.path}/${prefix}`),
    clock,
    quarantineMs: 60_000,
    // The fake clock does not move while a grant runs, and the contract uses TTLs down to 1 ms:
    // only the 1% part of the drift allowance applies.
    driftAllowanceMs: 0,
    ...(events ? { events } : {}),
  });
  if (!(await store.ready(10_000))) throw new Error("no majority of the three redis-servers");
  return store;
}

describeLeaseStoreContract("redlock (three servers)", async (clock, events) => {
  const prefix = `{rl${++harnesses}}`;
  let store = await open(clock, prefix, events);
  return {
    store,
    async reopen() {
      await store.close();
      store = await open(clock, prefix, events);
      return store;
    },
    cleanup: () => store.close(),
  };
});

describe("redlock lease store on three servers", () => {
  it("keeps the lease on every instance, each with its counter at the token", async () => {
    const clock = fakeClock();
    const prefix = `{own${++harnesses}}`;
    const store = await open(clock, prefix);
    try {
      const r = await store.tryAcquire({ resource: { bucket: "b", key: "k" }, ttlMs: 10_000, owner: "o" });
      if (!r.granted) throw new Error("not granted");
      expect(r.lease.token).toBe(1); // epoch 0, counter 1
      for (const s of servers) {
        expect(await s.command("HGET", `${prefix}:lease:${r.lease.leaseId}`, "tok")).toBe("1");
        expect(await s.command("HGET", `${prefix}:floor`, "last")).toBe("1");
      }
    } finally {
      await store.close();
    }
  });
});
