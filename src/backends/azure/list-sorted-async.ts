import { prefixUpperBound } from "../../core/prefix-range.js";
import { compareKeys, type SeekFrom, type SortedListResult } from "../list-helper.js";
import type { ListInput } from "../storage-backend.js";

/**
 * listSorted (src/backends/list-helper.ts) over an asynchronous source: the same S3 semantics
 * (prefix, delimiter, startAfter strictly after, maxKeys counting common prefixes, exact
 * isTruncated), reading a cursor that only ever moves forward. Skipping the keys under a common
 * prefix is a `skipTo` on the same cursor, so a remote listing is read once from its start, not
 * re-opened per common prefix.
 */
export type AsyncCursor<E> = {
  /** The next entry in S3 key order, or undefined at the end. */
  next(): Promise<E | undefined>;
  /** Moves forward: entries before `from` are skipped. Never moves backward. */
  skipTo(from: SeekFrom): Promise<void>;
  close(): Promise<void>;
};

export async function listSortedAsync<E extends { key: string }>(
  input: Omit<ListInput, "bucket">,
  open: (from: SeekFrom) => AsyncCursor<E>,
): Promise<SortedListResult<E>> {
  const prefix = input.prefix ?? "";
  const delimiter = input.delimiter ? input.delimiter : undefined;
  const { startAfter } = input;
  const result: SortedListResult<E> = { objects: [], commonPrefixes: [], isTruncated: false };
  if (input.maxKeys <= 0) return result;

  const from: SeekFrom =
    startAfter !== undefined && compareKeys(startAfter, prefix) >= 0
      ? { key: startAfter, inclusive: false }
      : { key: prefix, inclusive: true };
  let count = 0;
  let last: string | undefined;
  const cursor = open(from);
  try {
    for (;;) {
      const entry = await cursor.next();
      // Keys that do not start with the prefix sort after all those that do.
      if (entry === undefined || !entry.key.startsWith(prefix)) break;
      const at = delimiter === undefined ? -1 : entry.key.indexOf(delimiter, prefix.length);
      if (at >= 0) {
        const commonPrefix = entry.key.slice(0, at + delimiter!.length);
        if (startAfter === undefined || !startAfter.startsWith(commonPrefix)) {
          if (count === input.maxKeys) {
            result.isTruncated = true;
            break;
          }
          result.commonPrefixes.push(commonPrefix);
          count++;
          last = commonPrefix;
        }
        const next = prefixUpperBound(commonPrefix);
        if (next === null) break;
        await cursor.skipTo({ key: next, inclusive: true });
        continue;
      }
      if (count === input.maxKeys) {
        result.isTruncated = true;
        break;
      }
      result.objects.push(entry);
      count++;
      last = entry.key;
    }
  } finally {
    await cursor.close();
  }
  if (last !== undefined) result.nextStartAfter = last;
  return result;
}

/** Whether `key` is at or after `from` in S3 key order. */
export const reached = (key: string, from: SeekFrom): boolean => {
  const c = compareKeys(key, from.key);
  return from.inclusive ? c >= 0 : c > 0;
};
