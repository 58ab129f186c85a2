import { DomainError } from "../core/errors.js";
import { assertWellFormedAcquire } from "./lease-rules.js";
import type { AcquireInput } from "./lease-store.js";

// The checks every lease store makes, so that all answer a malformed call alike. The lease API
// validates its input against configured bounds; these only keep a malformed call from storing a
// lease that could never be reasoned about.

export function validateAcquire(input: AcquireInput): void {
  const { resource, ttlMs, owner } = input;
  validateTtl(ttlMs);
  const hasKey = typeof resource?.key === "string";
  const hasPrefix = typeof resource?.prefix === "string";
  if (typeof resource?.bucket !== "string" || resource.bucket === "" || hasKey === hasPrefix) {
    throw new DomainError("InvalidArgument", "a lease needs a bucket and exactly one of key or prefix");
  }
  if (typeof owner !== "string") throw new DomainError("InvalidArgument", "lease owner must be a string");
  if (input.principal !== undefined && typeof input.principal !== "string") {
    throw new DomainError("InvalidArgument", "lease principal must be a string");
  }
  assertWellFormedAcquire(input);
}

export function validateTtl(ttlMs: number): void {
  if (!Number.isSafeInteger(ttlMs) || ttlMs <= 0) {
    throw new DomainError("InvalidArgument", `ttlMs must be a positive integer, got ${ttlMs}`);
  }
}
