import { resourceOf } from "../lease-rules.js";
import type { LeaseRecord, LeaseResource } from "../lease-store.js";
import { LeaseIndex } from "./lease-index.js";

/** A remembered lease. `record` is replaced, never mutated, so a copy handed out stays as it was. */
export type LeaseEntry = {
  record: LeaseRecord;
  /** collectExpired reported it: it stays ended even if the clock steps back. */
  expiryReported: boolean;
  /** When it was seen to end (release, or expiry reported); retention counts from here. */
  endedAt: number | null;
};

type EntryState = Pick<LeaseEntry, "record" | "expiryReported" | "endedAt">;

/** Not seen to end yet: active, or expired and not reported. */
const isOpen = (entry: LeaseEntry): boolean => entry.record.releasedAt === undefined && !entry.expiryReported;

/** Active at `now` (the embedded store's isActiveRow). */
export const isActiveEntry = (entry: LeaseEntry, now: number): boolean =>
  isOpen(entry) && entry.record.expiresAt > now;

const lowestToken = (entries: LeaseEntry[]): LeaseEntry | undefined =>
  entries.reduce<LeaseEntry | undefined>(
    (min, e) => (!min || e.record.token < min.record.token ? e : min),
    undefined,
  );

/**
 * The leases a memory store remembers and its token counter. Two indexes: every remembered
 * lease (findNewerOverlapping), and the open ones only, so that a grant does not wade through
 * the ended leases kept for retention. Every change registers its undo with `changed`
 * (MemoryDomain), so a step that throws leaves the table as it was.
 */
export class LeaseTable {
  private last = 0;
  private readonly byId = new Map<string, LeaseEntry>();
  private readonly remembered = new LeaseIndex<LeaseEntry>();
  private readonly open = new LeaseIndex<LeaseEntry>();

  constructor(private readonly changed: (undo: () => void) => void) {}

  /** The last token taken (granted, or handed out to fence intents). */
  get lastToken(): number {
    return this.last;
  }

  takeToken(): number {
    const before = this.last;
    this.last = before + 1;
    this.changed(() => {
      this.last = before;
    });
    return this.last;
  }

  get(leaseId: string): LeaseEntry | undefined {
    return this.byId.get(leaseId);
  }

  insert(record: LeaseRecord): void {
    const entry: LeaseEntry = { record, expiryReported: false, endedAt: null };
    this.file(entry, true);
    this.changed(() => this.unfile(entry));
  }

  update(entry: LeaseEntry, next: Partial<EntryState>): void {
    const before: EntryState = {
      record: entry.record,
      expiryReported: entry.expiryReported,
      endedAt: entry.endedAt,
    };
    const wasOpen = isOpen(entry);
    Object.assign(entry, next);
    const closes = wasOpen && !isOpen(entry);
    if (closes) this.open.delete(entry);
    this.changed(() => {
      Object.assign(entry, before);
      if (closes) this.open.add(entry);
    });
  }

  /** Drops an ended lease (retention). */
  forget(entry: LeaseEntry): void {
    const wasOpen = isOpen(entry);
    this.unfile(entry);
    this.changed(() => this.file(entry, wasOpen));
  }

  /** The active lease overlapping `resource` with the lowest token. */
  activeOverlapping(resource: LeaseResource, now: number): LeaseEntry | undefined {
    return lowestToken(this.open.overlapping(resource).filter((e) => isActiveEntry(e, now)));
  }

  /** Open leases overlapping `resource` that have expired at `now` (not yet seen to end). */
  lapsedOverlapping(resource: LeaseResource, now: number): LeaseEntry[] {
    return this.open.overlapping(resource).filter((e) => isOpen(e) && e.record.expiresAt <= now);
  }

  /** The first lease granted after `lease` on an overlapping resource, whatever its state. */
  newerOverlapping(lease: LeaseRecord): LeaseEntry | undefined {
    return lowestToken(
      this.remembered.overlapping(resourceOf(lease)).filter((e) => e.record.token > lease.token),
    );
  }

  /** Open leases (active, or expired and not reported), of one bucket or of all. */
  openEntries(bucket?: string): Generator<LeaseEntry> {
    return this.open.entries(bucket);
  }

  entries(): IterableIterator<LeaseEntry> {
    return this.byId.values();
  }

  private file(entry: LeaseEntry, open: boolean): void {
    this.byId.set(entry.record.leaseId, entry);
    this.remembered.add(entry);
    if (open) this.open.add(entry);
  }

  private unfile(entry: LeaseEntry): void {
    this.byId.delete(entry.record.leaseId);
    this.remembered.delete(entry);
    this.open.delete(entry);
  }
}
