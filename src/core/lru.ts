/** A map of at most `capacity` entries; reading or writing one makes it the last to go. */
export class LruMap<V> {
  private readonly entries = new Map<string, V>();

  constructor(private readonly capacity: number) {}

  get(id: string): V | undefined {
    const hit = this.entries.get(id);
    if (hit !== undefined) {
      this.entries.delete(id);
      this.entries.set(id, hit);
    }
    return hit;
  }

  set(id: string, value: V): void {
    this.entries.delete(id);
    this.entries.set(id, value);
    if (this.entries.size > this.capacity) {
      const oldest = this.entries.keys().next().value;
      if (oldest !== undefined) this.entries.delete(oldest);
    }
  }

  delete(id: string): void {
    this.entries.delete(id);
  }
}
