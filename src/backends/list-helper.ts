import { prefixUpperBound } from "../core/prefix-range.js";
import type { ListInput } from "./storage-backend.js";

/**
 * S3 listing semantics over any source that can seek into keys sorted in S3 order
 * (UTF-8 byte order, which is the same as Unicode code point order).
 */

/**
 * Compares in code point order (= UTF-8 byte order). JS `<` compares UTF-16 code units,
 * which puts U+E000..U+FFFF after supplementary characters; S3 does the opposite.
 */
export function compareKeys(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x === y) continue;
    if (x >= 0xd800 && y >= 0xd800) {
      // Move surrogates (code points >= U+10000) above U+E000..U+FFFF.
      x = x >= 0xe000 ? x - 0x800 : x + 0x2000;
      y = y >= 0xe000 ? y - 0x800 : y + 0x2000;
    }
    return x < y ? -1 : 1;
  }
  return a.length === b.length ? 0 : a.length < b.length ? -1 : 1;
}

/**
 * Entries of `sorted` from the first one `reached` accepts, read lazily: a listing stops (and
 * seeks past common prefixes) without walking the rest. `reached` must be false for a leading
 * run of entries and true for all that follow.
 */
export function* seekSorted<E>(sorted: readonly E[], reached: (entry: E) => boolean): Generator<E> {
  let low = 0;
  let high = sorted.length;
  while (low < high) {
    const mid = (low + high) >>> 1;
    if (reached(sorted[mid]!)) high = mid;
    else low = mid + 1;
  }
  for (let i = low; i < sorted.length; i++) yield sorted[i]!;
}

/** Where a seek starts: at `key` (inclusive) or just after it. */
export type SeekFrom = { key: string; inclusive: boolean };

/**
 * Yields entries in S3 key order starting at `from`. It is read lazily and abandoned
 * (iterator `return()`) as soon as the listing has what it needs.
 */
export type SeekFn<E extends { key: string }> = (from: SeekFrom) => Iterable<E>;

export type SortedListResult<E> = {
  objects: E[];
  commonPrefixes: string[];
  isTruncated: boolean;
  nextStartAfter?: string;
};

/**
 * S3 ListObjects' rules, fed the entries of a sorted source one at a time: prefix, delimiter,
 * startAfter (strictly after), maxKeys (a common prefix counts as one; 0 gives an empty,
 * untruncated page). A common prefix is returned once: keys under it are skipped with a new seek
 * to its upper bound, and a common prefix that contains `startAfter` (e.g. `nextStartAfter` of
 * the previous page) is not returned again. isTruncated is exact: true only when something
 * follows. nextStartAfter is the last key or common prefix returned (absent on an empty page).
 * The synchronous, asynchronous and cursor listings below only read entries and obey `offer`.
 */
export class ListPage<E extends { key: string }> {
  private readonly prefix: string;
  private readonly delimiter: string | undefined;
  private readonly result: SortedListResult<E> = { objects: [], commonPrefixes: [], isTruncated: false };
  private count = 0;
  private last: string | undefined;
  /** Where the first seek starts; null when nothing is to be read (maxKeys 0). */
  readonly start: SeekFrom | null;

  constructor(private readonly input: Omit<ListInput, "bucket">) {
    this.prefix = input.prefix ?? "";
    this.delimiter = input.delimiter ? input.delimiter : undefined;
    const { startAfter } = input;
    this.start =
      input.maxKeys <= 0
        ? null
        : startAfter !== undefined && compareKeys(startAfter, this.prefix) >= 0
          ? { key: startAfter, inclusive: false }
          : { key: this.prefix, inclusive: true };
  }

  /**
   * Takes the next entry in key order: "next" to read on, a SeekFrom to continue from (past a
   * common prefix), or "done" (the page is full, or the prefix is left behind).
   */
  offer(entry: E): "next" | "done" | SeekFrom {
    // Keys that do not start with the prefix sort after all those that do.
    if (!entry.key.startsWith(this.prefix)) return "done";
    const at = this.delimiter === undefined ? -1 : entry.key.indexOf(this.delimiter, this.prefix.length);
    if (at >= 0) {
      const commonPrefix = entry.key.slice(0, at + this.delimiter!.length);
      const { startAfter } = this.input;
      if (startAfter === undefined || !startAfter.startsWith(commonPrefix)) {
        if (!this.take()) return "done";
        this.result.commonPrefixes.push(commonPrefix);
        this.last = commonPrefix;
      }
      const next = prefixUpperBound(commonPrefix);
      return next === null ? "done" : { key: next, inclusive: true };
    }
    if (!this.take()) return "done";
    this.result.objects.push(entry);
    this.last = entry.key;
    return "next";
  }

  finish(): SortedListResult<E> {
    if (this.last !== undefined) this.result.nextStartAfter = this.last;
    return this.result;
  }

  /** Counts one more entry; false (and truncated) when the page is already full. */
  private take(): boolean {
    if (this.count === this.input.maxKeys) {
      this.result.isTruncated = true;
      return false;
    }
    this.count++;
    return true;
  }
}

/** ListPage over a seekable sorted source, read synchronously: the page is one snapshot. */
export function listSorted<E extends { key: string }>(
  input: Omit<ListInput, "bucket">,
  seek: SeekFn<E>,
): SortedListResult<E> {
  const page = new ListPage<E>(input);
  let from = page.start;
  scan: while (from !== null) {
    const current: SeekFrom = from;
    from = null;
    for (const entry of seek(current)) {
      const step = page.offer(entry);
      if (step === "next") continue;
      if (step !== "done") from = step;
      continue scan;
    }
  }
  return page.finish();
}
