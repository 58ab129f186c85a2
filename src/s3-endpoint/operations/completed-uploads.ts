import type { CompletedUpload, CompletedUploads } from "../protocol/context.js";

/**
 * The multipart uploads this gateway process completed lately, so that a client retrying a
 * CompleteMultipartUpload whose answer it lost is told the same result, as S3 answers while it
 * remembers the upload. Bounded in count and age; a restart or another replica forgets, and the
 * retry is then answered NoSuchUpload, as S3 answers once it has forgotten.
 */
export function completedUploads(
  opts: { maxEntries?: number; ttlMs?: number; now?: () => number } = {},
): CompletedUploads {
  const maxEntries = opts.maxEntries ?? 10_000;
  const ttlMs = opts.ttlMs ?? 15 * 60_000;
  const now = opts.now ?? Date.now;
  const entries = new Map<string, CompletedUpload & { at: number }>();
  return {
    remember(uploadId, completed) {
      entries.delete(uploadId);
      entries.set(uploadId, { ...completed, at: now() });
      // Oldest first, in insertion order.
      for (const id of entries.keys()) {
        if (entries.size <= maxEntries) break;
        entries.delete(id);
      }
    },
    recall(uploadId) {
      const entry = entries.get(uploadId);
      if (!entry) return undefined;
      if (now() - entry.at > ttlMs) {
        entries.delete(uploadId);
        return undefined;
      }
      const { at: _at, ...completed } = entry;
      return completed;
    },
  };
}
