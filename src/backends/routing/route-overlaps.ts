import type { StoreIdentity } from "./store-identity.js";

/** Where a configured gateway bucket's objects are stored. */
type RouteLocation = {
  /** The gateway bucket. */
  name: string;
  /** The configured backend's name ("default" for the `backend` section). */
  backend: string;
  store: StoreIdentity;
  /** The bucket or container in the store. */
  target: string;
  /** The key prefix inside the target ("" for all of it). */
  prefix: string;
};

/** Two gateway buckets through which one stored object is reachable. */
type RouteOverlap = { first: RouteLocation; second: RouteLocation; message: string };

/**
 * Every pair of configured gateway buckets that reach the same stored objects: the same store
 * (one backend, or two backends that are one store), the same target, and prefixes of which one
 * starts with the other (so the longer one's keys are under both). Leases are taken on gateway
 * names, so leases on the two names would not exclude each other over those objects.
 */
export function routeOverlaps(routes: readonly RouteLocation[]): RouteOverlap[] {
  const overlaps: RouteOverlap[] = [];
  for (let i = 0; i < routes.length; i++) {
    for (let j = i + 1; j < routes.length; j++) {
      const a = routes[i]!;
      const b = routes[j]!;
      if (a.store.key !== b.store.key || a.target !== b.target) continue;
      if (!a.prefix.startsWith(b.prefix) && !b.prefix.startsWith(a.prefix)) continue;
      overlaps.push({ first: a, second: b, message: describeOverlap(a, b) });
    }
  }
  return overlaps;
}

function describeOverlap(a: RouteLocation, b: RouteLocation): string {
  const shared = a.prefix.length >= b.prefix.length ? a.prefix : b.prefix;
  const keys = shared === "" ? `every key of "${a.target}"` : `the keys under "${shared}" of "${a.target}"`;
  const backends =
    a.backend === b.backend
      ? `backend "${a.backend}"`
      : `backends "${a.backend}" and "${b.backend}", which are one store`;
  return (
    `gateway buckets "${a.name}" and "${b.name}" reach the same stored objects: ${keys} in ` +
    `${a.store.label} (${backends}); leases on one name would not exclude writes through the ` +
    `other. Give each stored location one gateway bucket (prefixes that do not start with one another).`
  );
}
