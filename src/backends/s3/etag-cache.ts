import { LruMap } from "../../core/lru.js";

/**
 * Parsed JSON objects (records, upload and part manifests) by store ETag, least recently used
 * out first. Every such object fencegate writes holds a fresh nonce or id, so an ETag names one
 * write's bytes forever: an entry never goes stale, on any replica. The bucket and the object
 * name are part of the cache key all the same: equal bytes elsewhere are another object.
 */
export class EtagCache<T> {
  private readonly entries: LruMap<T>;

  constructor(capacity = 10_000) {
    this.entries = new LruMap(capacity);
  }

  get(bucket: string, name: string, etag: string): T | undefined {
    return this.entries.get(`${bucket}\n${name}\n${etag}`);
  }

  set(bucket: string, name: string, etag: string, value: T): void {
    if (etag) this.entries.set(`${bucket}\n${name}\n${etag}`, value);
  }
}
