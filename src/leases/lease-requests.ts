import { DomainError } from "../core/errors.js";
import type { LeaseState } from "./lease-rules.js";
import type { LeaseRecord, LeaseResource } from "./lease-store.js";

/** Who asks: the access key (null: the gateway itself) and its request, for the audit record. */
export type Caller = { principal: string | null; requestId: string | null };

/** A lease and its state at the instant it was read; in listings, its resource's queue length. */
export type LeaseInfo = LeaseRecord & { state: LeaseState; waiters?: number };

export type AcquireRequest = {
  resource: LeaseResource;
  ttlMs: number;
  waitMs: number;
  owner: string;
  /** The client's request: once aborted (it disconnected), the waiter leaves the queue at once. */
  signal?: AbortSignal;
};

export function accessDenied(message: string): DomainError {
  return new DomainError("AccessDenied", `Access Denied: ${message}`);
}

export function notFound(leaseId: string): DomainError {
  return new DomainError("LeaseNotFound", `no lease ${leaseId}`);
}
