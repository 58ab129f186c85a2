import { beforeEach, describe, expect, it } from "vitest";
import { createMemoryAuditLog } from "../../../src/audit/memory/memory-audit-log.js";
import { fakeClock } from "../../../src/core/clock.js";
import { MemoryDomain } from "../../../src/core/tx.js";
import type { LeaseRecord, LeaseResource } from "../../../src/leases/lease-store.js";
import {
  createMemoryLeaseStore,
  type MemoryLeaseStore,
} from "../../../src/leases/memory/memory-lease-store.js";
import { describeLeaseServiceContract } from "../lease-service.contract.js";
import { describeLeaseStoreContract, expectDomainError, type FakeClock } from "../lease-store.contract.js";

const HOUR = 60 * 60 * 1000;

describeLeaseStoreContract("memory", async (clock) => {
  const store = createMemoryLeaseStore({ clock });
  return { store, cleanup: () => store.close() };
});

describeLeaseStoreContract("memory, on a shared domain", async (clock) => {
  const store = createMemoryLeaseStore({ clock, domain: new MemoryDomain(), retainMs: HOUR });
  return { store, cleanup: () => store.close() };
});

describe("memory lease store", () => {
  let clock: FakeClock;
  let store: MemoryLeaseStore;

  beforeEach(() => {
    clock = fakeClock();
    store = createMemoryLeaseStore({ clock, retainMs: HOUR });
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

  it("runs its steps in the domain it was given, or in its own", () => {
    const domain = new MemoryDomain();
    expect(createMemoryLeaseStore({ domain }).domain).toBe(domain);
    expect(store.domain).toBeInstanceOf(MemoryDomain);
    expect(createMemoryLeaseStore().domain).not.toBe(store.domain);
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

  it("refuses malformed input as the embedded store does", async () => {
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
    expect(await store.findNewerOverlapping({ ...lease, token: 0 })).toBeNull();
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

  it("takes back the retention sweep of a step whose hook throws", async () => {
    const lease = await grant("old");
    await store.release(lease.leaseId);
    clock.advance(2 * HOUR);
    const failure = new Error("audit down");
    const attempt = store.tryAcquire(
      { resource: { bucket: "b", key: "k" }, ttlMs: 1_000, owner: "o" },
      () => {
        throw failure;
      },
    );
    await expect(attempt).rejects.toBe(failure);
    expect(await store.get(lease.leaseId)).toMatchObject({ leaseId: lease.leaseId });
    expect(store.sweep()).toBe(1);
  });

  it("commits a lease event and its audit record together on a shared domain", async () => {
    const domain = new MemoryDomain();
    const shared = createMemoryLeaseStore({ clock, domain });
    const audit = createMemoryAuditLog({ gatewayId: "gw", clock, domain });
    const record = (op: string) => (lease: LeaseRecord) => {
      audit.appendInStep({
        op,
        bucket: lease.bucket,
        key: lease.key ?? null,
        prefix: lease.prefix ?? null,
        token: lease.token,
        leaseId: lease.leaseId,
        owner: lease.owner,
        principal: null,
        decision: "accepted",
        reason: null,
        highestToken: null,
        requestId: null,
      });
    };
    const input = { resource: { bucket: "b", key: "k" }, ttlMs: 1_000, owner: "o" };
    const result = await shared.tryAcquire(input, record("LeaseAcquired"));
    const lease = result.granted ? result.lease : null;
    const failing = (lease: LeaseRecord) => {
      record("LeaseReleased")(lease);
      throw new Error("something after the audit record failed");
    };
    await expect(shared.release(lease!.leaseId, failing)).rejects.toThrow(/after the audit record/);

    const { records } = await audit.query({ limit: 10 });
    expect(records.map((r) => [r.op, r.leaseId])).toEqual([["LeaseAcquired", lease!.leaseId]]);
    expect(await shared.get(lease!.leaseId)).toEqual(lease);
  });
});

describeLeaseServiceContract("the memory store", async () => {
  const store = createMemoryLeaseStore();
  return { store, cleanup: () => store.close() };
});
