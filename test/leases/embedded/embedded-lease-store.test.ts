import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { fakeClock } from "../../../src/core/clock.js";
import {
  createEmbeddedLeaseStore,
  type EmbeddedLeaseStore,
} from "../../../src/leases/embedded/embedded-lease-store.js";
import type { LeaseRecord } from "../../../src/leases/lease-store.js";
import { type EmbeddedDb, openEmbeddedDb } from "../../../src/sqlite/db.js";
import { describeLeaseServiceContract } from "../lease-service.contract.js";
import { describeLeaseStoreContract, type FakeClock } from "../lease-store.contract.js";

const HOUR = 60 * 60 * 1000;

describeLeaseStoreContract("embedded (SQLite)", async (clock, events) => {
  const dataDir = await mkdtemp(join(tmpdir(), "fencegate-leases-"));
  let db = openEmbeddedDb({ dataDir });
  let store = createEmbeddedLeaseStore({ db, clock, events });
  return {
    store,
    async reopen() {
      await store.close();
      db.close(); // the exclusive lock must go before the file can be opened again
      db = openEmbeddedDb({ dataDir });
      store = createEmbeddedLeaseStore({ db, clock, events });
      return store;
    },
    async cleanup() {
      await store.close();
      db.close();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
});

describe("embedded lease store", () => {
  let dataDir: string;
  let db: EmbeddedDb;
  let clock: FakeClock;
  let store: EmbeddedLeaseStore;

  beforeEach(async () => {
    dataDir = await mkdtemp(join(tmpdir(), "fencegate-leases-"));
    db = openEmbeddedDb({ dataDir });
    clock = fakeClock();
    store = createEmbeddedLeaseStore({ db, clock, retainMs: HOUR });
  });

  afterEach(async () => {
    await store.close();
    if (db.open) db.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  async function grant(key: string, ttlMs = 1_000): Promise<LeaseRecord> {
    const result = await store.tryAcquire({ resource: { bucket: "b", key }, ttlMs, owner: "o" });
    if (!result.granted) throw new Error(`not granted: ${key}`);
    return result.lease;
  }

  it("starts tokens at 1", async () => {
    expect((await grant("a")).token).toBe(1);
    expect((await grant("b")).token).toBe(2);
  });

  it("keeps its tables apart from the other users of the db", () => {
    const tables = db
      .prepare<[], { name: string }>(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
      )
      .all()
      .map((t) => t.name);
    expect(tables.length).toBeGreaterThan(0);
    for (const name of tables) expect(name.startsWith("lease_")).toBe(true);
  });

  it("does not close the shared db", async () => {
    await store.close();
    expect(db.open).toBe(true);
    await expect(store.ping()).rejects.toMatchObject({ code: "ServiceUnavailable" });
  });

  it("fails ping once the db is closed", async () => {
    db.close();
    await expect(store.ping()).rejects.toThrow();
  });

  it("forgets ended leases after the retention period, and keeps the rest", async () => {
    const released = await grant("released");
    await store.release(released.leaseId);
    const unreported = await grant("unreported");
    const reported = await grant("reported");
    const active = await grant("active", 10 * HOUR);
    clock.advance(1_000);
    await store.collectExpired(); // reports both expired leases
    const stillUnreported = await grant("still-unreported", 2_000);

    clock.advance(HOUR + 1_000);
    expect(store.sweep()).toBe(3);
    expect(await store.get(released.leaseId)).toBeNull();
    expect(await store.get(unreported.leaseId)).toBeNull();
    expect(await store.get(reported.leaseId)).toBeNull();
    expect(await store.get(active.leaseId)).toEqual(active);
    // Expired but never reported: kept until collectExpired has reported it (audit rule).
    expect(await store.get(stillUnreported.leaseId)).toEqual(stillUnreported);
    expect((await store.collectExpired()).map((l) => l.leaseId)).toEqual([stillUnreported.leaseId]);
    clock.advance(HOUR);
    expect(store.sweep()).toBe(1);
    expect(await store.get(stillUnreported.leaseId)).toBeNull();
    // Forgetting never lowers the counter.
    expect((await grant("next")).token).toBe(active.token + 2);
  });

  it("sweeps by itself from time to time", async () => {
    const lease = await grant("k");
    await store.release(lease.leaseId);
    clock.advance(2 * HOUR);
    await store.collectExpired();
    expect(await store.get(lease.leaseId)).toBeNull();
  });

  it("keeps a newer overlapping lease while an older one is remembered, even if the clock stepped back", async () => {
    const start = clock();
    const older = await grant("k", 48 * HOUR);
    clock.set(start + 30 * HOUR);
    await store.release(older.leaseId); // ended at +30h
    clock.set(start - 10 * HOUR); // the clock steps back
    const newer = await grant("k", 1_000);
    await store.release(newer.leaseId); // ended at -10h
    clock.set(start + 16 * HOUR); // newer is past retention, older is not
    store.sweep();
    expect(await store.get(older.leaseId)).not.toBeNull();
    expect(await store.findNewerOverlapping(older)).toEqual({
      ...newer,
      releasedAt: start - 10 * HOUR,
      endedAt: start - 10 * HOUR,
    });

    clock.set(start + 40 * HOUR);
    expect(store.sweep()).toBe(2);
    expect(await store.get(newer.leaseId)).toBeNull();
  });

  it("never hands out a token again after kill -9", async () => {
    await store.close();
    db.close();
    const fixture = fileURLToPath(new URL("../fixtures/grant-forever.ts", import.meta.url));
    const child = spawn(process.execPath, ["--import", "tsx", fixture, dataDir], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    const seen: number[] = [];
    const exited = new Promise((resolve) => child.on("exit", resolve));
    await new Promise<void>((resolve, reject) => {
      let buffered = "";
      child.stdout.setEncoding("utf8");
      child.stdout.on("data", (chunk: string) => {
        buffered += chunk;
        const lines = buffered.split("\n");
        buffered = lines.pop()!;
        seen.push(...lines.map(Number));
        if (seen.length >= 50) resolve();
      });
      child.on("exit", () => reject(new Error(`child exited early after ${seen.length} grants`)));
    });
    child.kill("SIGKILL");
    await exited;

    db = openEmbeddedDb({ dataDir });
    store = createEmbeddedLeaseStore({ db, clock, retainMs: HOUR });
    const next = await grant("after-crash");
    expect(next.token).toBeGreaterThan(Math.max(...seen));
  });
});

describe("embedded lease store: a database made before broken_at existed", () => {
  it("gains the column on open, keeps its leases, and remembers a break from then on", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "fencegate-leases-old-"));
    try {
      let db = openEmbeddedDb({ dataDir });
      let store = createEmbeddedLeaseStore({ db });
      const granted = await store.tryAcquire({
        resource: { bucket: "b", key: "k" },
        ttlMs: 60_000,
        owner: "o",
      });
      if (!granted.granted) throw new Error("not granted");
      await store.close();
      // The table as an older release left it.
      db.exec("ALTER TABLE lease_leases DROP COLUMN broken_at");
      const columns = () =>
        db
          .prepare<[], { name: string }>("PRAGMA table_info(lease_leases)")
          .all()
          .map((c) => c.name);
      expect(columns()).not.toContain("broken_at");
      db.close();

      db = openEmbeddedDb({ dataDir });
      store = createEmbeddedLeaseStore({ db });
      expect(columns()).toContain("broken_at");
      expect((await store.get(granted.lease.leaseId))?.brokenAt).toBeUndefined();
      const broken = await store.breakLease!(granted.lease.leaseId);
      expect(broken.lease.brokenAt).toBeTypeOf("number");
      await expect(store.renew(granted.lease.leaseId, 1_000)).rejects.toMatchObject({
        code: "LeaseLost",
        details: { reason: "broken" },
      });
      await store.close();
      db.close();
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});

describeLeaseServiceContract("the embedded store", async (events) => {
  const dataDir = await mkdtemp(join(tmpdir(), "fencegate-lease-service-"));
  const db = openEmbeddedDb({ dataDir });
  const store = createEmbeddedLeaseStore({ db, events });
  return {
    store,
    async cleanup() {
      await store.close();
      db.close();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
});
