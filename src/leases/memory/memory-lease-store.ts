import { randomBytes } from "node:crypto";
import { type Clock, systemClock } from "../../core/clock.js";
import { DomainError } from "../../core/errors.js";
import { MemoryDomain } from "../../core/tx.js";
import { judgeIntent, leaseNotFound, lostByRelease, newLeaseId, resourceOf } from "../lease-rules.js";
import type {
  AcquireInput,
  AcquireResult,
  BreakResult,
  CommitIntent,
  DelegateRecord,
  IntentInput,
  LeaseEventHook,
  LeaseReads,
  LeaseRecord,
  LeaseStore,
} from "../lease-store.js";
import { IntentTable } from "./intent-table.js";
import { isActiveEntry, type LeaseEntry, LeaseTable } from "./lease-table.js";
import { sweepEnded } from "./retention.js";
import { validateAcquire, validateTtl } from "./validate.js";

export type MemoryLeaseStoreOptions = {
  clock?: Clock;
  /** Share it with a memory backend or audit log to join their atomic steps. Default: its own. */
  domain?: MemoryDomain;
  /** How long an ended lease stays answerable by get/findNewerOverlapping. Default 24h. */
  retainMs?: number;
  /** Minimum interval between retention sweeps, run opportunistically. Default 1 min. */
  sweepEveryMs?: number;
};

export type MemoryLeaseStore = LeaseStore & {
  readonly domain: MemoryDomain;
  readonly inDomain: LeaseReads;
  /** Forgets ended leases older than retainMs now; returns how many. Runs by itself too. */
  sweep(): number;
};

const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * Hands out copies, so that a caller changing a record cannot change the store; `endedAt` once
 * the lease was seen to end.
 */
const copy = (entry: LeaseEntry | undefined): LeaseRecord | null =>
  entry ? { ...entry.record, ...(entry.endedAt !== null ? { endedAt: entry.endedAt } : {}) } : null;

/**
 * A lease store in this process's memory, for tests and single-process setups: the embedded
 * store's rules and answers, without durability. Every change is one step of its MemoryDomain
 * and registers its undo there, so a LeaseEventHook that throws (an audit record that could not
 * be written) leaves the store as it was; sharing the domain with a memory backend lets the
 * fencing core read leases (`inDomain`) inside the backend's commit step.
 */
export function createMemoryLeaseStore({
  clock = systemClock,
  domain = new MemoryDomain(),
  retainMs = DAY_MS,
  sweepEveryMs = 60_000,
}: MemoryLeaseStoreOptions = {}): MemoryLeaseStore {
  const changed = (undo: () => void) => domain.changed(undo);
  const table = new LeaseTable(changed);
  const intents = new IntentTable(changed);

  const readsAt = (now: () => number): LeaseReads => ({
    get: (leaseId) => copy(table.get(leaseId)),
    findNewerOverlapping: (lease) => copy(table.newerOverlapping(lease)),
    findActiveCovering: (bucket, key) => copy(table.activeOverlapping({ bucket, key }, now())),
  });
  const inDomain = readsAt(clock);
  // Delegates in creation order; listed only while their lease is remembered.
  let delegates: DelegateRecord[] = [];
  const setDelegates = (next: DelegateRecord[]) => {
    const before = delegates;
    delegates = next;
    changed(() => {
      delegates = before;
    });
  };

  const reportExpiry = (entry: LeaseEntry): LeaseRecord => {
    table.update(entry, { expiryReported: true, endedAt: entry.record.expiresAt });
    return copy(entry)!;
  };

  const acquire = (input: AcquireInput, now: number, inCommit?: LeaseEventHook): AcquireResult => {
    const held = table.activeOverlapping(input.resource, now);
    if (held) return { granted: false, heldBy: { ...held.record } };
    const pending = intents.under(input.resource);
    // Commits in flight under ended leases are fenced before anyone is granted the resource.
    if (pending.length > 0) return { granted: false, fence: { token: table.takeToken(), intents: pending } };
    // Overlapping leases that expired unnoticed end for good now, before the grant: a clock
    // stepped back cannot make them active beside the new lease.
    const expired = table
      .lapsedOverlapping(input.resource, now)
      .sort((a, b) => a.record.token - b.record.token)
      .map(reportExpiry);
    if (inCommit) for (const lease of expired) inCommit(lease, "LeaseExpired");
    const lease: LeaseRecord = {
      leaseId: newLeaseId(),
      ...resourceOf(input.resource),
      owner: input.owner,
      token: table.takeToken(),
      ttlMs: input.ttlMs,
      acquiredAt: now,
      expiresAt: now + input.ttlMs,
      ...(input.principal !== undefined ? { principal: input.principal } : {}),
    };
    table.insert(lease);
    inCommit?.({ ...lease });
    return { granted: true, lease: { ...lease }, expired };
  };

  const renewStep = (leaseId: string, ttlMs: number, now: number, inCommit?: LeaseEventHook) => {
    const entry = table.get(leaseId);
    if (!entry) throw leaseNotFound(leaseId);
    if (entry.record.releasedAt !== undefined)
      throw lostByRelease(leaseId, entry.record.brokenAt !== undefined);
    if (!isActiveEntry(entry, now)) {
      const at = new Date(entry.record.expiresAt).toISOString();
      throw new DomainError("LeaseLost", `lease ${leaseId} expired at ${at}`, { leaseId, reason: "expired" });
    }
    table.update(entry, { record: { ...entry.record, expiresAt: now + ttlMs, ttlMs } });
    inCommit?.(copy(entry)!);
    return copy(entry)!;
  };

  const releaseStep = (leaseId: string, now: number, inCommit?: LeaseEventHook, broken = false) => {
    const entry = table.get(leaseId);
    if (!entry || entry.endedAt !== null) throw leaseNotFound(leaseId);
    if (!isActiveEntry(entry, now)) {
      // Released after it had expired: the lease ended by expiry, and that is what is reported.
      const lease = reportExpiry(entry);
      inCommit?.(lease, "LeaseExpired");
      return lease;
    }
    table.update(entry, {
      record: { ...entry.record, releasedAt: now, ...(broken ? { brokenAt: now } : {}) },
      endedAt: Math.min(now, entry.record.expiresAt),
    });
    inCommit?.(copy(entry)!);
    return copy(entry)!;
  };

  const breakStep = (leaseId: string, now: number, inCommit?: LeaseEventHook): BreakResult => {
    const lease = releaseStep(leaseId, now, inCommit, true);
    return { lease, fence: { token: table.takeToken(), intents: intents.under(resourceOf(lease)) } };
  };

  const collectStep = (now: number, inCommit?: LeaseEventHook): LeaseRecord[] => {
    const expired = [...table.openEntries()]
      .filter((entry) => entry.record.expiresAt <= now)
      .sort((a, b) => a.record.token - b.record.token);
    const reported = expired.map(reportExpiry);
    // Marked reported and audited in one step: an expiry is never reported without its record.
    if (inCommit) for (const lease of reported) inCommit(lease);
    return reported;
  };

  const beginStep = (intent: IntentInput, now: number): CommitIntent => {
    judgeIntent(
      intent,
      now,
      readsAt(() => now),
    );
    const intentId = randomBytes(12).toString("base64url");
    intents.add({
      intentId,
      leaseId: intent.kind === "fenced" ? intent.leaseId : null,
      token: intent.kind === "fenced" ? intent.token : null,
      bucket: intent.bucket,
      key: intent.key,
      createdAt: now,
    });
    return { intentId, ceiling: table.lastToken };
  };

  let lastSweepAt = Number.NEGATIVE_INFINITY;
  let closed = false;

  function open(): number {
    if (closed) throw new DomainError("ServiceUnavailable", "the memory lease store is closed");
    return clock();
  }

  function maybeSweep(now: number): void {
    // A clock that stepped back must not postpone sweeping until it catches up again.
    if (now - lastSweepAt < sweepEveryMs && now >= lastSweepAt) return;
    lastSweepAt = now;
    sweepEnded(table, now, retainMs);
  }

  return {
    kind: "memory",
    domain,
    inDomain,

    async tryAcquire(input, inCommit) {
      const now = open();
      validateAcquire(input);
      return domain.run(() => {
        maybeSweep(now);
        return acquire(input, now, inCommit);
      });
    },

    async get(leaseId) {
      open();
      return inDomain.get(leaseId);
    },

    async renew(leaseId, ttlMs, inCommit) {
      const now = open();
      validateTtl(ttlMs);
      return domain.run(() => renewStep(leaseId, ttlMs, now, inCommit));
    },

    async release(leaseId, inCommit) {
      const now = open();
      return domain.run(() => releaseStep(leaseId, now, inCommit));
    },

    async breakLease(leaseId, inCommit) {
      const now = open();
      return domain.run(() => breakStep(leaseId, now, inCommit));
    },

    async addDelegate(delegate) {
      open();
      await domain.run(() => {
        if (!table.get(delegate.leaseId)) throw leaseNotFound(delegate.leaseId);
        setDelegates([...delegates, { ...delegate }]);
      });
    },

    async listDelegates(leaseId) {
      open();
      return delegates
        .filter((d) => (leaseId === undefined || d.leaseId === leaseId) && table.get(d.leaseId))
        .map((d) => ({ ...d }));
    },

    async removeDelegate(leaseId, delegateId) {
      open();
      return domain.run(() => {
        const next = delegates.filter((d) => !(d.leaseId === leaseId && d.delegateId === delegateId));
        if (next.length === delegates.length) return false;
        setDelegates(next);
        return true;
      });
    },

    async list({ bucket, prefix }) {
      const now = open();
      return [...table.openEntries(bucket)]
        .filter((entry) => isActiveEntry(entry, now))
        .map((entry) => entry.record)
        .filter((lease) => prefix === undefined || (lease.key ?? lease.prefix ?? "").startsWith(prefix))
        .sort((a, b) => a.token - b.token)
        .map((lease) => ({ ...lease }));
    },

    async findActiveCovering(bucket, key) {
      open();
      return inDomain.findActiveCovering(bucket, key);
    },

    async findNewerOverlapping(lease) {
      open();
      return inDomain.findNewerOverlapping(lease);
    },

    async collectExpired(inCommit) {
      const now = open();
      return domain.run(() => {
        const reported = collectStep(now, inCommit);
        maybeSweep(now);
        return reported;
      });
    },

    async beginCommit(intent) {
      const now = open();
      return domain.run(() => beginStep(intent, now));
    },

    async endCommit(intentId) {
      open();
      await domain.run(() => intents.delete(intentId));
    },

    async intentsUnder(resource) {
      return intents.under(resource);
    },

    async clearIntents(intentIds) {
      open();
      await domain.run(() => {
        for (const id of intentIds) intents.delete(id);
      });
    },

    async ping() {
      open();
    },

    async close() {
      closed = true;
    },

    sweep() {
      const now = open();
      lastSweepAt = now;
      // Outside a step the changes simply stand; inside one they join it (MemoryDomain.changed).
      return sweepEnded(table, now, retainMs);
    },
  };
}
