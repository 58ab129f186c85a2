import type { Readable } from "node:stream";
import {
  BlobSASPermissions,
  type BlockBlobClient,
  generateBlobSASQueryParameters,
} from "@azure/storage-blob";
import { DomainError } from "../../core/errors.js";
import type { UploadRef } from "../storage-backend.js";
import { azureStatus, isNotImplemented } from "./azure-errors.js";
import { MAX_BLOCK_BYTES } from "./azure-options.js";
import type { AzureStore } from "./azure-store.js";
import { blockIdFactory, stageBody } from "./body-stager.js";
import type { PartRecord } from "./upload-records.js";

/**
 * A completion's step 2: the parts' bytes become uncommitted blocks of the object's blob, in
 * order. Blocks cannot move between blobs, so they are copied: server-side with Stage Block From
 * URL where the service offers it, else streamed through the gateway part by part (Azurite has
 * no Stage Block From URL; the backend learns that once and streams from then on).
 */

/** A part blob as a completion uses it: its record, number, Azure ETag and blob name. */
export type ListedPart = PartRecord & { partNumber: number; azureEtag: string; name: string };

type Assembly = {
  ref: UploadRef;
  /** The object's blob, which receives the blocks. */
  blob: BlockBlobClient;
  used: ListedPart[];
  size: number;
  signal: AbortSignal;
};

/** Server-side copies in pieces of this size at most: each must finish within the call deadline. */
const COPY_PIECE = 256 * 1024 * 1024;
/** Azure commits at most 50,000 blocks per blob; keep well below. */
const MAX_BLOCKS = 40_000;

/** Stages the parts' bytes, in order, as blocks on the object's blob; returns their ids. */
export async function assembleParts(
  store: AzureStore,
  { ref, blob, used, size, signal }: Assembly,
  assertUnchanged: () => Promise<void>,
): Promise<string[]> {
  const blockSize = Math.min(
    MAX_BLOCK_BYTES,
    Math.max(store.opts.blockSizeBytes, Math.ceil(size / MAX_BLOCKS)),
  );
  const blockId = blockIdFactory();
  const ids: string[] = [];
  if (store.hints.stageFromUrl !== false) {
    const copied = await assembleServerSide(store, { ref, blob, used, size, signal }, blockId);
    if (copied) {
      // The copy cannot be conditional on the source: check it copied what was checked.
      await assertUnchanged();
      return copied;
    }
  }
  const container = await store.container(ref.bucket);
  for (const part of used) {
    const source = container.getBlockBlobClient(part.name);
    let answer: Awaited<ReturnType<BlockBlobClient["download"]>>;
    try {
      answer = await store.calls.runStream(
        `read part ${part.partNumber} of upload ${ref.uploadId}`,
        signal,
        (abortSignal, onProgress) =>
          source.download(0, undefined, { abortSignal, onProgress, conditions: { ifMatch: part.azureEtag } }),
        (a) => a.readableStreamBody as Readable | undefined,
        (e) => azureStatus(e) === 404 || azureStatus(e) === 412,
      );
    } catch (e) {
      if (azureStatus(e) !== 404 && azureStatus(e) !== 412) throw e;
      // Gone or replaced since it was checked: NoSuchUpload or InvalidPart says which.
      await assertUnchanged();
      throw new DomainError("InvalidPart", `part ${part.partNumber} changed while it was being copied`, {
        partNumber: part.partNumber,
      });
    }
    const staged = await stageBody(answer.readableStreamBody as Readable, {
      blob: Promise.resolve(blob),
      blockSize,
      calls: store.calls,
      signal,
      what: `${ref.bucket}/${ref.key}`,
      alwaysBlocks: true,
      blockId,
      firstIndex: ids.length,
    });
    if (staged.md5.toString("hex") !== part.md5 || staged.size !== part.size) {
      throw new DomainError("InternalError", `part ${part.partNumber} of upload ${ref.uploadId} is corrupt`);
    }
    if (staged.kind === "blocks") ids.push(...staged.blockIds);
  }
  return ids;
}

/**
 * Stage Block From URL from each part blob (a SAS-signed source URL): no bytes through the
 * gateway. Null when the service does not implement it (remembered) or no source URL can be
 * signed (Entra ID credentials): the caller streams instead.
 */
async function assembleServerSide(
  store: AzureStore,
  { ref, blob, used, signal }: Assembly,
  blockId: (index: number) => string,
): Promise<string[] | null> {
  const client = await store.azureClient();
  if (!client.sharedKey && !client.sasToken) return null;
  const container = await store.container(ref.bucket);
  const ids: string[] = [];
  for (const part of used) {
    const source = container.getBlockBlobClient(part.name);
    const url = client.sharedKey
      ? `${source.url}?${generateBlobSASQueryParameters(
          {
            containerName: ref.bucket,
            blobName: part.name,
            permissions: BlobSASPermissions.parse("r"),
            startsOn: new Date(Date.now() - 5 * 60_000),
            expiresOn: new Date(Date.now() + 60 * 60_000),
          },
          client.sharedKey,
        ).toString()}`
      : source.url;
    for (let offset = 0; offset < part.size; offset += COPY_PIECE) {
      const count = Math.min(COPY_PIECE, part.size - offset);
      const id = blockId(ids.length);
      try {
        await store.calls.run(
          `copy part ${part.partNumber} of upload ${ref.uploadId}`,
          signal,
          (abortSignal) => blob.stageBlockFromURL(id, url, offset, count, { abortSignal }),
          isNotImplemented,
        );
      } catch (e) {
        if (!isNotImplemented(e)) throw e;
        store.hints.stageFromUrl = false;
        store.opts.log?.info("azure: Stage Block From URL is not implemented here; parts are streamed");
        return null;
      }
      ids.push(id);
    }
  }
  store.hints.stageFromUrl = true;
  return ids;
}
