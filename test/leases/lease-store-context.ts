/**
 * What the parts of the lease-store contract share: the store under test (replaced on reopen),
 * its fake clock, and the helpers every part uses.
 */
import { expect } from "vitest";
import type { fakeClock } from "../../src/core/clock.js";
import { DomainError, type DomainErrorCode } from "../../src/core/errors.js";
import type { AcquireResult, LeaseRecord, LeaseResource, LeaseStore } from "../../src/leases/lease-store.js";

export type FakeClock = ReturnType<typeof fakeClock>;

export const TTL = 10_000;

export type LeaseStoreContext = {
  readonly store: LeaseStore;
  readonly clock: FakeClock;
  /** Acquires `resource` and fails the test unless it is granted. */
  grant(resource: LeaseResource, ttlMs?: number, owner?: string): Promise<LeaseRecord>;
};

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
