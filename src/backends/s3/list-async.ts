import { prefixUpperBound } from "../../core/prefix-range.js";
import { compareKeys, type SeekFrom, type SortedListResult } from "../list-helper.js";
import type { ListInput } from "../storage-backend.js";

/** Like list-helper's SeekFn, for a source read over the network: entries arrive asynchronously. */
export type AsyncSeekFn<E extends { key: string }> = (from: SeekFrom) => AsyncIterable<E>;

/**
 * list-helper's listSorted over an asynchronous seekable source, with the same S3 semantics:
 * prefix, delimiter, startAfter strictly after, maxKeys counting common prefixes (0: an empty,
 * untruncated page), a common prefix returned once and skipped with a new seek past its upper
 * bound (and not returned again when it contains startAfter), and an exact isTruncated.
 * Each seek's iterator is closed (return()) as soon as the listing is done with it.
 */
export async function listSortedAsync<E extends { key: string }>(
  input: Omit<ListInput, "bucket">,
  seek: AsyncSeekFn<E>,
): Promise<SortedListResult<E>> {
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
    for await (const entry of seek(current)) {
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
