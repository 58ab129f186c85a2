import { DomainError } from "../../core/errors.js";
import { MAX_OBJECT_KEY_BYTES } from "../../core/key-rules.js";
import type { TxDomain } from "../../core/tx.js";
import type { TransactionLog } from "../../fence/commit-port.js";
import type {
  BucketInfo,
  CompleteUploadInput,
  CreateBucketOptions,
  CreateUploadInput,
  DeleteObjectInput,
  FencedCommit,
  InFlightWrites,
  ListInput,
  ListPartsInput,
  ListResult,
  ListUploadsInput,
  ListUploadsResult,
  MultipartStore,
  MultipartUpload,
  PutObjectInput,
  RangeRequest,
  StorageBackend,
  SystemRecords,
  UploadPartInput,
  UploadRef,
} from "../storage-backend.js";

/**
 * Where a gateway bucket lives: a backend, the bucket or container there, and a key prefix under
 * which its objects are kept (several gateway buckets may share one target under different
 * prefixes).
 */
export type BucketRoute = {
  backend: StorageBackend;
  target: string;
  prefix: string;
  /** Which store the backend is (StoreIdentity.key): equal for two backends that are one store. */
  store?: string;
};

type RoutedBackendOptions = {
  /** Configured gateway buckets. */
  routes: ReadonlyMap<string, BucketRoute>;
  /** Where every other bucket lives, under its own name and without a prefix. */
  fallback: StorageBackend;
  /** Which store the fallback is (StoreIdentity.key). */
  fallbackStore?: string;
  /** The fallback's bucket of fencegate's own records (src/epochs/): no request may reach it. */
  systemBucket?: string;
  /**
   * Refuse keys under each backend's reserved prefix, and leave them out of listings: the view of
   * S3 requests. fencegate's own users of the store (the audit archive) go without.
   */
  guardMeta?: boolean;
};

/**
 * A StorageBackend that sends each gateway bucket to its own backend, target and prefix, and
 * translates keys, listings and uploads on the way. The fencing core asks `domainOf(bucket)`:
 * buckets of the embedded fs backend still get their lease checks inside its transactions when
 * other buckets live in S3 or Azure.
 */
export class RoutedBackend implements StorageBackend {
  readonly kind: string;
  readonly multipart: MultipartStore;
  /** Only when every bucket commits in the same domain; per bucket, see domainOf. */
  readonly domain?: TxDomain;
  /**
   * Store buckets of the fallback's store that configured gateway buckets keep their objects in,
   * with those gateway buckets: the fallback does not serve them under their own name, or one
   * stored object would be reachable under two gateway names, whose leases do not exclude each
   * other.
   */
  private readonly owned = new Map<string, string[]>();
  /** The fallback's system records, when it is a remote store. */
  readonly systemRecords?: (bucket: string) => SystemRecords;

  constructor(private readonly opts: RoutedBackendOptions) {
    for (const [name, route] of opts.routes) {
      const onFallbackStore =
        route.backend === opts.fallback || (route.store !== undefined && route.store === opts.fallbackStore);
      if (!onFallbackStore || opts.routes.has(route.target)) continue;
      this.owned.set(route.target, [...(this.owned.get(route.target) ?? []), name]);
    }
    const backends = this.backends();
    this.kind = [...new Set(backends.map((b) => b.kind))].join("+");
    const domains = new Set(backends.map((b) => b.domain));
    if (domains.size === 1) {
      const [only] = domains;
      if (only) this.domain = only;
    }
    this.multipart = new RoutedMultipart(this);
    const { fallback } = opts;
    if (fallback.systemRecords) this.systemRecords = (bucket) => fallback.systemRecords!(bucket);
  }

  /**
   * The route of a gateway bucket; every request's bucket comes through here. The system bucket
   * is refused (fencegate's own records); so is a bucket the fallback would serve from a store
   * bucket that a configured gateway bucket keeps its objects in, as a bucket the caller may not
   * access: the configured bucket owns those objects (and their leases).
   */
  route(bucket: string): BucketRoute {
    const configured = this.opts.routes.get(bucket);
    const route = configured ?? { backend: this.opts.fallback, target: bucket, prefix: "" };
    if (this.isSystem(bucket, route)) {
      throw new DomainError("AccessDenied", `bucket ${bucket} is reserved for fencegate's own records`, {
        bucket,
      });
    }
    const owners = configured ? undefined : this.owned.get(bucket);
    if (owners) {
      const names = owners.map((n) => `"${n}"`).join(", ");
      throw new DomainError(
        "AccessDenied",
        `bucket "${bucket}" is where the configured gateway bucket${owners.length > 1 ? "s" : ""} ${names} ` +
          `keep${owners.length > 1 ? "" : "s"} its objects; reach them through ${owners.length > 1 ? "those" : "it"}`,
      );
    }
    return route;
  }

  /** The system bucket, by its name or as the target of a configured bucket. */
  private isSystem(bucket: string, route: BucketRoute): boolean {
    const system = this.opts.systemBucket;
    return bucket === system || (route.backend === this.opts.fallback && route.target === system);
  }

  domainOf(bucket: string): TxDomain | undefined {
    return this.route(bucket).backend.domain;
  }

  /** The transaction records of a gateway bucket's backend, keys translated; undefined: none. */
  transactionLog(bucket: string): TransactionLog | undefined {
    const r = this.route(bucket);
    const log = r.backend.transactionLog?.(r.target);
    if (!log) return undefined;
    return { ...log, settle: (key) => log.settle(this.storeKey(r, key)) };
  }

  /** Every distinct backend behind the gateway. */
  backends(): StorageBackend[] {
    return [...new Set([this.opts.fallback, ...[...this.opts.routes.values()].map((r) => r.backend)])];
  }

  /**
   * The key in the target: refused under the store's own namespace, or when the prefix makes it
   * longer than a store accepts. Every request's key comes through here.
   */
  storeKey(route: BucketRoute, key: string): string {
    const stored = route.prefix + key;
    const reserved = this.opts.guardMeta ? route.backend.reservedKeyPrefix : undefined;
    if (reserved !== undefined && stored.startsWith(reserved)) {
      throw new DomainError(
        "InvalidObjectName",
        `object keys starting with '${reserved}' are reserved by fencegate on this backend`,
        { key, reason: "reserved-prefix" },
      );
    }
    if (route.prefix === "") return key;
    if (Buffer.byteLength(stored) > MAX_OBJECT_KEY_BYTES) {
      throw new DomainError(
        "KeyTooLong",
        `object key is too long for this bucket: with its prefix it would be over ${MAX_OBJECT_KEY_BYTES} bytes`,
        { reason: "too-long" },
      );
    }
    return stored;
  }

  async listBuckets(): Promise<BucketInfo[]> {
    const configured = [...this.opts.routes.entries()];
    const own = (await this.opts.fallback.listBuckets()).filter(
      (b) => !this.owned.has(b.name) && b.name !== this.opts.systemBucket,
    );
    const listed = new Map(own.map((b) => [b.name, b]));
    for (const [name, route] of configured) {
      if (listed.has(name) || this.isSystem(name, route)) continue;
      const target = await route.backend.headBucket(route.target).catch(() => null);
      if (target) listed.set(name, { name, creationDate: target.creationDate });
    }
    return [...listed.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** A prefix route's location constraint is its target's (the store bucket it shares). */
  async createBucket(bucket: string, opts?: CreateBucketOptions): Promise<void> {
    const route = this.route(bucket);
    await route.backend.createBucket(route.target, opts);
  }

  async bucketLocation(bucket: string): Promise<string> {
    const route = this.route(bucket);
    return route.backend.bucketLocation(route.target).catch((e) => {
      throw renameBucket(e, bucket);
    });
  }

  async headBucket(bucket: string): Promise<BucketInfo> {
    const route = this.route(bucket);
    const info = await route.backend.headBucket(route.target).catch((e) => {
      throw renameBucket(e, bucket);
    });
    return { name: bucket, creationDate: info.creationDate };
  }

  async deleteBucket(bucket: string, inFlight?: InFlightWrites): Promise<void> {
    const route = this.route(bucket);
    if (route.prefix !== "") {
      throw new DomainError(
        "MethodNotAllowed",
        "this bucket is a prefix of a shared store bucket, set in the configuration; it cannot be deleted through the gateway",
      );
    }
    // A route without a prefix keeps the keys: the gateway bucket's intents are the target's.
    const writes = inFlight ? () => inFlight(bucket) : undefined;
    await route.backend.deleteBucket(route.target, writes).catch((e) => {
      throw renameBucket(e, bucket);
    });
  }

  async writeState(bucket: string, key: string) {
    const r = this.route(bucket);
    return r.backend.writeState(r.target, this.storeKey(r, key)).catch((e) => {
      throw renameBucket(e, bucket);
    });
  }

  async putObject(input: PutObjectInput, commit: FencedCommit) {
    const r = this.route(input.bucket);
    return r.backend.putObject({ ...input, bucket: r.target, key: this.storeKey(r, input.key) }, commit);
  }

  async deleteObject(input: DeleteObjectInput, commit: FencedCommit) {
    const r = this.route(input.bucket);
    return r.backend.deleteObject({ bucket: r.target, key: this.storeKey(r, input.key) }, commit);
  }

  async raiseHighestToken(bucket: string, key: string, token: number) {
    const r = this.route(bucket);
    return r.backend.raiseHighestToken(r.target, this.storeKey(r, key), token);
  }

  async writeNote(bucket: string, key: string): Promise<string | null> {
    const r = this.route(bucket);
    return r.backend.writeNote ? r.backend.writeNote(r.target, this.storeKey(r, key)) : null;
  }

  async headObject(bucket: string, key: string) {
    const r = this.route(bucket);
    const info = await r.backend.headObject(r.target, this.storeKey(r, key));
    return { ...info, key };
  }

  async readStaged(bucket: string, key: string, version: unknown, range?: RangeRequest) {
    const r = this.route(bucket);
    if (!r.backend.readStaged)
      throw new DomainError("NotImplemented", "this bucket's backend stages no writes");
    const got = await r.backend.readStaged(r.target, this.storeKey(r, key), version, range);
    return { ...got, info: { ...got.info, key } };
  }

  async getObject(bucket: string, key: string, range?: RangeRequest, signal?: AbortSignal) {
    const r = this.route(bucket);
    const got = await r.backend.getObject(r.target, this.storeKey(r, key), range, signal);
    return { ...got, info: { ...got.info, key } };
  }

  async listObjects(input: ListInput): Promise<ListResult> {
    const r = this.route(input.bucket);
    const reserved = this.opts.guardMeta ? r.backend.reservedKeyPrefix : undefined;
    const hidden = reserved !== undefined ? { hidden: reserved } : {};
    if (r.prefix === "") return r.backend.listObjects({ ...input, bucket: r.target, ...hidden });
    const result = await r.backend.listObjects({
      ...input,
      ...hidden,
      bucket: r.target,
      prefix: r.prefix + (input.prefix ?? ""),
      ...(input.startAfter !== undefined ? { startAfter: r.prefix + input.startAfter } : {}),
    });
    const strip = (k: string) => k.slice(r.prefix.length);
    return {
      objects: result.objects.map((o) => ({ ...o, key: strip(o.key) })),
      commonPrefixes: result.commonPrefixes.map(strip),
      isTruncated: result.isTruncated,
      ...(result.nextStartAfter !== undefined ? { nextStartAfter: strip(result.nextStartAfter) } : {}),
    };
  }

  async highestToken(bucket: string, key: string) {
    const r = this.route(bucket);
    return r.backend.highestToken(r.target, this.storeKey(r, key));
  }

  async close(): Promise<void> {
    for (const backend of this.backends()) await backend.close();
  }
}

/** Multipart uploads through the same routes. */
class RoutedMultipart implements MultipartStore {
  constructor(private readonly routed: RoutedBackend) {}

  private ref<T extends UploadRef>(input: T): { store: MultipartStore; input: T; route: BucketRoute } {
    const route = this.routed.route(input.bucket);
    return {
      store: route.backend.multipart,
      route,
      input: { ...input, bucket: route.target, key: this.routed.storeKey(route, input.key) },
    };
  }

  private back(upload: MultipartUpload, bucket: string, route: BucketRoute): MultipartUpload {
    return { ...upload, bucket, key: upload.key.slice(route.prefix.length) };
  }

  async createUpload(input: CreateUploadInput, commit: FencedCommit) {
    const route = this.routed.route(input.bucket);
    return route.backend.multipart.createUpload(
      { ...input, bucket: route.target, key: this.routed.storeKey(route, input.key) },
      commit,
    );
  }

  async getUpload(ref: UploadRef) {
    const { store, input, route } = this.ref(ref);
    return this.back(await store.getUpload(input), ref.bucket, route);
  }

  async uploadPart(part: UploadPartInput, commit: FencedCommit) {
    const { store, input } = this.ref(part);
    return store.uploadPart(input, commit);
  }

  async completeUpload(complete: CompleteUploadInput, commit: FencedCommit) {
    const { store, input } = this.ref(complete);
    return store.completeUpload(input, commit);
  }

  async abortUpload(ref: UploadRef) {
    const { store, input } = this.ref(ref);
    return store.abortUpload(input);
  }

  async completedBy(ref: UploadRef) {
    const { store, input } = this.ref(ref);
    return store.completedBy(input);
  }

  async listParts(list: ListPartsInput) {
    const { store, input, route } = this.ref(list);
    const result = await store.listParts(input);
    return { ...result, upload: this.back(result.upload, list.bucket, route) };
  }

  async listUploads(input: ListUploadsInput): Promise<ListUploadsResult> {
    const route = this.routed.route(input.bucket);
    const p = route.prefix;
    const result = await route.backend.multipart.listUploads({
      ...input,
      bucket: route.target,
      prefix: p + (input.prefix ?? ""),
      ...(input.keyMarker !== undefined ? { keyMarker: p + input.keyMarker } : {}),
    });
    const strip = (k: string) => k.slice(p.length);
    return {
      uploads: result.uploads.map((u) => this.back(u, input.bucket, route)),
      commonPrefixes: result.commonPrefixes.map(strip),
      isTruncated: result.isTruncated,
      ...(result.nextKeyMarker !== undefined ? { nextKeyMarker: strip(result.nextKeyMarker) } : {}),
      ...(result.nextUploadIdMarker !== undefined ? { nextUploadIdMarker: result.nextUploadIdMarker } : {}),
    };
  }
}

/** A store's NoSuchBucket names the target; the client asked for the gateway bucket. */
function renameBucket(e: unknown, bucket: string): unknown {
  if (e instanceof DomainError && e.code === "NoSuchBucket") {
    return new DomainError("NoSuchBucket", e.message, { ...e.details, bucket });
  }
  return e;
}
