/**
 * Values filed under strings (object keys or lease prefixes), the strings kept sorted so that a
 * lookup never walks the whole index: by exact string, by prefix (every string starting with a
 * prefix forms one contiguous run, in any lexicographic order, here UTF-16 code units), and the
 * stored strings that are prefixes of a given one (found by probing each of its prefixes).
 */
export class SortedIndex<V> {
  private readonly byString = new Map<string, Set<V>>();
  private readonly sorted: string[] = [];

  add(s: string, value: V): void {
    let values = this.byString.get(s);
    if (!values) {
      values = new Set();
      this.byString.set(s, values);
      this.sorted.splice(this.lowerBound(s), 0, s);
    }
    values.add(value);
  }

  delete(s: string, value: V): void {
    const values = this.byString.get(s);
    if (!values?.delete(value) || values.size > 0) return;
    this.byString.delete(s);
    this.sorted.splice(this.lowerBound(s), 1);
  }

  /** Values filed under exactly `s`. */
  at(s: string): Iterable<V> {
    return this.byString.get(s) ?? [];
  }

  /** Values filed under a string that starts with `prefix` (`prefix` itself included). */
  *startingWith(prefix: string): Generator<V> {
    for (let i = this.lowerBound(prefix); i < this.sorted.length; i++) {
      const s = this.sorted[i]!;
      if (!s.startsWith(prefix)) return;
      yield* this.byString.get(s)!;
    }
  }

  /** Values filed under a string that `s` starts with (`s` itself included). */
  *prefixesOf(s: string): Generator<V> {
    if (this.byString.size === 0) return;
    for (let n = 0; n <= s.length; n++) {
      const values = this.byString.get(s.slice(0, n));
      if (values) yield* values;
    }
  }

  *values(): Generator<V> {
    for (const values of this.byString.values()) yield* values;
  }

  /** The first position whose string is not below `s`. */
  private lowerBound(s: string): number {
    let lo = 0;
    let hi = this.sorted.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.sorted[mid]! < s) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}
