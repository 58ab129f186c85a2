import { DomainError } from "../../core/errors.js";
import { ABANDONED_DELETION_MS, inProgress } from "../../fence/bucket-deletion.js";
import { runCommit } from "../../fence/commit-driver.js";
import {
  type BucketMarker,
  type BucketPhase,
  type BucketPort,
  type CasNext,
  type CasPort,
  type ObjectRef,
  type Observed,
  type ReadOptions,
  type SwapAnswer,
  type SwapOptions,
  type TransactionLog,
  WRITE_HISTORY,
} from "../../fence/commit-port.js";
import { noSuchBucket } from "../backend-errors.js";
import { parseMarker } from "./bucket-marker.js";
import type { S3Context } from "./context.js";
import { blobTime } from "./layout.js";
import {
  type LiveVersion,
  liveOf,
  newNonce,
  type ObjectRecord,
  type ReadRecord,
  writesOf,
} from "./records.js";
import type { UploadStore } from "./upload-store.js";

/**
 * The S3 backend as the commit driver sees it (src/fence/commit-port.ts). An object's state is
 * its record (`<m>r/<key>`, see records.ts): its store ETag is the compare-and-swap version (every
 * record holds a fresh nonce, so no ETag is ever seen twice), its `w`/`h` the write history.
 * A key without a record is the plain object at the key, or nothing.
 *
 * The bucket's state is the marker `<m>deleted` (absent: a live bucket; a JSON
 * {phase, since, nonce}; the bare {deleted} of older versions: deleted), replaced by
 * compare-and-swap like a record. A write reads it after the record (CasPort.checkBucket).
 */

/** What a read kept of the record, for the swap that names it. */
type Held = { read: ReadRecord | null; plainEtag: string | null };

export class S3ObjectPort implements CasPort<LiveVersion>, BucketPort {
  readonly kind = "cas";

  constructor(
    private readonly ctx: S3Context,
    private readonly uploads: UploadStore,
    private readonly empty: (bucket: string) => Promise<boolean>,
  ) {}

  async read(ref: ObjectRef, opts: ReadOptions): Promise<Observed> {
    const { bucket, key } = ref;
    // The record this process last saw, if the caller may start from it (Observed.cached). Not
    // a "plain" one when the plain object's ETag is wanted: that needs a look at the store.
    const latest = opts.cached ? this.ctx.records.latest(bucket, key) : undefined;
    const usable = latest && !(opts.etag && latest.record.state === "plain") ? latest : undefined;
    const read = usable ?? (await this.ctx.records.read(bucket, key, opts.signal));
    const record = read?.record ?? null;
    const lookPlain = opts.etag && (record === null || record.state === "plain");
    const plain = lookPlain ? await this.ctx.store.head(bucket, key, opts.signal) : null;
    await this.ctx.hooks?.("record-read", { op: "put", bucket, key, attempt: opts.attempt });
    const observed = observedOf(read, plain?.etag ?? null, plain !== null);
    return usable ? { ...observed, cached: true } : observed;
  }

  async checkBucket(bucket: string, signal?: AbortSignal): Promise<void> {
    await this.requireWritable(bucket, signal);
  }

  async swap(
    ref: ObjectRef,
    from: Observed,
    next: CasNext<LiveVersion>,
    opts: SwapOptions,
  ): Promise<SwapAnswer> {
    const previous = (from.raw as Held).read?.record ?? null;
    const record = this.nextRecord(ref.key, previous, next);
    const info = { op: hookOp(opts.op), bucket: ref.bucket, key: ref.key, attempt: opts.attempt };
    await this.ctx.hooks?.("before-record-put", info);
    const answer = await this.ctx.records.put(ref.bucket, from.version, record);
    if (answer.outcome === "swapped") {
      // Committed: nothing after this point may turn the write into a failure.
      await Promise.resolve(this.ctx.hooks?.("after-record-put", info)).catch((err) =>
        this.ctx.log?.warn({ err, ...ref }, "s3 backend: a commit hook failed after the commit"),
      );
    }
    return answer;
  }

  /** The record a change makes of `previous`, with this write's id after the history. */
  nextRecord(
    key: string,
    previous: ObjectRecord | null,
    next: CasNext<LiveVersion>,
    gc?: number,
  ): ObjectRecord {
    const history = writesOf(previous).slice(-(WRITE_HISTORY - 1));
    const mark = Math.max(previous?.gc ?? 0, gc ?? 0);
    const record: ObjectRecord = {
      v: 1,
      key,
      hct: next.hct,
      nonce: newNonce(),
      state: "deleted",
      written: this.ctx.clock(),
      w: next.writeId,
      h: history,
      ...(mark > 0 ? { gc: mark } : {}),
    };
    const keepsLive =
      next.kind === "keep" || next.kind === "stage" || (next.kind === "settle" && !next.forward);
    // A put's or a delete's note; a raise, a touch or a staging keeps the one of the write before.
    const note = keepsLive ? previous?.a : next.note;
    if (note !== undefined) record.a = note;
    if (next.kind === "put") {
      record.state = "live";
      record.live = next.version;
    } else if (keepsLive) {
      // Everything as it was; a key without a record keeps showing its plain object, if any.
      record.state = previous?.state ?? "plain";
      if (previous?.live) record.live = previous.live;
    } else if (next.kind === "settle") {
      // Rolled forward: the pending write is the live state now.
      const p = previous?.p;
      if (p?.kind === "put" && p.live) {
        record.state = "live";
        record.live = p.live;
      }
    }
    // A raise or a touch keeps a pending write; a staging makes one; everything else resolves it.
    if (next.kind === "keep" && previous?.p) record.p = previous.p;
    if (next.kind === "stage") {
      const { pending } = next;
      record.p = {
        tx: pending.tx,
        token: pending.token,
        kind: pending.change.kind,
        ...(pending.change.kind === "put" ? { live: pending.change.version } : {}),
        w: pending.writeId,
        ...(pending.note !== undefined ? { a: pending.note } : {}),
      };
    }
    return record;
  }

  usable(version: LiveVersion, state: Observed): void {
    const mark = (state.raw as Held).read?.record.gc ?? 0;
    if (blobTime(version.blob) < mark) {
      throw new DomainError(
        "ServiceUnavailable",
        "the write took too long between storing its bytes and committing them, and its bytes may have been collected meanwhile; nothing was written, please retry",
        { retryAfterSeconds: 1 },
      );
    }
  }

  async discard(ref: ObjectRef, version: LiveVersion): Promise<void> {
    await this.ctx.removeBlob(ref.bucket, version.blob);
  }

  async replaced(ref: ObjectRef, from: Observed, next: CasNext<LiveVersion>): Promise<void> {
    const previous = (from.raw as Held).read?.record ?? null;
    const old = liveOf(previous);
    const pendingBlob = previous?.p?.kind === "put" ? previous.p.live?.blob : undefined;
    if (next.kind === "stage" || (next.kind === "settle" && !next.forward)) {
      // A pending write replaced (the same transaction wrote the key again) or dropped: its bytes.
      const staged =
        next.kind === "stage" && next.pending.change.kind === "put"
          ? next.pending.change.version.blob
          : undefined;
      if (pendingBlob !== undefined && pendingBlob !== staged)
        this.ctx.removeReplaced(ref.bucket, pendingBlob);
      return;
    }
    if (!old || next.kind === "keep") return;
    if (next.kind === "put" && next.version.blob === old.blob) return;
    if (next.kind === "settle" && pendingBlob === old.blob) return;
    this.ctx.removeReplaced(ref.bucket, old.blob);
  }

  transactions(bucket: string): TransactionLog {
    return this.ctx.transactionLog(
      bucket,
      (key) => runCommit(this, { bucket, key }, { op: "settle" }).then(() => undefined),
      () => this.requireWritable(bucket),
    );
  }

  // ---- the bucket's state ----

  async bucketState(bucket: string): Promise<BucketMarker> {
    const got = await this.ctx.store.getText(bucket, this.ctx.layout.deletedMarker);
    if (!got) return { phase: "live", since: 0, version: null };
    return { ...parseMarker(got.text), version: got.etag };
  }

  async setBucketState(bucket: string, from: BucketMarker, phase: BucketPhase): Promise<BucketMarker | null> {
    this.ctx.distrust(bucket);
    const since = Date.now();
    const nonce = newNonce();
    const put = await this.ctx.store.putConditional(bucket, this.ctx.layout.deletedMarker, {
      body: Buffer.from(JSON.stringify({ phase, since, nonce })),
      contentType: "application/json",
      ...(from.version === null ? { ifNoneMatch: "*" } : { ifMatch: from.version }),
    });
    if (put.outcome === "written") return { phase, since, version: put.etag };
    if (put.outcome === "condition-failed") return null;
    // Unknown: the marker says what happened (its nonce is this write's).
    const got = await this.ctx.store.getText(bucket, this.ctx.layout.deletedMarker);
    return got?.text.includes(nonce) ? { phase, since, version: got.etag } : null;
  }

  async touch(ref: ObjectRef): Promise<void> {
    await runCommit(this, ref, { op: "touch" });
  }

  async isEmpty(bucket: string): Promise<boolean> {
    return this.empty(bucket);
  }

  async removeUploads(bucket: string): Promise<void> {
    for (const upload of await this.uploads.all(bucket)) await this.uploads.remove(bucket, upload.uploadId);
  }

  /**
   * NoSuchBucket when the bucket is deleted; OperationAborted while a deletion runs. A deletion
   * abandoned long ago (its gateway died between its steps) is taken back: the marker goes back
   * to live, and a deletion that was only paused then fails at its last step.
   */
  private async requireWritable(bucket: string, signal?: AbortSignal): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      if (this.ctx.trustedLive(bucket)) return;
      const got = await this.ctx.readMarker(bucket, signal);
      if (!got) return;
      const marker = parseMarker(got.text);
      if (marker.phase === "live") return;
      if (marker.phase === "deleted") throw noSuchBucket(bucket);
      if (Date.now() - marker.since < ABANDONED_DELETION_MS || attempt > 3) throw inProgress(bucket);
      await this.setBucketState(bucket, { ...marker, version: got.etag }, "live");
    }
  }
}

/**
 * A key's state as the driver sees it, from its record (as read) and, where it was looked up,
 * the plain object at the key.
 */
export function observedOf(
  read: ReadRecord | null,
  plainEtag: string | null,
  plainExists: boolean,
): Observed {
  const record = read?.record ?? null;
  const live = liveOf(record);
  const held: Held = { read, plainEtag };
  const p = record?.p;
  return {
    ...(p
      ? {
          pending: {
            tx: p.tx,
            token: p.token,
            change:
              p.kind === "put" && p.live
                ? { kind: "put" as const, version: p.live }
                : { kind: "delete" as const },
            writeId: p.w,
            ...(p.a !== undefined ? { note: p.a } : {}),
          },
        }
      : {}),
    hct: record?.hct ?? null,
    etag: live ? live.etag : record?.state === "deleted" ? null : plainEtag,
    deleted: record?.state === "deleted",
    stored: record !== null || plainExists,
    writes: writesOf(record),
    ...(record?.a !== undefined ? { note: record.a } : {}),
    version: read?.etag ?? null,
    raw: held,
  };
}

function hookOp(op: string): "put" | "complete" | "delete" | "raise" {
  // A transaction's staging is its write's own commit; a settle, like a raise, no client's.
  return op === "delete" ? "delete" : op === "put" ? "put" : "raise";
}
