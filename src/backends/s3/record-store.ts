import { LruMap } from "../../core/lru.js";
import type { SwapAnswer } from "../../fence/commit-port.js";
import type { EtagCache } from "./etag-cache.js";
import type { Layout } from "./layout.js";
import { type ObjectRecord, parseRecord, type ReadRecord, serializeRecord } from "./records.js";
import type { Store } from "./store.js";

/** How many keys' last known records a backend keeps (least recently used out first). */
const LATEST_CAPACITY = 10_000;

/**
 * Records in the store: reading them (through the ETag cache where a listing already knows the
 * ETag) and replacing them by compare-and-swap.
 *
 * It also remembers the last record it saw of each key (read or written by this process), so
 * that a commit can start from it without reading the record again: its store ETag is what the
 * conditional write names, so a record that changed meanwhile (another replica wrote) only costs
 * a refused write (412), after which the commit reads the record and decides again. Only a write
 * may start from it (`latest`), never a read that answers a client.
 */
export class RecordStore {
  private readonly last = new LruMap<ReadRecord>(LATEST_CAPACITY);

  constructor(
    private readonly store: Store,
    private readonly layout: Layout,
    private readonly cache: EtagCache<ObjectRecord>,
  ) {}

  /** The key's record and its ETag; null when there is none. NoSuchBucket. */
  async read(bucket: string, key: string, signal?: AbortSignal): Promise<ReadRecord | null> {
    const name = this.layout.recordName(key);
    const got = await this.store.getText(bucket, name, signal);
    if (!got) {
      this.forget(bucket, key);
      return null;
    }
    const cached = this.cache.get(bucket, name, got.etag);
    if (cached) return this.remember(bucket, { record: cached, etag: got.etag });
    const record = parseRecord(got.text, `${bucket}/${name}`);
    if (record.key !== key) throw new Error(`${bucket}/${name} is the record of another key`);
    this.cache.set(bucket, name, got.etag, record);
    return this.remember(bucket, { record, etag: got.etag });
  }

  /**
   * The last record of the key this process read or wrote, if it remembers one: possibly no
   * longer the stored one. Only for a commit's first basis, whose conditional write names it.
   */
  latest(bucket: string, key: string): ReadRecord | undefined {
    return this.last.get(`${bucket}\n${key}`);
  }

  /** Forgets the key's last record (its conditional write was refused: it is stale). */
  forget(bucket: string, key: string): void {
    this.last.delete(`${bucket}\n${key}`);
  }

  private remember(bucket: string, read: ReadRecord): ReadRecord {
    this.last.set(`${bucket}\n${read.record.key}`, read);
    return read;
  }

  /**
   * The record a listing saw as `name` with `etag`: from the cache, or read again. Null when it
   * is gone by now. The record read may be newer than the listed one; either is a fine answer.
   */
  async readListed(bucket: string, name: string, etag: string): Promise<ObjectRecord | null> {
    const cached = this.cache.get(bucket, name, etag);
    if (cached) return cached;
    const got = await this.store.getText(bucket, name);
    if (!got) return null;
    const record = parseRecord(got.text, `${bucket}/${name}`);
    this.cache.set(bucket, name, got.etag, record);
    return record;
  }

  /**
   * One conditional PUT of a record: it replaces the record whose store ETag is `version` (null:
   * creates it only if absent), sent once. "lost": the condition failed, nothing changed;
   * "unknown": no answer (a timeout, a reset, a 5xx), it may have landed. A request the store
   * certainly refused or never got throws its DomainError.
   */
  async put(bucket: string, version: string | null, next: ObjectRecord): Promise<SwapAnswer> {
    const name = this.layout.recordName(next.key);
    const put = await this.store.putConditional(bucket, name, {
      body: serializeRecord(next),
      contentType: "application/json",
      ...(version !== null ? { ifMatch: version } : { ifNoneMatch: "*" }),
    });
    if (put.outcome === "written") {
      this.cache.set(bucket, name, put.etag, next);
      if (put.etag) this.remember(bucket, { record: next, etag: put.etag });
      else this.forget(bucket, next.key);
      return { outcome: "swapped" };
    }
    this.forget(bucket, next.key);
    if (put.outcome === "condition-failed") return { outcome: "lost" };
    return { outcome: "unknown", error: put.error };
  }
}
