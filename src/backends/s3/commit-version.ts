import { DomainError } from "../../core/errors.js";
import { applyFence, checkWriteConditions } from "../../fence/commit.js";
import type { FencedCommit } from "../storage-backend.js";
import type { S3Context } from "./context.js";
import { type LiveVersion, liveOf } from "./records.js";
import { abandoned } from "./store-errors.js";

export type VersionCommit = {
  op: "put" | "complete";
  bucket: string;
  key: string;
  version: LiveVersion;
  commit: FencedCommit;
  /** performance.now() when the blob's upload began (S3 dates a multipart object by its initiation). */
  storedAt: number;
  /** Unreferenced blobs older than this may be collected (the gcGraceMs option). */
  gcGraceMs: number;
  /** Last checks after prepare and before the CAS loop (a completion re-reads its upload). */
  beforeCommit?: () => Promise<void>;
};

/**
 * Commits a stored blob as the key's live version (PutObject, CompleteMultipartUpload): prepare,
 * the abort check, the capability gate, then the CAS loop applying the HCT rule and the write
 * conditions to the record read. The replaced blob is removed afterwards (best effort). Returns
 * the HCT the write leaves.
 */
export async function commitVersion(ctx: S3Context, c: VersionCommit): Promise<number | null> {
  const { bucket, key, version, commit } = c;
  await ctx.hooks?.("blob-stored", { op: c.op, bucket, key, attempt: 0 });
  await commit.prepare();
  if (commit.signal.aborted) throw abandoned();
  await ctx.gate.require(bucket);
  await c.beforeCommit?.();
  const { ifMatch, ifNoneMatch } = commit.conditions;
  const { result, replaced } = await ctx.commit(
    { op: c.op, bucket, key },
    {
      // The plain object matters only to conditions: a commit shadows it either way.
      plain: ifMatch !== undefined || ifNoneMatch !== undefined,
      checkBucket: true,
      guard: () => guardAge(c.storedAt, c.gcGraceMs),
    },
    (current) => {
      const hct = applyFence(commit.fence, current.record?.hct ?? null);
      checkWriteConditions(commit.conditions, current.liveEtag);
      return { write: ctx.newRecord(key, { hct, state: "live", live: version }), result: hct };
    },
  );
  const old = liveOf(replaced);
  if (old && old.blob !== version.blob) await ctx.removeBlob(bucket, old.blob);
  return result;
}

/**
 * A blob older than the collector's grace period may be collected before the record naming it
 * lands: refuse a commit whose blob upload began more than half of that period ago (the hosts'
 * clocks may differ by the other half). gcGraceMs must therefore exceed twice the longest upload.
 */
function guardAge(storedAt: number, gcGraceMs: number): void {
  if (performance.now() - storedAt > gcGraceMs / 2) {
    throw new DomainError(
      "ServiceUnavailable",
      "the write took too long between storing its bytes and committing them; please retry",
    );
  }
}
