import { type Clock, systemClock } from "../../core/clock.js";
import { DomainError } from "../../core/errors.js";
import { MemoryDomain } from "../../core/tx.js";
import { decodeCursor, encodeCursor } from "../audit-cursor.js";
import {
  type AuditDraft,
  type AuditLog,
  type AuditQuery,
  type AuditRecord,
  clampLimit,
  draftTime,
  matches,
  parseFilters,
  recordOf,
} from "../audit-log.js";

export type MemoryAuditLogOptions = {
  /** This gateway instance, written into every record's `gateway`. */
  gatewayId: string;
  clock?: Clock;
  /** Share it with a memory backend or lease store to join their atomic steps. Default: its own. */
  domain?: MemoryDomain;
};

export type MemoryAuditLog = AuditLog & {
  readonly domain: MemoryDomain;
  readonly appendInStep: (draft: AuditDraft) => AuditRecord;
};

type Stored = { record: AuditRecord; timeMs: number };

/**
 * An audit log in this process's memory, for tests and single-process setups: the embedded log's
 * records, filters, cursors and limits, without durability. appendInStep registers its undo with
 * the MemoryDomain, so inside another component's step the record rolls back with that step.
 */
export function createMemoryAuditLog({
  gatewayId,
  clock = systemClock,
  domain = new MemoryDomain(),
}: MemoryAuditLogOptions): MemoryAuditLog {
  // In seq order, so a cursor is a binary search away.
  const records: Stored[] = [];
  let lastSeq = 0;
  let closed = false;
  const once = new Set<string>();

  const open = () => {
    if (closed) throw new DomainError("ServiceUnavailable", "the memory audit log is closed");
  };

  const appendInStep = (draft: AuditDraft): AuditRecord => {
    open();
    const timeMs = draftTime(draft, clock);
    const seqBefore = lastSeq;
    const record: AuditRecord = { seq: seqBefore + 1, ...recordOf(draft, timeMs, gatewayId) };
    const stored = { record, timeMs };
    records.push(stored);
    lastSeq = record.seq;
    // Undos run last-in first-out: every later record of the step is gone by then.
    domain.changed(() => {
      const at = records.lastIndexOf(stored);
      if (at >= 0) records.splice(at, 1);
      lastSeq = seqBefore;
    });
    return copy(record);
  };

  return {
    kind: "memory",
    domain,
    appendInStep,

    async append(draft) {
      return domain.run(() => appendInStep(draft));
    },

    async appendOnce(draft, key, unless) {
      return domain.run(() => {
        open();
        if (once.has(key) || (unless !== undefined && once.has(unless))) return false;
        once.add(key);
        domain.changed(() => once.delete(key));
        appendInStep(draft);
        return true;
      });
    },

    async query(query: AuditQuery) {
      open();
      const filters = parseFilters(query);
      const after = query.cursor === undefined ? 0 : decodeCursor(query.cursor);
      const limit = clampLimit(query.limit);
      const found: AuditRecord[] = [];
      // One more than asked tells whether another page exists.
      for (let i = firstAfter(records, after); i < records.length && found.length <= limit; i++) {
        const stored = records[i]!;
        if (matches(filters, stored.record)) found.push(stored.record);
      }
      const page = found.slice(0, limit).map(copy);
      const last = page.at(-1);
      return { records: page, nextCursor: found.length > limit && last ? encodeCursor(last.seq) : null };
    },

    async ping() {
      open();
    },

    async close() {
      closed = true;
    },
  };
}

/** A record to hand out: changing it (its keys included) changes nothing in the log. */
function copy(record: AuditRecord): AuditRecord {
  return record.keys === undefined ? { ...record } : { ...record, keys: [...record.keys] };
}

/** The position of the first record with a seq above `seq`. */
function firstAfter(records: readonly Stored[], seq: number): number {
  let lo = 0;
  let hi = records.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (records[mid]!.record.seq <= seq) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
