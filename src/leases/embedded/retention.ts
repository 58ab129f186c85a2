import type { EmbeddedDb } from "../../embedded/db.js";
import { overlaps, type ResourceRef, resourceOf } from "../lease-rules.js";
import type { LeaseResource } from "../lease-store.js";
import type { OverlapFilter } from "./overlap-queries.js";
import { LEASE_COLUMNS, type LeaseRow, rowResource } from "./rows.js";

export type RetentionEntry = {
  leaseId: string;
  token: number;
  resource: ResourceRef;
  /** Ended long enough ago to be forgotten, as far as its own age goes. */
  due: boolean;
};

/**
 * Which leases a retention sweep may delete, given every remembered lease that could matter
 * (the expired ones and all others with a lower token), in ascending token order. The rule of
 * every store's sweep; the memory store applies it to its lists, the embedded sweep below
 * applies the same rule with index seeks instead of a list of every lease.
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

/** Due leases read per page of a sweep. */
const PAGE = 500;

/**
 * The body of a retention sweep (run it inside a transaction): forgets leases that ended at
 * least `retainMs` before `now`, and returns how many.
 *
 * findNewerOverlapping(A) must stay correct while A is remembered, so a lease may only go once
 * no lease with a lower token that overlaps it is remembered. Age alone nearly guarantees that
 * (a newer overlapping lease was granted after the older one ended), but not when the clock
 * steps back; this check makes it hold whatever the clock does. Due leases are taken in token
 * order and each is checked against what is still remembered, older due leases already gone:
 * a few index seeks per due lease, whatever the number of leases that stay.
 *
 * A lease only gets `ended_at` once released or reported expired, so an expiry is never
 * forgotten before collectExpired has reported it (and the LeaseExpired event was audited).
 */
export function createRetentionSweep(
  db: EmbeddedDb,
  retainMs: number,
  firstOverlapping: (resource: LeaseResource, filter: OverlapFilter) => LeaseRow | undefined,
): (now: number) => number {
  const due = db.prepare<{ cutoff: number; after: number; limit: number }, LeaseRow>(
    `SELECT ${LEASE_COLUMNS} FROM lease_leases
     WHERE ended_at IS NOT NULL AND ended_at <= @cutoff AND token > @after ORDER BY token LIMIT @limit`,
  );
  const remove = db.prepare("DELETE FROM lease_leases WHERE lease_id = ?");

  return (now) => {
    const cutoff = now - retainMs;
    let removed = 0;
    for (let after = -1; ; ) {
      const rows = due.all({ cutoff, after, limit: PAGE });
      for (const row of rows) {
        if (!firstOverlapping(resourceOf(rowResource(row)), { kind: "older", token: row.token })) {
          remove.run(row.lease_id);
          removed++;
        }
      }
      if (rows.length < PAGE) return removed;
      after = rows[rows.length - 1]!.token;
    }
  };
}
