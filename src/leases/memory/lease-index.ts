import { overlaps } from "../lease-rules.js";
import type { LeaseRecord, LeaseResource } from "../lease-store.js";
import { SortedIndex } from "./sorted-index.js";

type BucketIndex<E> = { keys: SortedIndex<E>; prefixes: SortedIndex<E> };

/**
 * Leases by bucket, key leases by key and prefix leases by prefix, for overlap lookups that read
 * only the candidates. The index narrows; overlaps() decides, so the rule lives in one place.
 * A lease's resource never changes, so an entry stays filed where it was added.
 */
export class LeaseIndex<E extends { record: LeaseRecord }> {
  private readonly buckets = new Map<string, BucketIndex<E>>();

  add(entry: E): void {
    const { bucket, key, prefix } = entry.record;
    let index = this.buckets.get(bucket);
    if (!index) {
      index = { keys: new SortedIndex(), prefixes: new SortedIndex() };
      this.buckets.set(bucket, index);
    }
    if (key !== undefined) index.keys.add(key, entry);
    else index.prefixes.add(prefix ?? "", entry);
  }

  delete(entry: E): void {
    const { bucket, key, prefix } = entry.record;
    const index = this.buckets.get(bucket);
    if (key !== undefined) index?.keys.delete(key, entry);
    else index?.prefixes.delete(prefix ?? "", entry);
  }

  /** Entries whose resource overlaps `resource`, in no particular order. */
  overlapping(resource: LeaseResource): E[] {
    const index = this.buckets.get(resource.bucket);
    if (!index) return [];
    const candidates = new Set<E>();
    const collect = (entries: Iterable<E>) => {
      for (const entry of entries) candidates.add(entry);
    };
    if (resource.key !== undefined) {
      collect(index.keys.at(resource.key));
      collect(index.prefixes.prefixesOf(resource.key));
    } else {
      collect(index.keys.startingWith(resource.prefix));
      collect(index.prefixes.startingWith(resource.prefix));
      collect(index.prefixes.prefixesOf(resource.prefix));
    }
    return [...candidates].filter((entry) => overlaps(entry.record, resource));
  }

  /** Every entry, of one bucket or of all. */
  *entries(bucket?: string): Generator<E> {
    const indexes = bucket === undefined ? this.buckets.values() : [this.buckets.get(bucket)];
    for (const index of indexes) {
      if (!index) continue;
      yield* index.keys.values();
      yield* index.prefixes.values();
    }
  }
}
