import {
  BlobSASPermissions,
  type BlockBlobClient,
  generateBlobSASQueryParameters,
} from "@azure/storage-blob";
import { isBlobNotFound, isNotImplemented } from "./azure-errors.js";
import type { AzureStore } from "./azure-store.js";
import { blockIdFactory } from "./body-stager.js";

/** Server-side copies in pieces of this size at most: each must finish within the call deadline. */
const COPY_PIECE = 256 * 1024 * 1024;

/**
 * A roll-forward's copy: the staging blob's bytes staged as uncommitted blocks of `target` with
 * Stage Block From URL (server-side, signed with a short SAS), in pieces; the caller commits them
 * with a conditional Put Block List. Null where the service offers no Stage Block From URL
 * (Azurite; learnt once) or no source URL can be signed (Entra ID credentials): the caller then
 * copies with Copy Blob. Uncommitted blocks change nothing; a concurrent commit of the target
 * discards them (the commit then fails with InvalidBlockList, and nothing changed).
 */
export async function stageFromStaging(
  store: AzureStore,
  bucket: string,
  source: string,
  size: number,
  target: BlockBlobClient,
): Promise<string[] | null> {
  if (store.hints.stageFromUrl === false) return null;
  const client = await store.azureClient();
  if (!client.sharedKey && !client.sasToken) return null;
  const from = (await store.container(bucket)).getBlockBlobClient(source);
  const url = client.sharedKey
    ? `${from.url}?${generateBlobSASQueryParameters(
        {
          containerName: bucket,
          blobName: source,
          permissions: BlobSASPermissions.parse("r"),
          startsOn: new Date(Date.now() - 5 * 60_000),
          expiresOn: new Date(Date.now() + 60 * 60_000),
        },
        client.sharedKey,
      ).toString()}`
    : from.url;
  const blockId = blockIdFactory();
  const ids: string[] = [];
  for (let offset = 0; offset < size; offset += COPY_PIECE) {
    const count = Math.min(COPY_PIECE, size - offset);
    const id = blockId(ids.length);
    try {
      await store.calls.run(
        `copy ${bucket}/${source} onto ${target.name}`,
        undefined,
        (abortSignal) => target.stageBlockFromURL(id, url, offset, count, { abortSignal }),
        (e) => isNotImplemented(e) || isBlobNotFound(e),
      );
    } catch (e) {
      if (!isNotImplemented(e)) throw e;
      store.hints.stageFromUrl = false;
      store.opts.log?.info(
        "azure: Stage Block From URL is not implemented here; roll-forwards use Copy Blob",
      );
      return null;
    }
    ids.push(id);
  }
  if (size > 0) store.hints.stageFromUrl = true;
  return ids;
}
