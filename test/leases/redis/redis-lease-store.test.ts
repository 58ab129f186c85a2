import { beforeEach, describe, expect, it } from "vitest";
import { fakeClock } from "../../../src/core/clock.js";
import type { LeaseEvents } from "../../../src/leases/lease-store.js";
import { createRedisLeaseStore, type RedisLeaseStore } from "../../../src/leases/redis/redis-lease-store.js";
import { createFileEpochStore } from "../../../src/leases/redis-shared/file-epoch-store.js";
import { useRedisForFile } from "../../support/redis.js";
import { describeLeaseStoreContract, type FakeClock } from "../lease-store.contract.js";

const shared = useRedisForFile();

let harnesses = 0;
/** A store on this file's redis-server under a key prefix of its own, so tests share nothing. */
async function open(
  clock: FakeClock,
  prefix: string,
  extra: { retainMs?: number; events?: LeaseEvents } = {},
): Promise<RedisLeaseStore> {
  const store = createRedisLeaseStore({
    url: shared.server.url,
    keyPrefix: prefix,
    epochs: createFileEpochStore(`${shared.epochDir}/${prefix}`),
    clock,
    ...extra,
  });
  if (!(await store.ready(5_000))) throw new Error(`no connection to ${shared.server.url}`);
  return store;
}

describeLeaseStoreContract("redis (one server)", async (clock, events) => {
  const prefix = `{t${++harnesses}}`;
  let store = await open(clock, prefix, { events });
  return {
    store,
    async reopen() {
      await store.close();
      store = await open(clock, prefix, { events });
      return store;
    },
    cleanup: () => store.close(),
  };
});

describe("redis lease store", () => {
  let clock: FakeClock;
  let store: RedisLeaseStore;
  let prefix: string;

  beforeEach(async () => {
    clock = fakeClock();
    prefix = `{own${++harnesses}}`;
    store = await open(clock, prefix, { retainMs: 60_000 });
    return () => store.close();
  });

  const grant = async (key: string, ttlMs = 1_000) => {
    const result = await store.tryAcquire({ resource: { bucket: "b", key }, ttlMs, owner: "o" });
    if (!result.granted) throw new Error(`not granted: ${key}`);
    return result.lease;
  };

  it("starts at epoch 0 (tokens from 1) and keeps every token below 2^53", async () => {
    expect((await grant("a")).token).toBe(1);
    expect((await grant("b")).token).toBe(2);
  });

  it("loads its scripts again after Redis forgot them (SCRIPT FLUSH)", async () => {
    await grant("a");
    expect(await shared.server.command("SCRIPT", "FLUSH")).toBe("OK");
    expect((await grant("b")).token).toBe(2);
  });

  it("forgets ended leases after the retention, never before an older overlapping one", async () => {
    const a = await grant("k");
    await store.addDelegate({ delegateId: "FGD1", leaseId: a.leaseId, createdBy: "o", createdAt: clock() });
    await store.release(a.leaseId);
    clock.advance(30_000);
    const b = await grant("k");
    await store.release(b.leaseId);
    expect(await store.sweep()).toBe(0);
    clock.advance(30_000);
    expect(await store.sweep()).toBe(1);
    expect(await store.get(a.leaseId)).toBeNull();
    expect(await store.listDelegates()).toEqual([]); // forgotten with its lease
    expect(await store.get(b.leaseId)).not.toBeNull();
    clock.advance(30_000);
    expect(await store.sweep()).toBe(1);
    expect(await store.get(b.leaseId)).toBeNull();
    expect(await shared.server.command("EXISTS", `${prefix}:rkl:1:b:k`)).toBe(0);
  });

  it("reads only the candidates: acquire cost does not grow with the number of live leases", async () => {
    // Thousands of live key and prefix leases elsewhere in the bucket; an acquire then runs as
    // many Redis commands, and spends about as long in Redis, as with a few dozen (Redis's own
    // command statistics: calls of the commands the scripts run, and the scripts' time).
    const stats = async () => {
      const info = String(await shared.server.command("INFO", "commandstats"));
      const rows = [...info.matchAll(/^cmdstat_(\w+):calls=(\d+),usec=(\d+)/gm)];
      const inner = rows.filter(([, name]) => !["evalsha", "info", "config", "script"].includes(name!));
      const script = rows.find(([, name]) => name === "evalsha");
      return { calls: inner.reduce((sum, m) => sum + Number(m[2]), 0), usec: Number(script?.[3] ?? 0) };
    };
    // The median of single grants, so that a burst of load elsewhere on the machine does not count.
    const cost = async (tag: string) => {
      const samples: { calls: number; usec: number }[] = [];
      for (let i = 0; i < 41; i++) {
        const before = await stats();
        const lease = await grant(`key/${tag}/${i}`, 60_000);
        const after = await stats();
        samples.push({ calls: after.calls - before.calls, usec: after.usec - before.usec });
        await store.release(lease.leaseId);
      }
      const median = (values: number[]) => values.sort((a, b) => a - b)[values.length >> 1]!;
      return { calls: median(samples.map((s) => s.calls)), usec: median(samples.map((s) => s.usec)) };
    };
    const fill = async (from: number, to: number) => {
      for (let i = from; i < to; i++) {
        const resource = i % 2 ? { bucket: "b", key: `k/${i}` } : { bucket: "b", prefix: `p/${i}/` };
        await store.tryAcquire({ resource, ttlMs: 60_000, owner: "o" });
      }
    };
    await fill(0, 40); // past the few-prefixes shortcut, so both runs probe the same way
    const few = await cost("one");
    await fill(40, 8_000);
    const many = await cost("two");
    expect(many.calls).toBeGreaterThan(5);
    expect(many.calls).toBeLessThanOrEqual(few.calls + 2);
    expect(many.usec).toBeLessThan(few.usec * 3);
  });
});
