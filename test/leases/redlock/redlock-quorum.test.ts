/**
 * The Redlock store on five real redis-servers, with instances killed (SIGKILL) and restarted
 * empty: grants go on with two down and fail fast with three down; an instance that comes back
 * without its data stays out of the quorum until its quarantine ends (a lease granted by a bare
 * majority cannot be granted again by the instances that forgot it) and enough other instances
 * told it their commit intents; tokens stay strictly increasing throughout. Then two stores (two
 * gateway replicas) race for one key on three servers.
 */
import { afterEach, describe, expect, it } from "vitest";
import { systemClock } from "../../../src/core/clock.js";
import { DomainError } from "../../../src/core/errors.js";
import type { LeaseRecord } from "../../../src/leases/lease-store.js";
import { createFileEpochStore } from "../../../src/leases/redis-shared/file-epoch-store.js";
import {
  createRedlockLeaseStore,
  type RedlockLeaseStore,
} from "../../../src/leases/redlock/redlock-lease-store.js";
import { type RedisServer, startRedis } from "../../support/redis.js";
import { tempDir } from "../../support/temp.js";
import { requireTools } from "../../support/tools.js";

requireTools("redis-server");

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function servers(n: number): Promise<RedisServer[]> {
  const started = await Promise.all(Array.from({ length: n }, () => startRedis()));
  // restart() hands the directory to the new handle: stop whatever runs at the end.
  cleanups.push(() => Promise.all(started.map((s) => s.stop().catch(() => undefined))).then(() => undefined));
  return started;
}

const QUARANTINE_MS = 2_500;

function storeOn(
  redis: RedisServer[],
  epochDir: string,
  extra: { quarantineMs?: number } = {},
): RedlockLeaseStore {
  const store = createRedlockLeaseStore({
    urls: redis.map((r) => r.url),
    epochs: createFileEpochStore(epochDir),
    clock: systemClock,
    quarantineMs: extra.quarantineMs ?? QUARANTINE_MS,
    commandTimeoutMs: 1_000,
    checkEveryMs: 200,
  });
  cleanups.push(() => store.close());
  return store;
}

async function until(check: () => Promise<boolean> | boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await Promise.resolve(check()).catch(() => false))) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("redlock quorum of five", () => {
  it("grants with two down, fails fast with three down, quarantines restarted instances, tokens always increase", async () => {
    const redis = await servers(5);
    const epochs = tempDir("fencegate-redlock-q-");
    cleanups.push(() => epochs.cleanup());
    const store = storeOn(redis, epochs.path);
    expect(await store.ready(10_000)).toBe(true);

    const tokens: number[] = [];
    let n = 0;
    const grant = async (ttlMs = 60_000): Promise<LeaseRecord> => {
      const r = await store.tryAcquire({ resource: { bucket: "b", key: `k${n++}` }, ttlMs, owner: "o" });
      if (!r.granted) throw new Error(`not granted: ${JSON.stringify(r)}`);
      tokens.push(r.lease.token);
      return r.lease;
    };

    for (let i = 0; i < 5; i++) await grant();
    await redis[0]!.kill9();
    await redis[1]!.kill9();
    for (let i = 0; i < 5; i++) await grant();

    // Three of five down: no majority, a clean refusal, fast.
    await redis[2]!.kill9();
    const started = Date.now();
    const refused = await store
      .tryAcquire({ resource: { bucket: "b", key: "none" }, ttlMs: 60_000, owner: "o" })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(DomainError);
    expect((refused as DomainError).code).toBe("LeaseStoreUnavailable");
    expect(Date.now() - started).toBeLessThan(5_000);
    await expect(store.ping()).rejects.toMatchObject({ code: "LeaseStoreUnavailable" });

    // One comes back empty (a new run id): three answer, but it does not count until its
    // quarantine ends, so there is still no majority.
    redis[0] = await redis[0]!.restart();
    await until(() => store.instances()[0]!.quarantinedUntil > Date.now());
    const quarantined = await store
      .tryAcquire({ resource: { bucket: "b", key: "none" }, ttlMs: 60_000, owner: "o" })
      .catch((e: unknown) => e);
    expect((quarantined as DomainError).code).toBe("LeaseStoreUnavailable");
    expect((quarantined as DomainError).message).toMatch(/quarantine/);

    // Its quarantine ends, but with two others down it cannot learn every commit intent that
    // may still be live (one recorded by it and the two down ones): it still does not count.
    await until(() => store.instances()[0]!.quarantinedUntil <= Date.now());
    await store.checkFloors();
    const unsettled = await store
      .tryAcquire({ resource: { bucket: "b", key: "none" }, ttlMs: 60_000, owner: "o" })
      .catch((e: unknown) => e);
    expect((unsettled as DomainError).code).toBe("LeaseStoreUnavailable");
    expect((unsettled as DomainError).message).toMatch(/commit intents/);
    expect(store.instances()[0]!.intentsPending).toBe(true);

    // The others come back empty too. Once every instance answers, those that lost their data
    // take what the others hold, and after their quarantines grants go on.
    redis[1] = await redis[1]!.restart();
    redis[2] = await redis[2]!.restart();
    await until(() => store.instances().every((i) => i.connected));
    await until(async () => {
      await store.checkFloors();
      return store.instances().every((i) => i.quarantinedUntil <= Date.now() && !i.intentsPending);
    });
    for (let i = 0; i < 3; i++) await grant();

    for (let i = 1; i < tokens.length; i++) expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);
    for (const t of tokens) expect(Number.isSafeInteger(t)).toBe(true);
  });

  it("a lease a bare majority granted is not granted again by instances that lost their data", async () => {
    const redis = await servers(5);
    const epochs = tempDir("fencegate-redlock-q-");
    cleanups.push(() => epochs.cleanup());
    const store = storeOn(redis, epochs.path);
    expect(await store.ready(10_000)).toBe(true);

    // D and E are down: the lease lives on A, B and C only.
    await redis[3]!.kill9();
    await redis[4]!.kill9();
    const first = await store.tryAcquire({
      resource: { bucket: "b", key: "x" },
      ttlMs: 2_000,
      owner: "first",
    });
    expect(first.granted).toBe(true);
    const firstToken = first.granted ? first.lease.token : 0;

    // A and B restart without their data; D and E come back empty too. Only C remembers the lease.
    redis[0] = await redis[0]!.restart();
    redis[1] = await redis[1]!.restart();
    redis[3] = await redis[3]!.restart();
    redis[4] = await redis[4]!.restart();
    await until(() => store.instances().every((i) => i.connected));
    await store.checkFloors();

    // Four instances would grant, but they are in quarantine: nobody else gets the key.
    const second = await store
      .tryAcquire({ resource: { bucket: "b", key: "x" }, ttlMs: 2_000, owner: "second" })
      .catch((e: unknown) => e);
    expect(second).toMatchObject({ code: "LeaseStoreUnavailable" });

    // After the quarantine (longer than the lease's TTL) the key is free, with a higher token.
    await until(() => store.instances().every((i) => i.quarantinedUntil <= Date.now()));
    const third = await store.tryAcquire({
      resource: { bucket: "b", key: "x" },
      ttlMs: 2_000,
      owner: "third",
    });
    expect(third.granted).toBe(true);
    if (third.granted) expect(third.lease.token).toBeGreaterThan(firstToken);
  });
});

describe("an instance with an eviction policy", () => {
  it("does not count toward a majority until its settings are fixed", async () => {
    const redis = await servers(3);
    const epochs = tempDir("fencegate-redlock-e-");
    cleanups.push(() => epochs.cleanup());
    const store = storeOn(redis, epochs.path);
    expect(await store.ready(10_000)).toBe(true);
    const acquire = (key: string) =>
      store
        .tryAcquire({ resource: { bucket: "b", key }, ttlMs: 60_000, owner: "o" })
        .catch((e: unknown) => e);
    expect(await redis[0]!.command("CONFIG", "SET", "maxmemory", "100mb")).toBe("OK");
    expect(await redis[0]!.command("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")).toBe("OK");
    await store.checkSettings();
    expect(store.instances()[0]!.unsafe).toMatch(/maxmemory-policy is allkeys-lru/);
    // B and C still make a majority.
    expect(await acquire("a")).toMatchObject({ granted: true });
    // With C down, A alone beside B is not enough: it may evict leases.
    await redis[2]!.kill9();
    const refused = await acquire("b");
    expect(refused).toMatchObject({ code: "LeaseStoreUnavailable" });
    expect((refused as DomainError).message).toMatch(/unsafe settings/);
    // Fixed: it counts again.
    expect(await redis[0]!.command("CONFIG", "SET", "maxmemory-policy", "noeviction")).toBe("OK");
    await store.checkSettings();
    expect(await acquire("b")).toMatchObject({ granted: true });
  });
});

describe("silent instances (SIGSTOP)", () => {
  it("one of three silent: grants go on; two silent: a clean refusal within the command timeout", async () => {
    const redis = await servers(3);
    const epochs = tempDir("fencegate-redlock-s-");
    cleanups.push(() => epochs.cleanup());
    const store = storeOn(redis, epochs.path);
    expect(await store.ready(10_000)).toBe(true);
    const stopped: number[] = [];
    cleanups.push(() => {
      for (const pid of stopped) process.kill(pid, "SIGCONT");
    });
    const silence = (r: RedisServer) => {
      process.kill(r.pid, "SIGSTOP");
      stopped.push(r.pid);
    };
    const acquire = (key: string) =>
      store
        .tryAcquire({ resource: { bucket: "b", key }, ttlMs: 60_000, owner: "o" })
        .catch((e: unknown) => e);

    silence(redis[0]!);
    const one = await acquire("a");
    expect(one).toMatchObject({ granted: true });

    silence(redis[1]!);
    const started = Date.now();
    const refused = await acquire("b");
    expect(refused).toBeInstanceOf(DomainError);
    expect((refused as DomainError).code).toBe("LeaseStoreUnavailable");
    // One command timeout (1 s) for the counters, nothing more: no hang.
    expect(Date.now() - started).toBeLessThan(4_000);
  });
});

describe("an instance back without its data", () => {
  it("gets a renewed lease copied back, and then stands in the way of an overlapping grant", async () => {
    const redis = await servers(3);
    const epochs = tempDir("fencegate-redlock-r-");
    cleanups.push(() => epochs.cleanup());
    const store = storeOn(redis, epochs.path, { quarantineMs: 1_000 });
    expect(await store.ready(10_000)).toBe(true);
    const r = await store.tryAcquire({ resource: { bucket: "b", prefix: "p/" }, ttlMs: 30_000, owner: "o" });
    if (!r.granted) throw new Error("not granted");
    redis[2] = await redis[2]!.restart();
    await until(() => store.instances()[2]!.quarantinedUntil > Date.now());
    const key = `{fencegate}:lease:${r.lease.leaseId}`;
    expect(await redis[2]!.command("EXISTS", key)).toBe(0);
    await store.renew(r.lease.leaseId, 30_000);
    expect(await redis[2]!.command("EXISTS", key)).toBe(1);
    // With B cut off and the quarantine over (and C's commit intents settled), A and C decide:
    // both hold the prefix lease.
    await until(
      () => store.instances()[2]!.quarantinedUntil <= Date.now() && !store.instances()[2]!.intentsPending,
    );
    expect(await redis[1]!.command("ACL", "SETUSER", "default", "-evalsha", "-eval")).toBe("OK");
    try {
      const other = await store.tryAcquire({
        resource: { bucket: "b", key: "p/x" },
        ttlMs: 30_000,
        owner: "x",
      });
      expect(other).toMatchObject({ granted: false, heldBy: { leaseId: r.lease.leaseId } });
    } finally {
      await redis[1]!.command("ACL", "SETUSER", "default", "+evalsha", "+eval");
    }
  });
});

describe("instances that missed grants", () => {
  it("rejoin with lower counters, and the next token is still above every token granted", async () => {
    const redis = await servers(5);
    const epochs = tempDir("fencegate-redlock-m-");
    cleanups.push(() => epochs.cleanup());
    const store = storeOn(redis, epochs.path);
    expect(await store.ready(10_000)).toBe(true);
    const tokens: number[] = [];
    const grant = async (key: string) => {
      const r = await store.tryAcquire({ resource: { bucket: "b", key }, ttlMs: 60_000, owner: "o" });
      if (!r.granted) throw new Error(`not granted: ${JSON.stringify(r)}`);
      tokens.push(r.lease.token);
    };
    await grant("a");
    // A and B refuse every script (and run none) while the others grant: their counters fall behind.
    const block = (r: RedisServer, how: string) =>
      r.command("ACL", "SETUSER", "default", `${how}evalsha`, `${how}eval`);
    for (const r of redis.slice(0, 2)) expect(await block(r, "-")).toBe("OK");
    for (let i = 0; i < 12; i++) await grant(`b${i}`);
    for (const r of redis.slice(0, 2)) expect(await block(r, "+")).toBe("OK");
    const last = async (r: RedisServer) => Number(await r.command("HGET", "{fencegate}:floor", "last"));
    expect(await last(redis[0]!)).toBeLessThan(await last(redis[2]!));
    // Every instance answers again; the lagging ones are in every majority the store could read.
    for (let i = 0; i < 4; i++) await grant(`c${i}`);
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);
  });
});

describe("two replicas on a quorum of three", () => {
  it("grant distinct keys at once: every token unique", async () => {
    const redis = await servers(3);
    const epochs = tempDir("fencegate-redlock-d-");
    cleanups.push(() => epochs.cleanup());
    const replicas = [storeOn(redis, epochs.path), storeOn(redis, epochs.path)];
    for (const r of replicas) expect(await r.ready(10_000)).toBe(true);
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        replicas[i % 2]!.tryAcquire({
          resource: { bucket: "b", key: `k${i}` },
          ttlMs: 60_000,
          owner: `w${i}`,
        }),
      ),
    );
    const tokens = results.map((r) => (r.granted ? r.lease.token : -1));
    expect(tokens.every((t) => t > 0)).toBe(true);
    expect(new Set(tokens).size).toBe(40);
  });

  it("race for one key: at most one active holder at a time, every token unique and increasing", async () => {
    const redis = await servers(3);
    const epochs = tempDir("fencegate-redlock-c-");
    cleanups.push(() => epochs.cleanup());
    const replicas = [storeOn(redis, epochs.path), storeOn(redis, epochs.path)];
    for (const r of replicas) expect(await r.ready(10_000)).toBe(true);

    let active = 0;
    let most = 0;
    const granted: number[] = [];
    const deadline = Date.now() + 8_000;
    const worker = async (store: RedlockLeaseStore, id: number) => {
      let mine = 0;
      while (mine < 3 && Date.now() < deadline) {
        const r = await store.tryAcquire({
          resource: { bucket: "b", key: "hot" },
          ttlMs: 5_000,
          owner: `w${id}`,
        });
        if (!r.granted) {
          await sleep(Math.random() * 10);
          continue;
        }
        active++;
        most = Math.max(most, active);
        granted.push(r.lease.token);
        mine++;
        await sleep(5);
        active--;
        await store.release(r.lease.leaseId);
      }
    };
    await Promise.all(Array.from({ length: 16 }, (_, i) => worker(replicas[i % 2]!, i)));
    expect(most).toBe(1);
    expect(granted.length).toBeGreaterThanOrEqual(10);
    expect(new Set(granted).size).toBe(granted.length);
    for (let i = 1; i < granted.length; i++) expect(granted[i]!).toBeGreaterThan(granted[i - 1]!);
  });
});
