import type { Clock } from "../../core/clock.js";
import { DomainError } from "../../core/errors.js";
import type { Logger } from "../../core/log.js";
import type { CapabilityGate } from "./capability.js";
import type { Layout } from "./layout.js";
import { sleep } from "./map-limit.js";
import type { S3CommitHookInfo, S3CommitHooks } from "./options.js";
import type { RecordStore } from "./record-store.js";
import { newNonce, type ObjectRecord, type ReadRecord } from "./records.js";
import type { Store, StoredObject } from "./store.js";
import { noSuchBucket } from "./store-errors.js";

/** What a commit found: the record, and the plain object at the key when it was looked up. */
export type Current = {
  read: ReadRecord | null;
  record: ObjectRecord | null;
  /** Looked up only when the record is absent or "plain", and the commit asked for it. */
  plain: StoredObject | null;
  /** The live object's ETag: the record's version, else the plain object's (when looked up). */
  liveEtag: string | null;
};

/** A commit's decision on what it found: the record to write and the result once written, or done. */
export type Plan<R> = { write: ObjectRecord; result: R } | { done: R };

export type CommitOptions = {
  /** Look the plain object up when the record is absent or "plain" (for conditions, existence). */
  plain: boolean;
  /** NoSuchBucket when the bucket is deleted for fencegate (raiseHighestToken writes there anyway). */
  checkBucket: boolean;
  /** A last check before the record PUT; throws to refuse. */
  guard?: () => void;
};

export type Committed<R> = { result: R; replaced: ObjectRecord | null };

/** Enough passes for dozens of writers racing on one key; each lost pass means another committed. */
const MAX_COMMIT_ATTEMPTS = 64;

/** Everything the backend and its multipart store share. */
export class S3Context {
  closed = false;

  constructor(
    readonly store: Store,
    readonly layout: Layout,
    readonly records: RecordStore,
    readonly gate: CapabilityGate,
    readonly clock: Clock,
    readonly hooks: S3CommitHooks | undefined,
    readonly log: Logger | undefined,
  ) {}

  assertOpen(): void {
    if (this.closed) throw new DomainError("ServiceUnavailable", "the s3 backend is closed");
  }

  /** Whether the bucket is deleted for fencegate but kept for its HCTs. NoSuchBucket when it is gone. */
  async softDeleted(bucket: string, signal?: AbortSignal): Promise<boolean> {
    return (await this.store.getText(bucket, this.layout.deletedMarker, signal)) !== null;
  }

  /** NoSuchBucket unless the bucket exists and is not deleted for fencegate. */
  async requireBucket(bucket: string, signal?: AbortSignal): Promise<void> {
    if (await this.softDeleted(bucket, signal)) throw noSuchBucket(bucket);
  }

  /** The key's record and, when asked and needed, its plain object. */
  async current(
    bucket: string,
    key: string,
    opts: { plain: boolean; checkBucket: boolean; signal?: AbortSignal },
  ): Promise<Current> {
    const [read, deleted] = await Promise.all([
      this.records.read(bucket, key, opts.signal),
      opts.checkBucket ? this.softDeleted(bucket, opts.signal) : false,
    ]);
    if (deleted) throw noSuchBucket(bucket);
    const record = read?.record ?? null;
    const lookPlain = opts.plain && (record === null || record.state === "plain");
    const plain = lookPlain ? await this.store.head(bucket, key, opts.signal) : null;
    const liveEtag = record?.state === "live" && record.live ? record.live.etag : (plain?.etag ?? null);
    return { read, record, plain, liveEtag };
  }

  /**
   * The compare-and-swap loop of every commit: read the record (the commit point), let `plan`
   * apply the HCT rule and the conditions to it (throwing a refusal, or deciding there is nothing
   * to write), then replace the record only if it is still the one read. A lost race reads again,
   * after a short random pause, and decides again.
   */
  async commit<R>(
    info: Omit<S3CommitHookInfo, "attempt">,
    opts: CommitOptions,
    plan: (current: Current) => Plan<R>,
  ): Promise<Committed<R>> {
    const { bucket, key } = info;
    for (let attempt = 1; attempt <= MAX_COMMIT_ATTEMPTS; attempt++) {
      const hook = (step: Parameters<S3CommitHooks>[0]) => this.hooks?.(step, { ...info, attempt });
      const current = await this.current(bucket, key, opts);
      await hook("record-read");
      const decided = plan(current);
      if ("done" in decided) return { result: decided.done, replaced: null };
      opts.guard?.();
      await hook("before-record-put");
      if ((await this.records.swap(bucket, current.read, decided.write)) === "written") {
        // Committed: nothing after this point may turn the write into a failure.
        await Promise.resolve(hook("after-record-put")).catch((err) =>
          this.log?.warn({ err, bucket, key }, "s3 backend: a commit hook failed after the commit"),
        );
        return { result: decided.result, replaced: current.record };
      }
      await sleep(Math.random() * Math.min(100, 2 ** Math.min(attempt, 7)));
    }
    throw new DomainError(
      "SlowDown",
      `too many concurrent writes to ${bucket}/${key}: the write was not committed; please retry`,
      { retryAfterSeconds: 1 },
    );
  }

  /** A new record for `key`; `nonce` makes its ETag unique. */
  newRecord(key: string, fields: Pick<ObjectRecord, "hct" | "state" | "live">): ObjectRecord {
    const record: ObjectRecord = {
      v: 1,
      key,
      hct: fields.hct,
      nonce: newNonce(),
      state: fields.state,
      written: this.clock(),
    };
    if (fields.live) record.live = fields.live;
    return record;
  }

  /** Best effort: a blob left behind is garbage that collectGarbage removes. */
  async removeBlob(bucket: string, blob: string): Promise<void> {
    try {
      await this.store.delete(bucket, this.layout.blobName(blob));
    } catch (err) {
      this.log?.warn({ err, bucket, blob }, "s3 backend: removing a blob failed; the collector will");
    }
  }
}
