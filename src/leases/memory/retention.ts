import { type RetentionEntry, selectForgettable } from "../embedded/retention.js";
import { resourceOf } from "../lease-rules.js";
import type { LeaseEntry, LeaseTable } from "./lease-table.js";

/**
 * Forgets leases that ended at least `retainMs` before `now`, as far as selectForgettable (the
 * embedded store's rule) allows, and returns how many. A lease gets `endedAt` only once released
 * or reported expired, so an expiry is never forgotten before collectExpired reported it.
 */
export function sweepEnded(table: LeaseTable, now: number, retainMs: number): number {
  const cutoff = now - retainMs;
  const isDue = (entry: LeaseEntry) => entry.endedAt !== null && entry.endedAt <= cutoff;
  let maxToken = Number.NEGATIVE_INFINITY;
  for (const entry of table.entries()) if (isDue(entry)) maxToken = Math.max(maxToken, entry.record.token);
  if (maxToken === Number.NEGATIVE_INFINITY) return 0;

  // The due leases and everything else with a lower token: what could hold a due lease back.
  const byId = new Map<string, LeaseEntry>();
  const candidates: RetentionEntry[] = [];
  for (const entry of table.entries()) {
    const due = isDue(entry);
    if (!due && entry.record.token >= maxToken) continue;
    byId.set(entry.record.leaseId, entry);
    candidates.push({
      leaseId: entry.record.leaseId,
      token: entry.record.token,
      resource: resourceOf(entry.record),
      due,
    });
  }
  candidates.sort((a, b) => a.token - b.token);
  const ids = selectForgettable(candidates);
  for (const id of ids) table.forget(byId.get(id)!);
  return ids.length;
}
