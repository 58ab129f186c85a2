import type { AuditDraft } from "../audit/audit-log.js";
import type { LeaseEvent } from "../metrics/observe.js";
import type { LeaseEventContext, LeaseEvents, LeaseRecord } from "./lease-store.js";

/** One accepted lease event: its lease, and who asked (null: an expiry, nobody's doing). */
export type AcceptedEvent = { op: LeaseEvent; lease: LeaseRecord; by: LeaseEventContext | null };

/**
 * The accepted events of a change with op `op` that answered `lease`, in the order they are
 * recorded: the overlapping leases a grant saw expire (`expired`) come first; a release or a break
 * that found its lease expired unreported reports that expiry (a break then records its own act).
 */
export function eventsOf(
  op: LeaseEvent,
  lease: LeaseRecord,
  by: LeaseEventContext | null = null,
  expired: readonly LeaseRecord[] = [],
): AcceptedEvent[] {
  const own: AcceptedEvent = { op, lease, by: op === "LeaseExpired" ? null : by };
  if ((op === "LeaseReleased" || op === "LeaseBroken") && lease.releasedAt === undefined) {
    const expiry = expiries([lease]);
    return op === "LeaseBroken" ? [...expiry, own] : expiry;
  }
  return [...expiries(expired), own];
}

/** The LeaseExpired events of leases seen to expire (nobody's doing), in the order given. */
export const expiries = (leases: readonly LeaseRecord[]): AcceptedEvent[] =>
  leases.map((lease) => ({ op: "LeaseExpired", lease, by: null }));

/** What a lease event's record is about: a lease, or (a refused acquire) the resource asked for. */
type Subject = Pick<LeaseRecord, "bucket" | "key" | "prefix" | "owner"> & {
  token: number | null;
  leaseId: string | null;
};

/** The audit record of an accepted event `op` about `lease`, asked by `by`. */
export function leaseEventDraft(op: string, lease: Subject, by: LeaseEventContext | null): AuditDraft {
  return {
    op,
    bucket: lease.bucket,
    key: lease.key ?? null,
    prefix: lease.prefix ?? null,
    token: lease.token,
    leaseId: lease.leaseId,
    owner: lease.owner,
    principal: by?.principal ?? null,
    requestId: by?.requestId ?? null,
    highestToken: null,
    decision: "accepted",
    reason: null,
  };
}

/** Records events through the sink right after the store's step, in order (a store whose step cannot). */
export async function recordAfter(
  sink: LeaseEvents | undefined,
  events: readonly AcceptedEvent[],
): Promise<void> {
  if (sink) for (const e of events) await sink.append(leaseEventDraft(e.op, e.lease, e.by));
}
