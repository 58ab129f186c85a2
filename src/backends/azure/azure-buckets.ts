import { DomainError } from "../../core/errors.js";
import { assertValidBucketName, isValidBucketName } from "../../core/key-rules.js";
import { noSuchBucket } from "../backend-errors.js";
import type { BucketInfo } from "../storage-backend.js";
import { azureCode, azureStatus } from "./azure-errors.js";
import {
  type AzureStore,
  CONTAINER_CREATED,
  CONTAINER_DELETED,
  CONTAINER_LOCATION,
  isAzureContainerName,
} from "./azure-store.js";
import { liveEntries } from "./blob-listing.js";

/**
 * Buckets are containers. A deleted bucket's container is kept, marked with the container
 * metadata `fencegate_deleted`, because its tombstones hold HCTs that must outlive the bucket;
 * creating the bucket again clears the mark. fencegate never deletes a container: a paused write
 * can land after the bucket was deleted, and would then be lost with its HCT.
 */
export class AzureBuckets {
  constructor(private readonly store: AzureStore) {}

  async listBuckets(): Promise<BucketInfo[]> {
    const service = await this.store.service();
    const buckets: BucketInfo[] = [];
    let marker: string | undefined;
    do {
      const page = await this.store.calls.run("list containers", undefined, async (abortSignal) => {
        const pages = service
          .listContainers({ includeMetadata: true, abortSignal })
          .byPage({ maxPageSize: 5000, ...(marker ? { continuationToken: marker } : {}) });
        return (await pages.next()).value;
      });
      for (const item of page?.containerItems ?? []) {
        const metadata = item.metadata ?? {};
        // `$logs`, `$web` and other names no S3 client could address are not buckets.
        if (metadata[CONTAINER_DELETED] !== undefined || !isValidBucketName(item.name)) continue;
        const created = Date.parse(metadata[CONTAINER_CREATED] ?? "");
        buckets.push({
          name: item.name,
          creationDate: Number.isFinite(created) ? new Date(created) : item.properties.lastModified,
        });
      }
      marker = page?.continuationToken || undefined;
    } while (marker);
    return buckets.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** The container metadata `fencegate_location` holds the bucket's location constraint. */
  async createBucket(bucket: string, location = ""): Promise<void> {
    assertValidBucketName(bucket);
    if (!isAzureContainerName(bucket)) {
      throw new DomainError(
        "InvalidBucketName",
        "this bucket is an Azure container: its name may contain only lowercase letters, digits and single hyphens (no dots, no '--')",
        { bucket },
      );
    }
    const container = await this.store.container(bucket);
    const created = new Date(this.store.opts.clock()).toISOString();
    const located: Record<string, string> = location === "" ? {} : { [CONTAINER_LOCATION]: location };
    try {
      await this.store.calls.run(
        `create container ${bucket}`,
        undefined,
        (abortSignal) =>
          container.create({ metadata: { [CONTAINER_CREATED]: created, ...located }, abortSignal }),
        (e) => azureStatus(e) === 409,
      );
      return;
    } catch (e) {
      if (azureCode(e) === "ContainerBeingDeleted") {
        throw new DomainError(
          "ServiceUnavailable",
          "Azure is still deleting a container of this name; try again in a minute",
          { bucket },
        );
      }
      if (azureStatus(e) !== 409) throw e;
    }
    const found = await this.store.containerState(bucket);
    if (found.state !== "deleted") {
      throw new DomainError("BucketAlreadyOwnedByYou", "you already own this bucket", { bucket });
    }
    // A bucket deleted through fencegate: its container (and its tombstones' HCTs) come back.
    const { [CONTAINER_DELETED]: _deleted, [CONTAINER_LOCATION]: _location, ...kept } = found.metadata;
    await this.store.calls.run(`restore container ${bucket}`, undefined, (abortSignal) =>
      container.setMetadata({ ...kept, [CONTAINER_CREATED]: created, ...located }, { abortSignal }),
    );
  }

  /** Sets the location constraint of a live container ("" removes it). */
  async setLocation(bucket: string, location: string): Promise<void> {
    const found = await this.store.containerState(bucket);
    if (found.state !== "live") return;
    const { [CONTAINER_LOCATION]: _location, ...kept } = found.metadata;
    const container = await this.store.container(bucket);
    await this.store.calls.run(`locate container ${bucket}`, undefined, (abortSignal) =>
      container.setMetadata(
        { ...kept, ...(location === "" ? {} : { [CONTAINER_LOCATION]: location }) },
        { abortSignal },
      ),
    );
  }

  /** The bucket's location constraint, "" for none; NoSuchBucket. */
  async location(bucket: string): Promise<string> {
    const found = await this.store.containerState(bucket);
    if (found.state !== "live") throw noSuchBucket(bucket);
    return found.metadata[CONTAINER_LOCATION] ?? "";
  }

  async headBucket(bucket: string): Promise<BucketInfo> {
    return this.store.requireBucket(bucket);
  }

  /** Whether the bucket holds no live object (tombstones, directories and fencegate's blobs aside). */
  async isEmpty(bucket: string): Promise<boolean> {
    const container = await this.store.container(bucket);
    for await (const _entry of liveEntries(this.store, container, "", 1)) return false;
    return true;
  }
}
