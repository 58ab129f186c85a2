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
