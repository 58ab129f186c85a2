/**
 * What the parts of the lease-store contract share: the store under test (replaced on reopen),
 * its fake clock, and the helpers every part uses.
 */
import { expect } from "vitest";
import type { AuditDraft, AuditRecord } from "../../src/audit/audit-log.js";
import type { fakeClock } from "../../src/core/clock.js";
import { DomainError, type DomainErrorCode } from "../../src/core/errors.js";
import type { TxDomain } from "../../src/core/tx.js";
import type {
  AcquireResult,
  LeaseEvents,
  LeaseRecord,
  LeaseResource,
  LeaseStore,
} from "../../src/leases/lease-store.js";

export type FakeClock = ReturnType<typeof fakeClock>;

export const TTL = 10_000;

export type LeaseStoreContext = {
  readonly store: LeaseStore;
  readonly clock: FakeClock;
  /** What the store records its lease events in (given to it when built). */
  readonly events: RecordingEvents;
  /** Acquires `resource` and fails the test unless it is granted. */
  grant(resource: LeaseResource, ttlMs?: number, owner?: string): Promise<LeaseRecord>;
};

/** A record the store under test made: the draft, and whether it came inside the store's step. */
export type Recorded = AuditDraft & { inStep: boolean };

/**
 * An audit log for the store under test: it keeps every record it is given, offers appends inside
 * a step of `domainOf()` (the store's own domain, so that a store with one records in its steps),
 * and throws `failure` for the `failAt`th record (counting from 1) and every one after it.
 */
export type RecordingEvents = LeaseEvents & {
  readonly records: Recorded[];
  failAt: number;
  readonly failure: Error;
};

export function recordingEvents(domainOf: () => TxDomain | undefined): RecordingEvents {
  const records: Recorded[] = [];
  const failure = new Error("the audit record could not be written");
  const take = (draft: AuditDraft, inStep: boolean): AuditRecord => {
    records.push({ ...draft, inStep });
    if (records.length >= sink.failAt) throw failure;
    return { ...draft, seq: records.length, time: "", gateway: "test" } as AuditRecord;
  };
  const sink: RecordingEvents = {
    records,
    failAt: Number.POSITIVE_INFINITY,
    failure,
    get domain() {
      return domainOf();
    },
    appendInStep: (draft) => take(draft, true),
    append: async (draft) => take(draft, false),
  };
  return sink;
}

export async function expectDomainError(
  promise: Promise<unknown>,
  code: DomainErrorCode,
): Promise<DomainError> {
  const error = await promise.then(
    () => {
      throw new Error(`expected DomainError ${code}, but the call succeeded`);
    },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(DomainError);
  expect((error as DomainError).code).toBe(code);
  return error as DomainError;
}

export function grantedLease(result: AcquireResult, what: string): LeaseRecord {
  if (!result.granted) throw new Error(`expected a grant on ${what}: ${JSON.stringify(result)}`);
  return result.lease;
}
