import type { EmbeddedDb } from "../../sqlite/db.js";
import { resourceOf } from "../lease-rules.js";
import type { LeaseResource } from "../lease-store.js";
import type { OverlapFilter } from "./overlap-queries.js";
import { LEASE_COLUMNS, type LeaseRow, rowResource } from "./rows.js";

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
