import { overlaps, type ResourceRef } from "../lease-rules.js";

export type RetentionEntry = {
  leaseId: string;
  token: number;
  resource: ResourceRef;
  /** Ended long enough ago to be forgotten, as far as its own age goes. */
  due: boolean;
};

/**
 * Which leases a retention sweep may delete, given every remembered lease that could matter
 * (the expired ones and all others with a lower token), in ascending token order.
 *
 * findNewerOverlapping(A) must stay correct while A is remembered, so a lease may only go if no
 * lease with a lower token that overlaps it stays behind. Age alone nearly guarantees that (a
 * newer overlapping lease was granted after the older one ended), but not when the clock steps
 * back; this check makes it hold whatever the clock does.
 */
export function selectForgettable(entries: readonly RetentionEntry[]): string[] {
  const keptByBucket = new Map<string, { keys: Set<string>; prefixes: ResourceRef[] }>();
  const forgettable: string[] = [];
  for (const entry of entries) {
    const { resource } = entry;
    let kept = keptByBucket.get(resource.bucket);
    if (!kept) {
      kept = { keys: new Set(), prefixes: [] };
      keptByBucket.set(resource.bucket, kept);
    }
    if (entry.due && !blocked(kept, resource)) {
      forgettable.push(entry.leaseId);
      continue;
    }
    if (resource.key !== undefined) kept.keys.add(resource.key);
    else kept.prefixes.push(resource);
  }
  return forgettable;
}

function blocked(kept: { keys: Set<string>; prefixes: ResourceRef[] }, resource: ResourceRef): boolean {
  if (kept.prefixes.some((p) => overlaps(p, resource))) return true;
  if (resource.key !== undefined) return kept.keys.has(resource.key);
  for (const key of kept.keys) if (overlaps({ bucket: resource.bucket, key }, resource)) return true;
  return false;
}
