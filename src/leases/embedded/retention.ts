import type { EmbeddedDb } from "../../embedded/db.js";
import { overlaps, type ResourceRef } from "../lease-rules.js";
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

/**
 * The body of a retention sweep (run it inside a transaction): forgets leases that ended at
 * least `retainMs` before `now`, as far as selectForgettable allows, and returns how many.
 * A lease only gets `ended_at` once released or reported expired, so an expiry is never
 * forgotten before collectExpired has reported it (and the LeaseExpired event was audited).
 */
export function createRetentionSweep(db: EmbeddedDb, retainMs: number): (now: number) => number {
  const due = db.prepare<{ cutoff: number }, LeaseRow>(
    `SELECT ${LEASE_COLUMNS} FROM lease_leases WHERE ended_at IS NOT NULL AND ended_at <= @cutoff`,
  );
  // Everything else with a lower token than some due lease: what could hold a due lease back.
  const olderKept = db.prepare<{ cutoff: number; maxToken: number }, LeaseRow>(
    `SELECT ${LEASE_COLUMNS} FROM lease_leases WHERE token < @maxToken AND (ended_at IS NULL OR ended_at > @cutoff)`,
  );
  const remove = db.prepare("DELETE FROM lease_leases WHERE lease_id = ?");
  const entry = (row: LeaseRow, isDue: boolean): RetentionEntry => ({
    leaseId: row.lease_id,
    token: row.token,
    resource: rowResource(row),
    due: isDue,
  });

  return (now) => {
    const cutoff = now - retainMs;
    const dueRows = due.all({ cutoff });
    if (dueRows.length === 0) return 0;
    const maxToken = dueRows.reduce((max, row) => Math.max(max, row.token), 0);
    const entries = [
      ...dueRows.map((row) => entry(row, true)),
      ...olderKept.all({ cutoff, maxToken }).map((row) => entry(row, false)),
    ].sort((a, b) => a.token - b.token);
    const ids = selectForgettable(entries);
    for (const id of ids) remove.run(id);
    return ids.length;
  };
}
