/**
 * Where the epochs of Redis lease tokens live, durably and outside Redis. A token is
 * epoch × 2^32 + counter: the counter lives in Redis and may be lost with it (a restart without
 * persistence, a failover to a replica that missed writes, an eviction); the epoch may not. Each
 * epoch is a record created once, by a conditional create, so that two gateways never both
 * believe they installed the same new epoch.
 *
 * Implementations: a directory of the data directory for one gateway on the fs backend
 * (file-epoch-store.ts), records of the system bucket of a remote backend, which every replica
 * shares (src/epochs/). Which one is decided once, at start (src/server/lease-components.ts).
 */
export interface EpochStore {
  readonly kind: string;
  /** The highest epoch ever created, or -1 when none was. Throws when it cannot be read. */
  highest(): Promise<number>;
  /** Creates the record of `epoch`; false when it exists already. Resolves once it is durable. */
  create(epoch: number): Promise<boolean>;
}

/** Counter values per epoch: tokens stay below 2^53 (Number.MAX_SAFE_INTEGER) for 2^21 epochs. */
export const EPOCH_SPAN = 2 ** 32;
export const MAX_EPOCH = 2 ** 21 - 1;
