/**
 * The Redis lease store fails closed and recovers by itself: while Redis is down or hangs, every
 * operation answers LeaseStoreUnavailable promptly (no hang, nothing guessed); when it is back,
 * service resumes without a restart. Settings that break mutual exclusion are refused.
 */
import { afterEach, describe, expect, it } from "vitest";
import {
  createRedisLeaseStore,
  type RedisLeaseStore,
  type RedisLeaseStoreOptions,
} from "../../../src/leases/redis/redis-lease-store.js";
import { createFileEpochStore } from "../../../src/leases/redis-shared/file-epoch-store.js";
import { type RedisServer, startRedis } from "../../support/redis.js";
import { tempDir } from "../../support/temp.js";
import { requireTools } from "../../support/tools.js";

requireTools("redis-server");

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function open(url: string, extra: Partial<RedisLeaseStoreOptions> = {}): Promise<RedisLeaseStore> {
  const dir = tempDir("fencegate-epochs-");
  cleanups.push(() => dir.cleanup());
  const store = createRedisLeaseStore({
    url,
    epochs: createFileEpochStore(dir.path),
    commandTimeoutMs: 500,
    ...extra,
  });
  cleanups.push(() => store.close());
  return store;
}

const attempt = (store: RedisLeaseStore, key: string) =>
  store.tryAcquire({ resource: { bucket: "b", key }, ttlMs: 60_000, owner: "o" });

/** Every operation of the contract, each expected to fail with LeaseStoreUnavailable. */
async function expectAllUnavailable(store: RedisLeaseStore, leaseId: string): Promise<void> {
  const ops: Array<[string, () => Promise<unknown>]> = [
    ["tryAcquire", () => attempt(store, "x")],
    ["get", () => store.get(leaseId)],
    ["renew", () => store.renew(leaseId, 1_000)],
    ["release", () => store.release(leaseId)],
    ["list", () => store.list({})],
    ["findActiveCovering", () => store.findActiveCovering("b", "k")],
    ["collectExpired", () => store.collectExpired()],
    ["beginCommit", () => store.beginCommit({ kind: "unfenced", bucket: "b", key: "k" })],
    ["endCommit", () => store.endCommit("i")],
    ["ping", () => store.ping()],
  ];
  for (const [name, op] of ops) {
    const started = Date.now();
    await expect(op(), name).rejects.toMatchObject({ code: "LeaseStoreUnavailable" });
    expect(Date.now() - started, `${name} answered promptly`).toBeLessThan(3_000);
  }
}

async function until(check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe("Redis lease store, failing closed", () => {
  it("answers 503 while Redis is down, then serves again by itself, state intact", async () => {
    let server: RedisServer = await startRedis({ persistence: "aof" });
    cleanups.push(() => server.stop());
    const store = await open(server.url);
    expect(await store.ready(5_000)).toBe(true);
    const r = await attempt(store, "k");
    if (!r.granted) throw new Error("not granted");

    await server.kill9();
    await expectAllUnavailable(store, r.lease.leaseId);

    server = await server.restart();
    await until(() => store.ping().then(() => true));
    // The lease survived (append-only file); a grant after the restart has a higher token.
    expect((await store.get(r.lease.leaseId))?.token).toBe(r.lease.token);
    expect(await attempt(store, "k")).toMatchObject({ granted: false, heldBy: { leaseId: r.lease.leaseId } });
    const next = await attempt(store, "other");
    expect(next.granted && next.lease.token).toBeGreaterThan(r.lease.token);
  }, 60_000);

  it("answers 503 promptly while Redis hangs (SIGSTOP), and resumes when it continues", async () => {
    const server = await startRedis();
    cleanups.push(() => server.stop());
    const store = await open(server.url);
    expect(await store.ready(5_000)).toBe(true);
    const r = await attempt(store, "k");
    if (!r.granted) throw new Error("not granted");
    process.kill(server.pid, "SIGSTOP");
    try {
      await expectAllUnavailable(store, r.lease.leaseId);
    } finally {
      process.kill(server.pid, "SIGCONT");
    }
    await until(() => store.ping().then(() => true));
    expect(await store.get(r.lease.leaseId)).toEqual(r.lease);
  }, 60_000);

  it("keeps serving when a periodic settings check fails for a moment (Redis slow)", async () => {
    const server = await startRedis();
    cleanups.push(() => server.stop());
    const store = await open(server.url);
    expect(await store.ready(5_000)).toBe(true);
    process.kill(server.pid, "SIGSTOP");
    try {
      await expect(store.checkSettings()).rejects.toThrow(/timed out/i);
    } finally {
      process.kill(server.pid, "SIGCONT");
    }
    // The verdict of this connection's first check stands: no wait for the next periodic check.
    expect((await attempt(store, "k")).granted).toBe(true);
  });

  it("starts without Redis, answers 503, and serves once Redis appears", async () => {
    const probe = await startRedis();
    const port = probe.port;
    await probe.stop();
    const store = await open(`redis://127.0.0.1:${port}`);
    expect(await store.ready(300)).toBe(false);
    await expectAllUnavailable(store, "none");
    const server = await startRedis({ port });
    cleanups.push(() => server.stop());
    await until(() => store.ping().then(() => true));
    expect((await attempt(store, "k")).granted).toBe(true);
  }, 60_000);

  it("refuses an eviction policy that can drop leases, warns about durability, and serves once fixed", async () => {
    const server = await startRedis();
    cleanups.push(() => server.stop());
    await server.command("CONFIG", "SET", "maxmemory", "100mb");
    await server.command("CONFIG", "SET", "maxmemory-policy", "allkeys-lru");
    const store = await open(server.url);
    expect(await store.ready(5_000)).toBe(true);
    expect(store.settings?.unsafe.join()).toMatch(/maxmemory-policy is allkeys-lru/);
    expect(store.settings?.warnings.join()).toMatch(/appendonly is no/);
    await expect(attempt(store, "k")).rejects.toMatchObject({
      code: "LeaseStoreUnavailable",
      message: expect.stringMatching(/unsafe Redis settings: maxmemory-policy/),
    });
    await expect(store.ping()).rejects.toMatchObject({ code: "LeaseStoreUnavailable" });

    await server.command("CONFIG", "SET", "maxmemory-policy", "noeviction");
    await server.command("CONFIG", "SET", "appendonly", "yes");
    await server.command("CONFIG", "SET", "appendfsync", "everysec");
    const report = await store.checkSettings();
    expect(report.unsafe).toEqual([]);
    expect(report.warnings.join()).toMatch(/appendfsync is everysec/);
    expect((await attempt(store, "k")).granted).toBe(true);
    await server.command("CONFIG", "SET", "appendfsync", "always");
    expect(await store.checkSettings()).toEqual({ unsafe: [], warnings: [] });
    await server.command("CONFIG", "SET", "appendonly", "no"); // a quick SIGTERM afterwards
  });

  it("warns, and serves, when Redis does not let it read the configuration (CONFIG disabled)", async () => {
    const server = await startRedis();
    cleanups.push(() => server.stop());
    await server.command("ACL", "SETUSER", "app", "on", ">app-password", "~*", "&*", "+@all", "-config");
    const store = await open(`redis://app:app-password@127.0.0.1:${server.port}`);
    expect(await store.ready(5_000)).toBe(true);
    expect(store.settings).toEqual({
      unsafe: [],
      warnings: [expect.stringMatching(/cannot read the Redis configuration/)],
    });
    expect((await attempt(store, "k")).granted).toBe(true);
  });

  it("serves despite unsafe settings when told to warn only", async () => {
    const server = await startRedis();
    cleanups.push(() => server.stop());
    await server.command("CONFIG", "SET", "maxmemory", "100mb");
    await server.command("CONFIG", "SET", "maxmemory-policy", "volatile-lru");
    const store = await open(server.url, { unsafeSettings: "warn" });
    expect(await store.ready(5_000)).toBe(true);
    expect(store.settings?.unsafe).toHaveLength(1);
    expect((await attempt(store, "k")).granted).toBe(true);
  });
});
