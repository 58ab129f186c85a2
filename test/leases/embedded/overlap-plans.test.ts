import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fakeClock } from "../../../src/core/clock.js";
import {
  createEmbeddedLeaseStore,
  type EmbeddedLeaseStore,
} from "../../../src/leases/embedded/embedded-lease-store.js";
import type { LeaseRecord, LeaseResource } from "../../../src/leases/lease-store.js";
import { type EmbeddedDb, openEmbeddedDb } from "../../../src/sqlite/db.js";
import { tempDir } from "../../support/temp.js";

/**
 * Flat cost as leases pile up: every lookup a grant, a renewal, a release or a write's lease
 * check makes is an index seek or an index range, never a scan of the bucket's leases. Checked
 * on the statements the store really runs (as SQLite traced them, values included), with
 * EXPLAIN QUERY PLAN, on a store holding thousands of key and prefix leases in one bucket.
 */
describe("embedded lease store query plans", () => {
  const dir = tempDir("fencegate-lease-plans-");
  let db: EmbeddedDb;
  let store: EmbeddedLeaseStore;
  let traced: string[] = [];
  let tracing = false;
  const clock = fakeClock();

  beforeAll(async () => {
    db = openEmbeddedDb({ dataDir: dir.path, trace: (sql) => tracing && traced.push(sql) });
    store = createEmbeddedLeaseStore({ db, clock });
    const resources: LeaseResource[] = [];
    for (let i = 0; i < 3000; i++) {
      resources.push({ bucket: "b", key: `keys/${i}` }, { bucket: "b", prefix: `prefixes/${i}/` });
    }
    const granted = await Promise.all(
      resources.map((resource) => store.tryAcquire({ resource, ttlMs: 60_000, owner: "o" })),
    );
    expect(granted.every((g) => g.granted)).toBe(true);
    // Some ended leases too: what retention keeps for a day.
    for (const g of granted.slice(0, 1000)) if (g.granted) await store.release(g.lease.leaseId);
    db.exec("ANALYZE");
  });

  afterAll(() => {
    db.close();
    dir.cleanup();
  });

  /** The plans of the lease_leases reads `action` runs. */
  async function plansOf(action: () => Promise<unknown>): Promise<string[]> {
    traced = [];
    tracing = true;
    try {
      await action();
    } finally {
      tracing = false;
    }
    const reads = traced.filter(
      (sql) => /^\s*(WITH|SELECT)/i.test(sql) && /FROM\s+(cut\s+CROSS JOIN\s+)?lease_leases\b/i.test(sql),
    );
    expect(reads.length).toBeGreaterThan(0);
    return reads.map((sql) =>
      db
        .prepare(`EXPLAIN QUERY PLAN ${sql}`)
        .all()
        .map((row) => (row as { detail: string }).detail)
        .join("; "),
    );
  }

  const expectNoScan = (plans: string[]) => {
    if (process.env.SHOW_PLANS) console.log(plans.join("\n"));
    for (const plan of plans) {
      expect(plan).not.toMatch(/SCAN lease_leases/);
      // A search on the bucket alone is a scan of the bucket's leases.
      expect(plan).not.toMatch(/\(bucket=\?\)/);
      // Nor is an open range (IS NOT NULL reads as one), nor one over every newer token.
      expect(plan).not.toMatch(/\(bucket=\? AND (key|prefix)>\?\)/);
      expect(plan).not.toMatch(/\(token[<>]\?\)/);
      expect(plan).toMatch(/SEARCH lease_leases USING (COVERING )?INDEX /);
    }
  };

  const grant = async (resource: LeaseResource): Promise<LeaseRecord> => {
    const result = await store.tryAcquire({ resource, ttlMs: 60_000, owner: "o" });
    if (!result.granted) throw new Error(`not granted: ${JSON.stringify(result)}`);
    return result.lease;
  };

  it("grants a key lease with seeks", async () => {
    expectNoScan(await plansOf(() => grant({ bucket: "b", key: "fresh/key/one" })));
  });

  it("grants a prefix lease with seeks and ranges", async () => {
    expectNoScan(await plansOf(() => grant({ bucket: "b", prefix: "fresh/prefix/" })));
  });

  it("refuses an overlapping grant with seeks, naming the holder", async () => {
    const plans = await plansOf(async () => {
      const result = await store.tryAcquire({
        resource: { bucket: "b", key: "prefixes/2007/x" },
        ttlMs: 1000,
        owner: "o",
      });
      expect(result.granted).toBe(false);
      expect(!result.granted && "heldBy" in result && result.heldBy.prefix).toBe("prefixes/2007/");
    });
    expectNoScan(plans);
  });

  it("checks a write's lease (covering, newer) with seeks", async () => {
    const lease = await grant({ bucket: "b", key: "write/target" });
    const reads = store.inDomain!;
    expectNoScan(await plansOf(() => store.domain!.run(() => reads.findActiveCovering("b", "write/target"))));
    expectNoScan(await plansOf(() => store.domain!.run(() => reads.findNewerOverlapping(lease))));
    const prefixLease = await grant({ bucket: "b", prefix: "write/dir/" });
    expectNoScan(await plansOf(() => store.domain!.run(() => reads.findNewerOverlapping(prefixLease))));
  });

  it("forgets ended leases with seeks, not a list of every lease", async () => {
    clock.advance(25 * 60 * 60 * 1000);
    let removed = 0;
    const plans = await plansOf(async () => {
      removed = store.sweep();
    });
    expect(removed).toBeGreaterThanOrEqual(1000);
    expectNoScan(plans);
  });
});
