import type { BlobItem, ContainerClient } from "@azure/storage-blob";
import type { ListEntry, ListInput, ListResult } from "../storage-backend.js";
import { azureStatus } from "./azure-errors.js";
import type { AzureStore } from "./azure-store.js";
import { BlobCursor, type CursorSource, type Page, type PageRequest } from "./blob-cursor.js";
import { adoptedEtag, type BlobView, viewOf } from "./blob-state.js";
import { listSortedAsync } from "./list-sorted-async.js";

/** Azure's largest page. */
const MAX_PAGE = 5000;

/**
 * One page of List Blobs (flat, with metadata) through the store's deadline. A service that
 * refuses `startFrom` (an older service version) is asked again without it, and not again.
 */
export function blobPages(
  store: AzureStore,
  container: ContainerClient,
  prefix: string,
  pageSize: number,
): (request: PageRequest) => Promise<Page<BlobItem>> {
  const fetch = async (request: PageRequest): Promise<Page<BlobItem>> => {
    const startFrom = store.hints.startFromHonoured === false ? undefined : request.startFrom;
    try {
      const page = await store.calls.run(
        `list ${container.containerName}/${prefix}*`,
        undefined,
        async (abortSignal) => {
          const pages = container
            .listBlobsFlat({
              includeMetadata: true,
              abortSignal,
              ...(prefix ? { prefix } : {}),
              ...(startFrom !== undefined ? { startFrom } : {}),
            })
            .byPage({
              maxPageSize: pageSize,
              ...(request.marker ? { continuationToken: request.marker } : {}),
            });
          return (await pages.next()).value;
        },
        (e) => startFrom !== undefined && azureStatus(e) === 400,
      );
      return {
        items: page?.segment.blobItems ?? [],
        ...(page?.continuationToken ? { nextMarker: page.continuationToken } : {}),
      };
    } catch (e) {
      if (startFrom === undefined || azureStatus(e) !== 400) throw e;
      store.hints.startFromHonoured = false;
      return fetch(request);
    }
  };
  return fetch;
}

/** The live object an item stands for, or undefined (tombstone, directory, fencegate's own blob). */
function liveEntry(
  store: AzureStore,
  container: string,
  item: BlobItem,
): ListEntry | undefined | Promise<ListEntry | undefined> {
  if (item.name.startsWith(store.opts.metaPrefix)) return undefined;
  const props = { ...item.properties, metadata: item.metadata };
  let view: BlobView;
  try {
    view = viewOf(props, `${container}/${item.name}`);
  } catch (e) {
    // One blob with unreadable fencegate metadata must not hide a whole bucket: it is listed as
    // it stands (reads and writes of it are refused), and the log says why.
    store.opts.log?.warn({ err: e, container, blob: item.name }, "azure: unreadable fencegate metadata");
    const size = item.properties.contentLength ?? 0;
    return { key: item.name, size, etag: adoptedEtag(props), lastModified: item.properties.lastModified };
  }
  if (view.state?.p && store.visible) {
    // A pending transaction write: seen as its transaction's record says.
    return store.visible(container, item.name, view).then(entryOf(item.name));
  }
  return entryOf(item.name)(view);
}

const entryOf =
  (key: string) =>
  (view: BlobView): ListEntry | undefined =>
    view.live && view.info
      ? { key, size: view.info.size, etag: view.info.etag, lastModified: view.info.lastModified }
      : undefined;

function source(
  store: AzureStore,
  container: ContainerClient,
  prefix: string,
  pageSize: number,
): CursorSource<BlobItem, ListEntry> {
  return {
    fetch: blobPages(store, container, prefix, pageSize),
    nameOf: (item) => item.name,
    toEntry: (item) => liveEntry(store, container.containerName, item),
    hints: store.hints,
    prefix,
  };
}

/** S3 ListObjects over a container: live objects only, in UTF-8 byte order. */
export async function listObjectPage(
  store: AzureStore,
  container: ContainerClient,
  input: ListInput,
): Promise<ListResult> {
  const prefix = input.prefix ?? "";
  // A little more than the page: tombstones and skipped keys come out of the same pages.
  const pageSize = Math.min(MAX_PAGE, Math.max(100, input.maxKeys + 1));
  return listSortedAsync(input, (from) => new BlobCursor(source(store, container, prefix, pageSize), from));
}

/** Live objects under `prefix`, in order, read lazily (the BucketNotEmpty check reads one). */
export async function* liveEntries(
  store: AzureStore,
  container: ContainerClient,
  prefix: string,
  pageSize = MAX_PAGE,
): AsyncGenerator<ListEntry> {
  const cursor = new BlobCursor(source(store, container, prefix, Math.max(pageSize, 100)), {
    key: prefix,
    inclusive: true,
  });
  try {
    for (;;) {
      const entry = await cursor.next();
      if (entry === undefined) return;
      yield entry;
    }
  } finally {
    await cursor.close();
  }
}
