import type { ContainerClient } from "@azure/storage-blob";
import { DomainError } from "../../core/errors.js";
import type { SystemRecords } from "../storage-backend.js";
import { azureStatus, isContainerNotFound, isLostRace } from "./azure-errors.js";
import { type AzureStore, isAzureContainerName } from "./azure-store.js";

/**
 * fencegate's own records in a system container of the account: blobs `<m><name>`, each created
 * once with Put Blob If-None-Match: * (Azure answers 201 once the blob is durable, and 409 or 412
 * when one of that name exists). The gateway reserves the container's name, and blob names under
 * `<m>` are never object keys, so no S3 request reaches them.
 */
export function azureSystemRecords(store: AzureStore, bucket: string): SystemRecords {
  const meta = store.opts.metaPrefix;
  const where = `container ${bucket} of the Azure account`;
  const names = async (prefix: string, strip: number): Promise<string[]> => {
    const container = await store.container(bucket);
    const found: string[] = [];
    let marker: string | undefined;
    do {
      const page = await list(store, container, prefix, marker);
      for (const item of page?.segment.blobItems ?? []) found.push(item.name.slice(strip));
      marker = page?.continuationToken || undefined;
    } while (marker);
    return found;
  };
  return {
    where,
    async open() {
      if (!isAzureContainerName(bucket)) {
        throw new DomainError(
          "InvalidBucketName",
          `${bucket} is not an Azure container name (lowercase letters, digits and single hyphens)`,
          { bucket },
        );
      }
      const container = await store.container(bucket);
      const denied = (e: unknown) =>
        azureStatus(e) === 403
          ? new DomainError("AccessDenied", "these credentials may not use the container", { bucket })
          : e;
      try {
        await list(store, container, meta, undefined, 1);
        return;
      } catch (e) {
        if (!isContainerNotFound(e)) throw denied(e);
      }
      await store.calls
        .run(
          `create container ${bucket}`,
          undefined,
          (abortSignal) => container.create({ abortSignal }),
          (e) => azureStatus(e) === 409 || azureStatus(e) === 403,
        )
        .catch((e: unknown) => {
          // 409: another replica created it meanwhile.
          if (azureStatus(e) !== 409) throw denied(e);
        });
    },
    async create(name, body) {
      const blob = await store.blob(bucket, meta + name);
      try {
        await store.calls.run(
          `create ${bucket}/${meta}${name}`,
          undefined,
          (abortSignal) =>
            blob.upload(body, body.length, {
              conditions: { ifNoneMatch: "*" },
              blobHTTPHeaders: { blobContentType: "application/json" },
              abortSignal,
            }),
          isLostRace,
        );
        return true;
      } catch (e) {
        // It exists (also when an earlier attempt of this very call landed and the SDK retried).
        if (isLostRace(e)) return false;
        throw e;
      }
    },
    list: (prefix) => names(meta + prefix, meta.length),
    // Older versions wrote epochs as gateway objects: blobs at their keys, which a fenced delete
    // leaves as zero-length tombstones.
    legacyKeys: (prefix) => names(prefix, 0),
  };
}

/** One page of List Blobs under `prefix`; ContainerNotFound and 403 come back as Azure raised them. */
async function list(
  store: AzureStore,
  container: ContainerClient,
  prefix: string,
  marker: string | undefined,
  maxPageSize = 5000,
) {
  return store.calls.run(
    `list ${container.containerName}/${prefix}*`,
    undefined,
    async (abortSignal) => {
      const pages = container
        .listBlobsFlat({ prefix, abortSignal })
        .byPage({ maxPageSize, ...(marker ? { continuationToken: marker } : {}) });
      return (await pages.next()).value;
    },
    (e) => isContainerNotFound(e) || azureStatus(e) === 403,
  );
}
