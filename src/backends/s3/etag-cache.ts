/**
 * Parsed JSON objects (records, upload and part manifests) by store ETag, least recently used
 * out first. Every such object fencegate writes holds a fresh nonce or id, so an ETag names one
 * write's bytes forever: an entry never goes stale, on any replica. The bucket and the object
 * name are part of the cache key all the same: equal bytes elsewhere are another object.
 */
export class EtagCache<T> {
  private readonly entries = new Map<string, T>();

  constructor(private readonly capacity = 10_000) {}

  get(bucket: string, name: string, etag: string): T | undefined {
    const id = `${bucket}\n${name}\n${etag}`;
    const hit = this.entries.get(id);
    if (hit !== undefined) {
      this.entries.delete(id);
      this.entries.set(id, hit);
    }
    return hit;
  }

  set(bucket: string, name: string, etag: string, value: T): void {
    if (!etag) return;
    const id = `${bucket}\n${name}\n${etag}`;
    this.entries.delete(id);
    this.entries.set(id, value);
    if (this.entries.size > this.capacity) {
      const oldest = this.entries.keys().next().value;
      if (oldest !== undefined) this.entries.delete(oldest);
    }
  }
}
