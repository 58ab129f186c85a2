import { compareKeys, ListPage, type SeekFrom, type SortedListResult } from "../list-helper.js";
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
  const page = new ListPage<E>(input);
  if (page.start === null) return page.finish();
  const cursor = open(page.start);
  try {
    for (;;) {
      const entry = await cursor.next();
      const step = entry === undefined ? "done" : page.offer(entry);
      if (step === "done") break;
      if (step !== "next") await cursor.skipTo(step);
    }
  } finally {
    await cursor.close();
  }
  return page.finish();
}

/** Whether `key` is at or after `from` in S3 key order. */
export const reached = (key: string, from: SeekFrom): boolean => {
  const c = compareKeys(key, from.key);
  return from.inclusive ? c >= 0 : c > 0;
};
