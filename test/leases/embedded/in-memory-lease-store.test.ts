import { beforeEach, describe, expect, it } from "vitest";
import { createEmbeddedAuditLog } from "../../../src/audit/embedded/embedded-audit-log.js";
import { fakeClock } from "../../../src/core/clock.js";
import {
  createEmbeddedLeaseStore,
  type EmbeddedLeaseStore,
} from "../../../src/leases/embedded/embedded-lease-store.js";
import type { LeaseEvents, LeaseRecord, LeaseResource } from "../../../src/leases/lease-store.js";
import { type EmbeddedDomain, embeddedDomain } from "../../../src/sqlite/db.js";
import { Database } from "../../../src/sqlite/sqlite.js";
import { describeLeaseServiceContract } from "../lease-service.contract.js";
import { describeLeaseStoreContract, expectDomainError, type FakeClock } from "../lease-store.contract.js";
import { grantedLease, recordingEvents } from "../lease-store-context.js";

/**
 * The embedded lease store on an in-memory SQLite database (`:memory:`), the lease store of tests
 * and single-process setups: the whole lease store contract, as on a database file, except what
 * needs a restart (nothing survives one).
 */

const HOUR = 60 * 60 * 1000;

describeLeaseStoreContract("embedded (in-memory SQLite)", async (clock, events) => {
  const store = createEmbeddedLeaseStore({ clock, events });
  return { store, cleanup: () => store.close() };
});

describeLeaseServiceContract("the embedded store on an in-memory SQLite database", async (events) => {
  const db = new Database(":memory:");
  const store = createEmbeddedLeaseStore({ db, events });
  return {
    store,
    async cleanup() {
      await store.close();
      if (db.open) db.close();
    },
  };
});

describe("embedded lease store in memory", () => {
  let clock: FakeClock;
  let store: EmbeddedLeaseStore;

  beforeEach(() => {
    clock = fakeClock();
    store = createEmbeddedLeaseStore({ clock, retainMs: HOUR });
  });

  async function grant(key: string, ttlMs = 1_000): Promise<LeaseRecord> {
    const result = await store.tryAcquire({ resource: { bucket: "b", key }, ttlMs, owner: "o" });
    if (!result.granted) throw new Error(`not granted: ${key}`);
    return result.lease;
  }

  it("runs on a database of its own without one given, which it closes with itself", async () => {
    const other = createEmbeddedLeaseStore({ clock });
    expect(other.domain).not.toBe(store.domain);
    const lease = await grant("k");
    // Another store's database: its own tokens, and nothing of this store's leases.
    expect(
      (await other.tryAcquire({ resource: { bucket: "b", key: "k" }, ttlMs: 1, owner: "o" })).granted,
    ).toBe(true);
    expect(await other.get(lease.leaseId)).toBeNull();
    const given = new Database(":memory:");
    const onGiven = createEmbeddedLeaseStore({ db: given });
    expect(onGiven.domain).toBe(embeddedDomain(given));
    await onGiven.close();
    expect(given.open).toBe(true);
    given.close();
    const own = (other.domain as EmbeddedDomain).db;
    expect(own.memory && own.open).toBe(true);
    await other.close();
    expect(own.open).toBe(false);
    await expectDomainError(other.ping(), "ServiceUnavailable");
  });

  it("hands out copies: changing a returned lease changes nothing in the store", async () => {
    const lease = await grant("k");
    const snapshot = { ...lease };
    lease.expiresAt = 0;
    (await store.get(lease.leaseId))!.token = 0;
    (await store.list({}))[0]!.releasedAt = 1;
    expect(await store.get(lease.leaseId)).toEqual(snapshot);
    expect(await store.findActiveCovering("b", "k")).toEqual(snapshot);
  });

  it("refuses malformed input", async () => {
    const acquire = (resource: LeaseResource, ttlMs = 1_000) =>
      store.tryAcquire({ resource, ttlMs, owner: "o" });
    await expectDomainError(acquire({ bucket: "", key: "k" }), "InvalidArgument");
    await expectDomainError(acquire({ bucket: "b", key: "k", prefix: "p" } as never), "InvalidArgument");
    await expectDomainError(acquire({ bucket: "b", key: "k" }, 0), "InvalidArgument");
    await expectDomainError(acquire({ bucket: "b", key: "k" }, 1.5), "InvalidArgument");
    const lease = await grant("k");
    await expectDomainError(store.renew(lease.leaseId, -1), "InvalidArgument");
  });

  it("answers ServiceUnavailable once closed", async () => {
    await store.close();
    await expectDomainError(store.ping(), "ServiceUnavailable");
    await expectDomainError(grant("k"), "ServiceUnavailable");
  });

  it("takes back the retention sweep of a step whose audit record fails", async () => {
    const events = recordingEvents(() => recording.domain);
    const recording = createEmbeddedLeaseStore({ clock, retainMs: HOUR, events });
    const first = await recording.tryAcquire({
      resource: { bucket: "b", key: "old" },
      ttlMs: 1_000,
      owner: "o",
    });
    const lease = grantedLease(first, "old");
    await recording.release(lease.leaseId);
    clock.advance(2 * HOUR);
    events.failAt = events.records.length + 1;
    const attempt = recording.tryAcquire({ resource: { bucket: "b", key: "k" }, ttlMs: 1_000, owner: "o" });
    await expect(attempt).rejects.toBe(events.failure);
    expect(await recording.get(lease.leaseId)).toMatchObject({ leaseId: lease.leaseId });
    expect(recording.sweep()).toBe(1);
    await recording.close();
  });

  it("commits a lease event and its audit record together on a shared database", async () => {
    const db = new Database(":memory:");
    const audit = createEmbeddedAuditLog({ gatewayId: "gw", clock, db });
    let failAfterRecord = false;
    // The log itself, but something after its record of a release fails (within the step).
    const events: LeaseEvents = {
      ...audit,
      appendInStep: (draft) => {
        const record = audit.appendInStep(draft);
        if (failAfterRecord) throw new Error("something after the audit record failed");
        return record;
      },
    };
    const shared = createEmbeddedLeaseStore({ clock, db, events });
    expect(audit.domain).toBe(shared.domain);
    const input = { resource: { bucket: "b", key: "k" }, ttlMs: 1_000, owner: "o" };
    const result = await shared.tryAcquire(input);
    const lease = result.granted ? result.lease : null;
    failAfterRecord = true;
    await expect(shared.release(lease!.leaseId)).rejects.toThrow(/after the audit record/);

    const { records } = await audit.query({ limit: 10 });
    expect(records.map((r) => [r.op, r.leaseId])).toEqual([["LeaseAcquired", lease!.leaseId]]);
    expect(await shared.get(lease!.leaseId)).toEqual(lease);
    db.close();
  });
});
