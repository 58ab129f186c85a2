import type { MemoryDomain } from "../../core/tx.js";

/**
 * Sets `map[key]` to `value` (deletes it for undefined) and registers how to take that back with
 * the domain's current step, so a step that throws later (in the commit's `atomic`, or in
 * another component sharing the domain) leaves the map exactly as it was.
 */
export function change<K, V>(domain: MemoryDomain, map: Map<K, V>, key: K, value: V | undefined): void {
  const had = map.has(key);
  const previous = map.get(key);
  if (value === undefined) map.delete(key);
  else map.set(key, value);
  domain.changed(() => {
    if (had) map.set(key, previous as V);
    else map.delete(key);
  });
}
