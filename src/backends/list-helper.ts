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
 * S3 ListObjects over a seekable sorted source: prefix, delimiter, startAfter (strictly
 * after), maxKeys (a common prefix counts as one; 0 gives an empty, untruncated page).
 * A common prefix is returned once: keys under it are skipped with a new seek to its upper
 * bound, and a common prefix that contains `startAfter` (e.g. `nextStartAfter` of the previous
 * page) is not returned again. isTruncated is exact: true only when something follows.
 * nextStartAfter is the last key or common prefix returned (absent on an empty page).
 */
export function listSorted<E extends { key: string }>(
  input: Omit<ListInput, "bucket">,
  seek: SeekFn<E>,
): SortedListResult<E> {
  const prefix = input.prefix ?? "";
  const delimiter = input.delimiter ? input.delimiter : undefined;
  const { startAfter } = input;
  const result: SortedListResult<E> = { objects: [], commonPrefixes: [], isTruncated: false };
  if (input.maxKeys <= 0) return result;

  let from: SeekFrom | null =
    startAfter !== undefined && compareKeys(startAfter, prefix) >= 0
      ? { key: startAfter, inclusive: false }
      : { key: prefix, inclusive: true };
  let count = 0;
  let last: string | undefined;

  scan: while (from !== null) {
    const current: SeekFrom = from;
    from = null;
    for (const entry of seek(current)) {
      // Keys that do not start with the prefix sort after all those that do.
      if (!entry.key.startsWith(prefix)) break scan;
      const at = delimiter === undefined ? -1 : entry.key.indexOf(delimiter, prefix.length);
      if (at >= 0) {
        const commonPrefix = entry.key.slice(0, at + delimiter!.length);
        if (startAfter === undefined || !startAfter.startsWith(commonPrefix)) {
          if (count === input.maxKeys) {
            result.isTruncated = true;
            break scan;
          }
          result.commonPrefixes.push(commonPrefix);
          count++;
          last = commonPrefix;
        }
        const next = prefixUpperBound(commonPrefix);
        if (next !== null) from = { key: next, inclusive: true };
        continue scan;
      }
      if (count === input.maxKeys) {
        result.isTruncated = true;
        break scan;
      }
      result.objects.push(entry);
      count++;
      last = entry.key;
    }
  }
  if (last !== undefined) result.nextStartAfter = last;
  return result;
}
