import type { SystemRecords } from "../backends/storage-backend.js";
import { DomainError } from "../core/errors.js";
import { type EpochStore, MAX_EPOCH } from "../leases/redis-shared/epoch-store.js";
import { type EpochFloor, highestEpochOf, legacyRecordFloor, localDirFloor } from "./epoch-floors.js";

/** Where the epoch records live in the system bucket, under the backend's meta prefix. */
const EPOCH_RECORDS = "epochs/";

const DIGITS = String(MAX_EPOCH).length;

/** Zero-padded, so that the store lists the records in the order of their epochs. */
export const epochRecordName = (epoch: number): string =>
  `${EPOCH_RECORDS}${String(epoch).padStart(DIGITS, "0")}`;

type SystemEpochStoreOptions = {
  records: SystemRecords;
  /**
   * Older configurations (leaseStore.epochs.prefix): the prefix under which older versions kept
   * epochs as gateway objects in the same bucket. They count, deleted ones included.
   */
  legacyPrefix?: string;
  /** Epoch directories older versions kept in this gateway's data directory: counted, never written. */
  localDirs?: readonly string[];
  /** After the bucket could not be opened, ready() tries again at most this often. Default 5 s. */
  retryMs?: number;
};

export type SystemEpochStore = EpochStore & {
  /**
   * Resolves once the system bucket is usable (created when missing, then listed). Otherwise
   * throws LeaseStoreUnavailable naming the bucket and FENCEGATE_SYSTEM_BUCKET; a later call
   * tries again once `retryMs` has passed.
   */
  ready(): Promise<void>;
};

/**
 * Token epochs as records of the backend's system bucket (SystemRecords), shared by every replica
 * of a deployment: `<meta>epochs/<epoch, zero-padded>`, each created once by a conditional create
 * that exactly one replica wins, and never replaced or removed. No S3 request can reach them: the
 * gateway reserves the bucket's name (routing/routed-backend.ts).
 *
 * `highest()` counts every record name present, whatever its content, and also the epochs older
 * versions left: their gateway objects (tombstones of deleted ones included) and their epoch
 * directories in the data directory. So a new epoch is above every epoch ever used, across an
 * upgrade too.
 */
export function createSystemEpochStore(opts: SystemEpochStoreOptions): SystemEpochStore {
  const { records } = opts;
  const retryMs = opts.retryMs ?? 5_000;
  const floors: EpochFloor[] = [
    async () => highestEpochOf(await records.list(EPOCH_RECORDS), EPOCH_RECORDS),
    ...(opts.legacyPrefix !== undefined ? [legacyRecordFloor(records, opts.legacyPrefix)] : []),
    ...(opts.localDirs ?? []).map(localDirFloor),
  ];
  const unusable = (e: unknown) =>
    new DomainError(
      "LeaseStoreUnavailable",
      `token epochs live in the ${records.where}, which cannot be used (${(e as Error).message}): give this gateway access to it, or name another bucket with FENCEGATE_SYSTEM_BUCKET (backend.systemBucket)`,
      {},
      { cause: e },
    );
  const failing = (what: string) => (e: unknown) => {
    throw new DomainError(
      "LeaseStoreUnavailable",
      `${what} the ${records.where}: ${(e as Error).message}`,
      {},
      { cause: e },
    );
  };

  let opened = false;
  let opening: Promise<void> | null = null;
  let failure: { error: DomainError; at: number } | null = null;
  return {
    kind: `system:${records.where}`,
    async ready() {
      if (opened) return;
      if (failure && performance.now() - failure.at < retryMs) throw failure.error;
      opening ??= records
        .open()
        .then(
          () => {
            opened = true;
            failure = null;
          },
          (e: unknown) => {
            failure = { error: unusable(e), at: performance.now() };
            throw failure.error;
          },
        )
        .finally(() => {
          opening = null;
        });
      return opening;
    },
    async highest() {
      const found = await Promise.all(floors.map((floor) => floor())).catch(
        failing("cannot read the token epochs in"),
      );
      return Math.max(-1, ...found);
    },
    async create(epoch) {
      const body = Buffer.from(`${JSON.stringify({ epoch, createdAt: new Date().toISOString() })}\n`);
      return records
        .create(epochRecordName(epoch), body)
        .catch(failing(`cannot create token epoch ${epoch} in`));
    },
  };
}
