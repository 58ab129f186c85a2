import type { LeaseStore } from "../leases/lease-store.js";
import type { SharedWaitLine } from "../leases/wait-queue.js";
import type { SystemEpochStore } from "./system-epoch-store.js";

type Method = (...args: never[]) => unknown;

/**
 * The lease store as the gateway uses it when its token epochs live in a system bucket: nothing
 * is granted while that bucket cannot be used (503 LeaseStoreUnavailable naming it), and its
 * health check says so. A token granted then might be fine while Redis keeps its counter, but
 * could never be put above every earlier one once Redis loses it. Every way a grant takes a token
 * is guarded: tryAcquire, breakLease (a fence token) and the shared wait line's grant
 * (tryAcquireAsHead); everything else (renewals, releases, reads) goes through unchanged.
 */
export function grantsNeedEpochs(store: LeaseStore, epochs: SystemEpochStore): LeaseStore {
  const guarded =
    (method: Method, self: object) =>
    async (...args: never[]) => {
      await epochs.ready();
      return method.apply(self, args);
    };
  return overriding(store, {
    tryAcquire: guarded,
    breakLease: guarded,
    ping: guarded,
    sharedWaitLine: (method, self) => () =>
      overriding(method.apply(self, []) as SharedWaitLine, { tryAcquireAsHead: guarded }),
  });
}

/** `target` with some of its methods replaced by what `overrides` makes of them; the rest bound to it. */
function overriding<T extends object>(
  target: T,
  overrides: Record<string, (method: Method, self: T) => Method>,
): T {
  return new Proxy(target, {
    get(self, name) {
      const value: unknown = Reflect.get(self, name, self);
      if (typeof value !== "function") return value;
      const override = typeof name === "string" ? overrides[name] : undefined;
      return override ? override(value as Method, self) : value.bind(self);
    },
  });
}
