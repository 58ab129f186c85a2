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
  type Pending,
  type ReadOptions,
  type SwapAnswer,
  type SwapOptions,
  type TransactionLog,
  WRITE_HISTORY,
} from "../../fence/commit-port.js";
import { noSuchBucket } from "../backend-errors.js";
import type { Checksums, ObjectHeaders } from "../storage-backend.js";
import {
  azureStatus,
  isBlobNotFound,
  isContainerNotFound,
  isInvalidBlockList,
  isLostRace,
} from "./azure-errors.js";
import { type AzureStore, CONTAINER_DELETED, isAzureContainerName } from "./azure-store.js";
import {
  type BlobView,
  blobHeadersOf,
  encodeState,
  HCT_KEY,
  liveState,
  STATE_KEY,
  type StoredPending,
  type StoredState,
  TOMBSTONE_KEY,
  tombstoneState,
  viewOf,
} from "./blob-state.js";
import { stageFromStaging } from "./staging-copy.js";
import { AzureTransactionRecords } from "./transaction-records.js";

/**
 * The Azure backend as the commit driver sees it (src/fence/commit-port.ts). An object's state is
 * the blob at its name: Azure changes a blob's ETag on every write, metadata included, so that
 * ETag is the compare-and-swap version, and a conditional Put Blob, Put Block List or Set Blob
 * Metadata is a true compare-and-swap. The write history (`w`, `h`) lives in the blob's state
 * (blob-state.ts).
 *
 * The bucket's state: the container's metadata says deleted (every reader looks there), and the
 * marker blob `<meta>bucket` carries the phase of a deletion (live, deleting, deleted), replaced by
 * compare-and-swap. A write reads both after the object's blob (CasPort.checkBucket).
 */

/** A version staged for a commit: the body's bytes and what the object's state will say. */
export type AzureVersion = {
  /**
   * The bytes: in memory (one Put Blob), or staged as blocks on the object's blob; or, for a
   * write of a fenced transaction, a staging blob of its own under the meta prefix (its bytes
   * are copied server-side onto the object's blob when the transaction is rolled forward).
   */
  staged:
    | { kind: "buffer"; data: Buffer; size: number }
    | { kind: "blocks"; blockIds: string[]; size: number }
    | { kind: "blob"; name: string; size: number };
  /** The bytes' MD5, for the blob's Content-MD5 (readers that bypass the gateway). */
  contentMd5?: Buffer;
  /** The S3 ETag, quoted. */
  etag: string;
  headers: ObjectHeaders;
  userMetadata: Record<string, string>;
  checksums?: Checksums;
  /** The multipart upload it completes. */
  upload?: string;
  /** Set when a concurrent commit discarded the staged blocks. */
  blocksLost?: boolean;
  /** Stages the bytes again after that (a completion can, its parts are still there). */
  restage?: () => Promise<void>;
};

/** Metadata keys of the bucket's marker blob. */
const PHASE_KEY = "fencegate_phase";
const SINCE_KEY = "fencegate_since";

export class AzureObjectPort implements CasPort<AzureVersion>, BucketPort {
  readonly kind = "cas";
  /** The records of fenced transactions (`<meta>t/<id>`). */
  readonly txRecords: AzureTransactionRecords;

  constructor(
    private readonly store: AzureStore,
    /** The multipart store's removal of a bucket's uploads (azure-multipart.ts). */
    private readonly uploads: () => { removeAll(bucket: string): Promise<void> },
    private readonly empty: (bucket: string) => Promise<boolean>,
  ) {
    this.txRecords = new AzureTransactionRecords(store);
  }

  /** The records of the bucket's fenced transactions; `settle` resolves a key's pending write. */
  transactions(bucket: string): TransactionLog {
    return this.txRecords.log(
      bucket,
      (key) => runCommit(this, { bucket, key }, { op: "settle" }).then(() => undefined),
      () => this.checkBucket(bucket),
    );
  }

  async read(ref: ObjectRef, opts: ReadOptions): Promise<Observed> {
    // The state this process last saw, if the caller may start from it (Observed.cached).
    const latest = opts.cached ? this.store.latest(ref.bucket, ref.key) : undefined;
    const view = latest ?? (await this.store.readView(ref.bucket, ref.key, opts.signal));
    await this.store.hook("properties-read", { op: "put", ...ref });
    return latest ? { ...observed(view), cached: true } : observed(view);
  }

  async checkBucket(bucket: string, signal?: AbortSignal): Promise<void> {
    await this.requireWritable(bucket, signal);
  }

  async swap(
    ref: ObjectRef,
    from: Observed,
    next: CasNext<AzureVersion>,
    opts: SwapOptions,
  ): Promise<SwapAnswer> {
    const view = from.raw as BlobView;
    const at = { op: hookOp(opts.op), ...ref };
    await this.store.hook("before-commit", at);
    const blob = await this.store.blobOnce(ref.bucket, ref.key);
    const conditions = from.version === null ? { ifNoneMatch: "*" } : { ifMatch: from.version };
    const history = [...from.writes].slice(-(WRITE_HISTORY - 1));
    let answer: { lastModified?: Date; etag?: string };
    /** What the new state will look like, remembered once it landed (the next commit's basis). */
    let written: { metadata: Record<string, string>; size: number } | undefined;
    try {
      // A roll-forward copies the staging blob's bytes as blocks of the object's blob where the
      // service can (Stage Block From URL: synchronous, any size), then commits them below.
      const pending = view.state?.p;
      const blocks =
        next.kind === "settle" && next.forward && pending?.kind === "put"
          ? await stageFromStaging(this.store, ref.bucket, pending.b!, pending.size ?? 0, blob)
          : null;
      answer = await this.store.calls.run(
        `commit ${ref.bucket}/${ref.key}`,
        undefined,
        (abortSignal) => {
          if (next.kind === "stage") {
            // A transaction's write staged beside the state: bytes and live state unchanged.
            const p = storedPending(next.pending);
            if (!view.exists) {
              const metadata = encodeState({ ...tombstoneState(next.hct, next.writeId, history), p });
              written = { metadata, size: 0 };
              return blob.upload(Buffer.alloc(0), 0, { conditions, metadata, abortSignal });
            }
            const metadata = {
              ...withoutState(view.rawMetadata),
              ...encodeState({ ...keptState(view, next.hct, next.writeId, history), p }),
            };
            written = undefined;
            return blob.setMetadata(metadata, { conditions, abortSignal });
          }
          if (next.kind === "settle") {
            const p = view.state?.p;
            if (next.forward && p?.kind === "put") {
              // Rolled forward: the staging blob's bytes copied server-side onto the object's
              // blob, with its new state, only over the state read (If-Match): a roll-forward
              // racing another writer changes nothing.
              const metadata = encodeState({
                ...liveState(
                  next.hct,
                  p.etag!,
                  p.headers ?? {},
                  p.meta ?? {},
                  p.checksums,
                  next.writeId,
                  history,
                  p.u,
                ),
                ...(next.note !== undefined ? { a: next.note } : {}),
              });
              written = { metadata, size: p.size ?? 0 };
              if (blocks !== null) {
                const blobHTTPHeaders = blobHeadersOf(p.headers ?? {}, md5OfEtag(p.etag!));
                return blob.commitBlockList(blocks, { conditions, metadata, blobHTTPHeaders, abortSignal });
              }
              // Where it cannot (Azurite): Copy Blob, which carries the staging blob's properties.
              return this.copyOnto(ref.bucket, p.b!, blob, metadata, conditions, abortSignal);
            }
            if (next.forward && p?.kind === "delete") {
              const metadata = encodeState({
                ...tombstoneState(next.hct, next.writeId, history),
                ...(next.note !== undefined ? { a: next.note } : {}),
              });
              written = { metadata, size: 0 };
              return blob.upload(Buffer.alloc(0), 0, { conditions, metadata, abortSignal });
            }
            // Dropped: the state without its pending write.
            const { p: _dropped, ...kept } = keptState(view, next.hct, next.writeId, history);
            const metadata = { ...withoutState(view.rawMetadata), ...encodeState(kept) };
            written = undefined;
            return blob.setMetadata(metadata, { conditions, abortSignal });
          }
          if (next.kind === "put") {
            const v = next.version;
            if (v.staged.kind === "blob")
              throw new Error("a staged transaction write is committed by its transaction");
            const metadata = encodeState({
              ...liveState(
                next.hct,
                v.etag,
                v.headers,
                v.userMetadata,
                v.checksums,
                next.writeId,
                history,
                v.upload,
              ),
              ...(next.note !== undefined ? { a: next.note } : {}),
            });
            const blobHTTPHeaders = blobHeadersOf(v.headers, v.contentMd5);
            written = { metadata, size: v.staged.size };
            return v.staged.kind === "buffer"
              ? blob.upload(v.staged.data, v.staged.size, {
                  conditions,
                  metadata,
                  blobHTTPHeaders,
                  abortSignal,
                })
              : blob.commitBlockList(v.staged.blockIds, {
                  conditions,
                  metadata,
                  blobHTTPHeaders,
                  abortSignal,
                });
          }
          if (next.kind === "delete" || !view.exists) {
            // A tombstone (zero bytes, the state says deleted): also what an HCT raise leaves
            // where nothing is stored.
            const note = next.kind === "delete" ? next.note : view.state?.a;
            const metadata = encodeState({
              ...tombstoneState(next.hct, next.writeId, history),
              ...(note !== undefined ? { a: note } : {}),
            });
            written = { metadata, size: 0 };
            return blob.upload(Buffer.alloc(0), 0, { conditions, metadata, abortSignal });
          }
          const metadata = {
            ...withoutState(view.rawMetadata),
            ...encodeState(keptState(view, next.hct, next.writeId, history)),
          };
          // Only the metadata changes: the blob's size and headers are unknown here (adopted
          // blobs): the next commit reads the state again.
          written = undefined;
          return blob.setMetadata(metadata, { conditions, abortSignal });
        },
        (e) =>
          isLostRace(e) ||
          ((next.kind === "put" || next.kind === "settle") && isInvalidBlockList(e)) ||
          (next.kind === "settle" && isBlobNotFound(e)),
      );
    } catch (e) {
      this.store.remember(ref.bucket, ref.key, null);
      // The staging blob is gone: another roll-forward landed (and removed it) first. Or the
      // blocks copied from it were discarded by another commit of the object: nothing changed.
      if (next.kind === "settle" && (isBlobNotFound(e) || isInvalidBlockList(e))) return { outcome: "lost" };
      if (next.kind === "put" && isInvalidBlockList(e)) {
        // A concurrent commit of this blob discarded the staged blocks: nothing changed.
        next.version.blocksLost = true;
        return { outcome: "lost" };
      }
      if (isLostRace(e)) return { outcome: "lost" };
      if (isUnknown(e)) return { outcome: "unknown", error: e };
      throw e;
    }
    this.store.remember(
      ref.bucket,
      ref.key,
      written && answer.etag
        ? viewOf(
            {
              etag: answer.etag,
              metadata: written.metadata,
              contentLength: written.size,
              ...(answer.lastModified ? { lastModified: answer.lastModified } : {}),
            },
            `${ref.bucket}/${ref.key}`,
          )
        : null,
    );
    await this.store.hook("after-commit", at);
    return { outcome: "swapped", ...(answer.lastModified ? { lastModified: answer.lastModified } : {}) };
  }

  async usable(version: AzureVersion): Promise<void> {
    if (!version.blocksLost) return;
    if (!version.restage) throw blocksDiscarded();
    await version.restage();
    version.blocksLost = false;
  }

  async discard(ref: ObjectRef, version: AzureVersion): Promise<void> {
    // Staged blocks change nothing; the blob's next commit (or Azure, after 7 days) discards them.
    // A transaction's staging blob is removed (the collector removes what this leaves).
    if (version.staged.kind === "blob") await this.removeStaging(ref.bucket, version.staged.name);
  }

  /** After `next` landed over `from`: the staging blob of a pending write no longer named goes. */
  async replaced(ref: ObjectRef, from: Observed, next: CasNext<AzureVersion>): Promise<void> {
    const name = (from.raw as BlobView | undefined)?.state?.p?.b;
    if (name === undefined) return;
    if (next.kind === "keep") return;
    if (next.kind === "stage" && next.pending.change.kind === "put") {
      const staged = next.pending.change.version.staged;
      if (staged.kind === "blob" && staged.name === name) return;
    }
    await this.removeStaging(ref.bucket, name);
  }

  /** Removes a staging blob (best effort: what stays is the collector's). */
  async removeStaging(bucket: string, name: string): Promise<void> {
    const blob = await this.store.blob(bucket, name);
    await this.store.calls
      .run(`remove ${bucket}/${name}`, undefined, (abortSignal) => blob.deleteIfExists({ abortSignal }))
      .catch(() => undefined);
  }

  /**
   * Copy Blob from the staging blob `source` onto `target`, with `metadata` and the destination
   * conditions. The copy carries the staging blob's bytes and properties (Content-Type, MD5...)
   * without them passing through the gateway, whatever their size. Azure may finish a copy
   * after answering (pending): the call then waits for it.
   */
  private async copyOnto(
    bucket: string,
    source: string,
    target: Awaited<ReturnType<AzureStore["blobOnce"]>>,
    metadata: Record<string, string>,
    conditions: { ifMatch?: string; ifNoneMatch?: string },
    abortSignal: AbortSignal,
  ): Promise<{ etag?: string; lastModified?: Date }> {
    const from = await this.store.blob(bucket, source);
    // The copy is started by this call; a copy Azure finishes later (pending) is waited for.
    const poller = await target.beginCopyFromURL(from.url, {
      conditions,
      metadata,
      abortSignal,
      intervalInMs: 100,
    });
    const answer = await poller.pollUntilDone();
    if (answer.copyStatus !== undefined && answer.copyStatus !== "success") {
      throw new Error(`the copy onto ${bucket}/${target.name} ended ${answer.copyStatus}`);
    }
    return {
      ...(answer.etag ? { etag: answer.etag } : {}),
      ...(answer.lastModified ? { lastModified: answer.lastModified } : {}),
    };
  }

  async touch(ref: ObjectRef): Promise<void> {
    await runCommit(this, ref, { op: "touch" });
  }

  // ---- the bucket's state ----

  async bucketState(bucket: string): Promise<BucketMarker> {
    const [container, marker] = await Promise.all([
      this.store.containerState(bucket),
      this.readMarker(bucket),
    ]);
    if (container.state === "missing") throw noSuchBucket(bucket);
    if (container.state === "deleted") return { ...marker, phase: "deleted" };
    return marker;
  }

  async setBucketState(bucket: string, from: BucketMarker, phase: BucketPhase): Promise<BucketMarker | null> {
    this.store.distrust(bucket);
    const blob = await this.store.blobOnce(bucket, this.markerName());
    const since = this.store.opts.clock();
    const conditions = from.version === null ? { ifNoneMatch: "*" } : { ifMatch: from.version };
    let etag: string | undefined;
    try {
      etag = (
        await this.store.calls.run(
          `mark ${bucket} ${phase}`,
          undefined,
          (abortSignal) =>
            blob.upload(Buffer.alloc(0), 0, {
              conditions,
              metadata: { [PHASE_KEY]: phase, [SINCE_KEY]: String(since) },
              abortSignal,
            }),
          isLostRace,
        )
      ).etag;
    } catch (e) {
      if (isLostRace(e)) return null;
      throw e;
    }
    // Readers look at the container's metadata: it follows the marker.
    if (phase === "deleted") await this.markContainer(bucket, true);
    if (phase === "live" && from.phase === "deleted") await this.markContainer(bucket, false);
    return { phase, since, version: etag ?? null };
  }

  async isEmpty(bucket: string): Promise<boolean> {
    return this.empty(bucket);
  }

  async removeUploads(bucket: string): Promise<void> {
    await this.uploads().removeAll(bucket);
  }

  /**
   * NoSuchBucket when the bucket is deleted; OperationAborted while a deletion runs. A deletion
   * abandoned long ago is taken back, so that a deletion that was only paused fails at its end.
   */
  private async requireWritable(bucket: string, signal?: AbortSignal): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      if (this.store.trustedLive(bucket)) return;
      const sent = performance.now();
      const [container, marker] = await Promise.all([
        this.store.containerState(bucket, signal),
        this.readMarker(bucket, signal),
      ]);
      if (container.state !== "live" || marker.phase === "deleted") throw noSuchBucket(bucket);
      if (marker.phase === "live") {
        this.store.trustLive(bucket, sent);
        return;
      }
      if (this.store.opts.clock() - marker.since < ABANDONED_DELETION_MS || attempt > 3) {
        throw inProgress(bucket);
      }
      await this.setBucketState(bucket, marker, "live");
    }
  }

  private markerName(): string {
    return `${this.store.opts.metaPrefix}bucket`;
  }

  private async readMarker(bucket: string, signal?: AbortSignal): Promise<BucketMarker> {
    if (!isAzureContainerName(bucket)) throw noSuchBucket(bucket);
    const blob = await this.store.blob(bucket, this.markerName());
    try {
      const props = await this.store.calls.run(
        `read the marker of ${bucket}`,
        signal,
        (abortSignal) => blob.getProperties({ abortSignal }),
        (e) => azureStatus(e) === 404,
      );
      const metadata = lowerKeys(props.metadata);
      const phase = metadata[PHASE_KEY];
      const since = Number(metadata[SINCE_KEY]);
      return {
        phase: phase === "deleting" || phase === "deleted" ? phase : "live",
        since: Number.isFinite(since) ? since : 0,
        version: props.etag ?? null,
      };
    } catch (e) {
      if (isContainerNotFound(e)) throw noSuchBucket(bucket);
      if (azureStatus(e) === 404) return { phase: "live", since: 0, version: null };
      throw e;
    }
  }

  private async markContainer(bucket: string, deleted: boolean): Promise<void> {
    const found = await this.store.containerState(bucket);
    if (found.state === "missing") return;
    const { [CONTAINER_DELETED]: _mark, ...kept } = found.metadata;
    const metadata = deleted
      ? { ...kept, [CONTAINER_DELETED]: new Date(this.store.opts.clock()).toISOString() }
      : kept;
    const container = await this.store.container(bucket);
    await this.store.calls.run(`mark container ${bucket}`, undefined, (abortSignal) =>
      container.setMetadata(metadata, { abortSignal }),
    );
  }
}

/** A blob's view as the driver's state. */
export function observed(view: BlobView): Observed {
  const state = view.state;
  return {
    hct: view.hct,
    etag: view.live ? view.s3Etag : null,
    deleted: state?.deleted === true,
    // A directory of a hierarchical namespace is a path, not a stored object.
    stored: view.live || state !== null,
    writes: state ? [...(state.h ?? []), ...(state.w ? [state.w] : [])] : [],
    ...(state?.a !== undefined ? { note: state.a } : {}),
    version: view.exists ? view.azureEtag : null,
    raw: view,
    ...(state?.p ? { pending: pendingOf(state.p) } : {}),
  };
}

/** A stored pending write as the driver sees it. */
export function pendingOf(p: StoredPending): Pending<AzureVersion> {
  return {
    tx: p.tx,
    token: p.token,
    writeId: p.w,
    ...(p.a !== undefined ? { note: p.a } : {}),
    change:
      p.kind === "delete"
        ? { kind: "delete" }
        : {
            kind: "put",
            version: {
              staged: { kind: "blob", name: p.b!, size: p.size ?? 0 },
              etag: p.etag!,
              headers: p.headers ?? {},
              userMetadata: p.meta ?? {},
              ...(p.checksums ? { checksums: p.checksums } : {}),
              ...(p.u ? { upload: p.u } : {}),
            },
          },
  };
}

/** The pending write a staging keeps in the object's state. */
function storedPending(pending: Pending<AzureVersion>): StoredPending {
  const base = {
    tx: pending.tx,
    token: pending.token,
    w: pending.writeId,
    t: Date.now(),
    ...(pending.note !== undefined ? { a: pending.note } : {}),
  };
  if (pending.change.kind === "delete") return { ...base, kind: "delete" };
  const v = pending.change.version;
  if (v.staged.kind !== "blob") throw new Error("a transaction's put is staged in a blob of its own");
  return {
    ...base,
    kind: "put",
    b: v.staged.name,
    size: v.staged.size,
    etag: v.etag,
    ...(Object.keys(v.headers).length > 0 ? { headers: v.headers } : {}),
    ...(Object.keys(v.userMetadata).length > 0 ? { meta: v.userMetadata } : {}),
    ...(v.checksums && Object.keys(v.checksums).length > 0 ? { checksums: v.checksums } : {}),
    ...(v.upload ? { u: v.upload } : {}),
  };
}

/**
 * A conditional call that was sent and got no answer (our deadline, a reset, a 5xx): it may have
 * landed. The deadline's error is a DomainError ServiceUnavailable whose cause is the abort.
 */
function isUnknown(e: unknown): boolean {
  return e instanceof DomainError && (e.code === "ServiceUnavailable" || e.code === "SlowDown");
}

const blocksDiscarded = () =>
  new DomainError(
    "SlowDown",
    "a concurrent write to the same key committed first and discarded this write's staged blocks; nothing was changed, retry the request",
    { retryAfterSeconds: 1 },
  );

const STATE_KEYS = new Set([STATE_KEY, HCT_KEY, TOMBSTONE_KEY]);

/** The blob's own metadata without fencegate's entries (kept when only the HCT is raised). */
function withoutState(raw: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(raw)) if (!STATE_KEYS.has(name.toLowerCase())) out[name] = value;
  return out;
}

/** The state of a blob whose HCT (or write id) changes, everything else as it was. */
function keptState(view: BlobView, hct: number | null, writeId: string, history: string[]): StoredState {
  if (view.state) return { ...view.state, hct, w: writeId, h: history };
  if (view.live && view.info) {
    // Adopted: the ETag, headers and metadata it showed so far become its stored state.
    return liveState(
      hct,
      view.s3Etag!,
      view.info.headers,
      view.info.userMetadata,
      undefined,
      writeId,
      history,
    );
  }
  return tombstoneState(hct, writeId, history); // a directory marker
}

function lowerKeys(metadata: Record<string, string> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(metadata ?? {})) out[name.toLowerCase()] = value;
  return out;
}

function hookOp(op: string): "put" | "delete" | "raise" {
  return op === "delete" ? "delete" : op === "put" ? "put" : "raise";
}

/** The MD5 an S3 ETag of a single-part write names (a multipart one names none). */
function md5OfEtag(etag: string): Buffer | undefined {
  const hex = /^"([0-9a-f]{32})"$/.exec(etag)?.[1];
  return hex ? Buffer.from(hex, "hex") : undefined;
}
