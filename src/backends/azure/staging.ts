import { randomBytes } from "node:crypto";
import { DomainError } from "../../core/errors.js";
import { runCommit } from "../../fence/commit-driver.js";
import { azureStatus, isContainerNotFound } from "./azure-errors.js";
import type { AzureStore } from "./azure-store.js";
import type { AzureObjectPort } from "./object-port.js";

/**
 * The staging blobs of fenced transactions: a write of a transaction stores its bytes in a blob
 * of its own, `<meta>tx/<transaction id>/<nonce>`, whose metadata names the object's key
 * (STAGED_KEY, base64url); the object's state names the blob in its pending write. When the
 * transaction is rolled forward, the bytes are copied server-side onto the object's blob and
 * the staging blob removed; when the pending write is dropped, it is removed. What a crash or a
 * failure leaves is removed by collectStaging.
 */

export const STAGED_KEY = "fencegate_key";

const stagingPrefix = (meta: string): string => `${meta}tx/`;

export function stagingName(meta: string, transactionId: string): string {
  return `${stagingPrefix(meta)}${transactionId}/${randomBytes(12).toString("hex")}`;
}

/** The transaction a staging blob belongs to; null for another name. */
function stagingTransaction(meta: string, name: string): string | null {
  const prefix = stagingPrefix(meta);
  if (!name.startsWith(prefix)) return null;
  const rest = name.slice(prefix.length);
  const slash = rest.indexOf("/");
  return slash > 0 ? rest.slice(0, slash) : null;
}

/**
 * Removes the staging blobs older than `graceMs` that no transaction can still make visible:
 * those of an aborted transaction (or one without a record), and those of a committed one that
 * its key's state no longer names (rolled forward, or replaced by a later write of the same
 * transaction). A pending write that still names such a blob is resolved first (dropped, or
 * rolled forward when its transaction committed it), through the commit protocol. The blobs of
 * an open transaction stay: its writes may still commit.
 *
 * Why no staging can name a removed blob later: a write of a transaction is staged only while
 * its record says open, and joins the record before the commit; a staging that lands after the
 * transaction ended never joined it, so its pending write is never rolled forward (dropped by
 * the next writer or reader), whatever its blob.
 */
export async function collectStaging(
  store: AzureStore,
  port: AzureObjectPort,
  buckets: readonly string[],
  graceMs: number,
): Promise<{ removed: number }> {
  const meta = store.opts.metaPrefix;
  const cutoff = store.opts.clock() - graceMs;
  let removed = 0;
  for (const bucket of buckets) {
    const container = await store.container(bucket);
    let marker: string | undefined;
    const names: Array<{ name: string; key: string | undefined }> = [];
    try {
      do {
        const page = await store.calls.run(
          `list ${bucket}/${stagingPrefix(meta)}*`,
          undefined,
          async (abortSignal) => {
            const pages = container
              .listBlobsFlat({ prefix: stagingPrefix(meta), includeMetadata: true, abortSignal })
              .byPage({ maxPageSize: 5000, ...(marker ? { continuationToken: marker } : {}) });
            return (await pages.next()).value;
          },
          isContainerNotFound,
        );
        for (const item of page?.segment.blobItems ?? []) {
          if ((item.properties.lastModified?.getTime() ?? 0) >= cutoff) continue;
          const encoded = lowerKeys(item.metadata)[STAGED_KEY];
          names.push({
            name: item.name,
            key: encoded === undefined ? undefined : Buffer.from(encoded, "base64url").toString("utf8"),
          });
        }
        marker = page?.continuationToken || undefined;
      } while (marker);
    } catch (e) {
      if (isContainerNotFound(e)) continue;
      throw e;
    }
    const log = port.transactions(bucket);
    for (const { name, key } of names) {
      const id = stagingTransaction(meta, name);
      if (id === null) continue;
      const record = (await log.read(id))?.record ?? null;
      if (record?.state === "open") continue;
      if (key !== undefined) {
        const ref = { bucket, key };
        try {
          if ((await store.readView(bucket, key)).state?.p?.b === name) {
            // Resolved as its record says: rolled forward (the bytes copied) or dropped.
            await runCommit(port, ref, { op: "settle" });
            if ((await store.readView(bucket, key)).state?.p?.b === name) continue;
          }
        } catch (e) {
          if (e instanceof DomainError && e.code === "NoSuchBucket") continue;
          throw e;
        }
      }
      const blob = container.getBlockBlobClient(name);
      try {
        await store.calls.run(
          `remove ${bucket}/${name}`,
          undefined,
          (abortSignal) => blob.delete({ abortSignal }),
          (e) => azureStatus(e) === 404,
        );
        removed++;
      } catch (e) {
        if (azureStatus(e) !== 404) throw e;
      }
    }
  }
  return { removed };
}

function lowerKeys(metadata: Record<string, string> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(metadata ?? {})) out[name.toLowerCase()] = value;
  return out;
}
