import { ListPage, type SeekFrom, type SortedListResult } from "../list-helper.js";
import type { ListInput } from "../storage-backend.js";

/** Like list-helper's SeekFn, for a source read over the network: entries arrive asynchronously. */
type AsyncSeekFn<E extends { key: string }> = (from: SeekFrom) => AsyncIterable<E>;

/**
 * list-helper's listSorted over an asynchronous seekable source, with the same S3 rules
 * (ListPage). Each seek's iterator is closed (return()) as soon as the listing is done with it.
 */
export async function listSortedAsync<E extends { key: string }>(
  input: Omit<ListInput, "bucket">,
  seek: AsyncSeekFn<E>,
): Promise<SortedListResult<E>> {
  const page = new ListPage<E>(input);
  let from = page.start;
  scan: while (from !== null) {
    const current: SeekFrom = from;
    from = null;
    for await (const entry of seek(current)) {
      const step = page.offer(entry);
      if (step === "next") continue;
      if (step !== "done") from = step;
      continue scan;
    }
  }
  return page.finish();
}
