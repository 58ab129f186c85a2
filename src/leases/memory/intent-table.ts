import type { CommitIntentRef, LeaseResource } from "../lease-store.js";
import { SortedIndex } from "./sorted-index.js";

/** A recorded commit intent; leaseId and token are null for an unfenced write. */
export type StoredIntent = CommitIntentRef & {
  leaseId: string | null;
  token: number | null;
  createdAt: number;
};

/**
 * Commits in flight, by id and by object, so that a grant finds the intents under its resource
 * without reading the others. Every change registers its undo with `changed` (MemoryDomain).
 */
export class IntentTable {
  private readonly byId = new Map<string, StoredIntent>();
  private readonly byBucket = new Map<string, SortedIndex<StoredIntent>>();

  constructor(private readonly changed: (undo: () => void) => void) {}

  add(intent: StoredIntent): void {
    this.file(intent);
    this.changed(() => this.unfile(intent));
  }

  delete(intentId: string): void {
    const intent = this.byId.get(intentId);
    if (!intent) return;
    this.unfile(intent);
    this.changed(() => this.file(intent));
  }

  /** Intents on objects the resource covers. */
  under(resource: LeaseResource): CommitIntentRef[] {
    const index = this.byBucket.get(resource.bucket);
    if (!index) return [];
    const found = resource.key !== undefined ? index.at(resource.key) : index.startingWith(resource.prefix);
    return [...found].map(({ intentId, bucket, key }) => ({ intentId, bucket, key }));
  }

  private file(intent: StoredIntent): void {
    this.byId.set(intent.intentId, intent);
    let index = this.byBucket.get(intent.bucket);
    if (!index) {
      index = new SortedIndex();
      this.byBucket.set(intent.bucket, index);
    }
    index.add(intent.key, intent);
  }

  private unfile(intent: StoredIntent): void {
    this.byId.delete(intent.intentId);
    this.byBucket.get(intent.bucket)?.delete(intent.key, intent);
  }
}
