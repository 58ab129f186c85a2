import type { BlobServiceClient, BlockBlobClient, ContainerClient } from "@azure/storage-blob";
import { DomainError } from "../../core/errors.js";
import { assertValidObjectKey } from "../../core/key-rules.js";
import { LruMap } from "../../core/lru.js";
import { BucketTrust } from "../../fence/bucket-deletion.js";
import { noSuchBucket } from "../backend-errors.js";
import type { BucketInfo } from "../storage-backend.js";
import { AzureCalls } from "./azure-calls.js";
import { azureStatus, isBlobNotFound, isContainerNotFound } from "./azure-errors.js";
import type { AzureClient, AzureHookContext, AzureHookStep, ResolvedAzureOptions } from "./azure-options.js";
import { type BlobView, MISSING, viewOf } from "./blob-state.js";

/**
 * What the Azure backend and its multipart store share: the client, every call's deadline, the
 * container checks, reading an object's state, and the compare-and-swap commit loop.
 */

/** Container metadata: set on a deleted bucket's container (which stays, to keep the HCTs). */
export const CONTAINER_DELETED = "fencegate_deleted";
/** Container metadata: when fencegate created the bucket (S3's CreationDate). */
export const CONTAINER_CREATED = "fencegate_created";
/** Container metadata: the LocationConstraint the bucket was created with, when it had one. */
export const CONTAINER_LOCATION = "fencegate_location";

/** Azure's container name rules, stricter than S3's bucket rules (no dots, no "--"). */
const AZURE_CONTAINER = /^[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]$/;
export const isAzureContainerName = (name: string): boolean => AZURE_CONTAINER.test(name);

type ContainerState =
  | { state: "missing" }
  | { state: "deleted"; metadata: Record<string, string> }
  | { state: "live"; info: BucketInfo; metadata: Record<string, string> };

/** How many blobs' last states a backend keeps (least recently used out first). */
const LATEST_CAPACITY = 10_000;

export class AzureStore {
  readonly calls: AzureCalls;
  /** What this backend learnt about the service (shared by its listings and assemblies). */
  readonly hints: { startFromHonoured?: boolean; stageFromUrl?: boolean } = {};
  private hnsDetected: Promise<boolean> | undefined;
  /** How a listing sees a blob whose state holds a pending transaction write (set by the backend). */
  visible: ((bucket: string, key: string, view: BlobView) => Promise<BlobView>) | undefined;
  /** Containers a read found live (and their bucket marker live), until when that may be trusted. */
  private readonly liveBuckets = new BucketTrust();
  /** The last state this process saw of each blob it committed or read (a commit's first basis). */
  private readonly last = new LruMap<BlobView>(LATEST_CAPACITY);

  constructor(
    private readonly client: Promise<AzureClient>,
    readonly opts: ResolvedAzureOptions,
  ) {
    this.calls = new AzureCalls(opts.requestTimeoutMs, opts.observeCall);
  }

  async service(): Promise<BlobServiceClient> {
    return (await this.client).service;
  }

  /** The names of every container of the account. */
  async containerNames(): Promise<string[]> {
    const service = await this.service();
    const names: string[] = [];
    let marker: string | undefined;
    do {
      const page = await this.calls.run("list containers", undefined, async (abortSignal) => {
        const pages = service
          .listContainers({ abortSignal })
          .byPage({ maxPageSize: 5000, ...(marker ? { continuationToken: marker } : {}) });
        return (await pages.next()).value;
      });
      for (const item of page?.containerItems ?? []) names.push(item.name);
      marker = page?.continuationToken || undefined;
    } while (marker);
    return names;
  }

  async azureClient(): Promise<AzureClient> {
    return this.client;
  }

  async container(bucket: string): Promise<ContainerClient> {
    return (await this.service()).getContainerClient(bucket);
  }

  async blob(bucket: string, name: string): Promise<BlockBlobClient> {
    return (await this.container(bucket)).getBlockBlobClient(name);
  }

  /** The blob for a conditional write: a client that sends it once (see ONCE in azure-options.ts). */
  async blobOnce(bucket: string, name: string): Promise<BlockBlobClient> {
    return (await this.client).once.getContainerClient(bucket).getBlockBlobClient(name);
  }

  async hook(step: AzureHookStep, at: AzureHookContext): Promise<void> {
    if (this.opts.hooks) await this.opts.hooks(step, at);
  }

  /** Whether the account has a hierarchical namespace (ADLS Gen2): configured, or asked once. */
  hierarchicalNamespace(): Promise<boolean> {
    if (this.opts.hierarchicalNamespace !== undefined)
      return Promise.resolve(this.opts.hierarchicalNamespace);
    this.hnsDetected ??= (async () => {
      try {
        const service = await this.service();
        const info = await this.calls.run("get account info", undefined, (abortSignal) =>
          service.getAccountInfo({ abortSignal }),
        );
        return info.isHierarchicalNamespaceEnabled === true;
      } catch (e) {
        // A SAS or role without account-level rights cannot ask; assume a flat namespace.
        this.opts.log?.warn(
          { err: e },
          "azure: could not ask whether the account has a hierarchical namespace",
        );
        return false;
      }
    })();
    return this.hnsDetected;
  }

  /**
   * Keys become blob paths: the shared key rules again (defence in depth), fencegate's own
   * prefix, and with a hierarchical namespace the keys that are not file paths.
   */
  assertKeySync(key: string): void {
    assertValidObjectKey(key);
    const meta = this.opts.metaPrefix;
    if (key.startsWith(meta) || key === meta.slice(0, -1)) {
      throw new DomainError(
        "InvalidObjectName",
        `object keys starting with '${meta}' are reserved by fencegate on this backend`,
        { key, reason: "reserved-prefix" },
      );
    }
  }

  async assertKey(key: string): Promise<void> {
    this.assertKeySync(key);
    if (await this.hierarchicalNamespace()) {
      if (key.endsWith("/") || key.includes("//")) {
        throw new DomainError(
          "InvalidObjectName",
          "with a hierarchical namespace (ADLS Gen2) a key cannot end with '/' or contain an empty path segment",
          { key, reason: "hns-path" },
        );
      }
    }
  }

  async containerState(bucket: string, signal?: AbortSignal): Promise<ContainerState> {
    // Not a container name Azure accepts: no such container can exist.
    if (!isAzureContainerName(bucket)) return { state: "missing" };
    const container = await this.container(bucket);
    let props: Awaited<ReturnType<ContainerClient["getProperties"]>>;
    try {
      props = await this.calls.run(
        `read container ${bucket}`,
        signal,
        (abortSignal) => container.getProperties({ abortSignal }),
        (e) => azureStatus(e) === 404,
      );
    } catch (e) {
      if (azureStatus(e) === 404) return { state: "missing" };
      throw e;
    }
    const metadata = props.metadata ?? {};
    if (metadata[CONTAINER_DELETED] !== undefined) return { state: "deleted", metadata };
    const created = Date.parse(metadata[CONTAINER_CREATED] ?? "");
    const creationDate = Number.isFinite(created) ? new Date(created) : (props.lastModified ?? new Date(0));
    return { state: "live", info: { name: bucket, creationDate }, metadata };
  }

  /**
   * Trusts, for BUCKET_STATE_TRUST_MS from `sent` (performance.now() when the reads were sent),
   * that the bucket is live: its container and its deletion marker were read live.
   */
  trustLive(bucket: string, sent: number): void {
    this.liveBuckets.trust(bucket, sent);
  }

  /** Whether reads sent less than BUCKET_STATE_TRUST_MS ago found the bucket live. */
  trustedLive(bucket: string): boolean {
    return this.liveBuckets.trusted(bucket);
  }

  distrust(bucket: string): void {
    this.liveBuckets.distrust(bucket);
  }

  /**
   * The last state of the blob this process saw, possibly no longer the stored one: only for a
   * commit's first basis, whose conditional write names its ETag (a stale one fails with 412).
   */
  latest(bucket: string, name: string): BlobView | undefined {
    return this.last.get(`${bucket}\n${name}`);
  }

  remember(bucket: string, name: string, view: BlobView | null): void {
    const id = `${bucket}\n${name}`;
    if (view === null || !view.exists || view.azureEtag === null) this.last.delete(id);
    else this.last.set(id, view);
  }

  /** NoSuchBucket unless the bucket's container exists and is not marked deleted. */
  async requireBucket(bucket: string, signal?: AbortSignal): Promise<BucketInfo> {
    const found = await this.containerState(bucket, signal);
    if (found.state !== "live") throw noSuchBucket(bucket);
    return found.info;
  }

  /** The state of the blob at `name` (MISSING when there is none); NoSuchBucket. */
  async readView(
    bucket: string,
    name: string,
    signal?: AbortSignal,
    checkContainer = false,
  ): Promise<BlobView> {
    if (!isAzureContainerName(bucket)) throw noSuchBucket(bucket);
    const blob = await this.blob(bucket, name);
    const read = this.calls
      .run(
        `read ${bucket}/${name}`,
        signal,
        (abortSignal) => blob.getProperties({ abortSignal }),
        (e) => azureStatus(e) === 404,
      )
      .then(
        (props) => {
          const view = viewOf(props, `${bucket}/${name}`);
          this.remember(bucket, name, view);
          return view;
        },
        (e: unknown) => {
          this.remember(bucket, name, null);
          if (isBlobNotFound(e)) return MISSING;
          if (isContainerNotFound(e)) throw noSuchBucket(bucket);
          throw e;
        },
      );
    if (!checkContainer) return read;
    const [view] = await Promise.all([read, this.requireBucket(bucket, signal)]);
    return view;
  }
}
