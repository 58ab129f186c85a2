import type { Readable } from "node:stream";
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListBucketsCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
  UploadPartCopyCommand,
} from "@aws-sdk/client-s3";
import { type CallObserver, callOutcome } from "../../metrics/observe.js";
import type { ObjectHeaders } from "../storage-backend.js";
import { noAnswerInTime, startDeadline } from "./deadline.js";
import { classifyStoreError, storeDomainError, storeStatus } from "./store-errors.js";

/**
 * The store as fencegate uses it: a few S3 calls, each with a time limit (requestTimeoutMs for
 * the whole call, the SDK's retries included) and the caller's abort signal, and S3's failures
 * turned into DomainErrors (store-errors.ts). NoSuchKey answers null.
 *
 * Requests go without flexible checksums (`WHEN_REQUIRED`): some S3-compatible stores keep the
 * aws-chunked framing of a checksummed stream as data. Bodies are Buffers with an explicit
 * Content-Length; only GET bodies stream.
 */

type StoreOptions = {
  endpoint?: string;
  region: string;
  credentials?: { accessKeyId: string; secretAccessKey: string; sessionToken?: string };
  forcePathStyle?: boolean;
  requestTimeoutMs: number;
  /** Told of every call (its SDK command, outcome and latency, retries included): metrics. */
  observeCall?: CallObserver;
};

export type StoredObject = {
  etag: string;
  size: number;
  lastModified: Date;
  /** User metadata, names lower-cased. */
  metadata: Record<string, string>;
  headers: ObjectHeaders;
};

export type ListedObject = { name: string; size: number; etag: string; lastModified: Date };

type ListPage = { objects: ListedObject[]; prefixes: string[]; next?: string };

type ListRequest = {
  prefix?: string;
  startAfter?: string;
  delimiter?: string;
  maxKeys?: number;
  continuationToken?: string;
  signal?: AbortSignal;
};

/** How a conditional PUT ended. `unknown`: it may have taken effect (timeout, reset, 5xx). */
export type ConditionalPut =
  | { outcome: "written"; etag: string }
  | { outcome: "condition-failed" }
  | { outcome: "unknown"; error: unknown };

type PutRequest = {
  body: Buffer;
  ifMatch?: string;
  ifNoneMatch?: string;
  metadata?: Record<string, string>;
  contentType?: string;
  signal?: AbortSignal;
};

type Send = { signal?: AbortSignal | undefined };

export class Store {
  /** Names the store in messages: the endpoint, or Amazon S3 and its region. */
  readonly endpoint: string;
  private readonly client: S3Client;
  /** Single attempt: a retried conditional PUT could report its own first attempt as a lost race. */
  private readonly once: S3Client;

  constructor(private readonly opts: StoreOptions) {
    this.endpoint = opts.endpoint ? opts.endpoint : `Amazon S3 (${opts.region})`;
    const config = {
      region: opts.region,
      ...(opts.endpoint ? { endpoint: opts.endpoint } : {}),
      ...(opts.credentials ? { credentials: opts.credentials } : {}),
      forcePathStyle: opts.forcePathStyle ?? false,
      requestChecksumCalculation: "WHEN_REQUIRED" as const,
      responseChecksumValidation: "WHEN_REQUIRED" as const,
      // Built into the SDK's NodeHttpHandler: connect, wait for the headers, and any idle
      // stretch of a body each get the limit; throwOnRequestTimeout makes the wait an error.
      // The whole call, every attempt and the backoff between them, has the same limit (send):
      // a store that does not answer uses it up on the first attempt.
      requestHandler: {
        connectionTimeout: opts.requestTimeoutMs,
        requestTimeout: opts.requestTimeoutMs,
        socketTimeout: opts.requestTimeoutMs,
        throwOnRequestTimeout: true,
      },
    };
    this.client = new S3Client({ ...config, maxAttempts: 3 });
    this.once = new S3Client({ ...config, maxAttempts: 1 });
    if (opts.observeCall) {
      for (const client of [this.client, this.once]) observeCalls(client, opts.observeCall);
    }
  }

  destroy(): void {
    this.client.destroy();
    this.once.destroy();
  }

  /**
   * Runs `run` within requestTimeoutMs, the SDK's attempts and its backoff included; at the
   * deadline it fails with noAnswerInTime (a TimeoutError: an unknown outcome for a write). The
   * limit ends when `run` does: a streamed answer's body is then bounded by the handler's idle
   * limit alone, and may stream for as long as it moves.
   */
  private async within<T>(
    signal: AbortSignal | undefined,
    run: (abortSignal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    const deadline = startDeadline(this.opts.requestTimeoutMs, signal);
    try {
      return await deadline.race(run(deadline.signal));
    } finally {
      deadline.clear();
    }
  }

  /** One call `within` its deadline, its failure as a DomainError (503 when no answer came in time). */
  private async send<T>(
    run: (client: S3Client, abortSignal: AbortSignal) => Promise<T>,
    bucket: string | undefined,
    send: Send = {},
    client = this.client,
  ): Promise<T> {
    try {
      return await this.within(send.signal, (abortSignal) => run(client, abortSignal));
    } catch (e) {
      throw this.mapped(e, bucket, send.signal);
    }
  }

  /** A store failure as a DomainError; our own time limit's abort is a timeout, not an abort. */
  mapped(e: unknown, bucket?: string, callerSignal?: AbortSignal): unknown {
    if (classifyStoreError(e) === "aborted" && !callerSignal?.aborted) {
      return storeDomainError(noAnswerInTime(this.opts.requestTimeoutMs, e), this.endpoint, bucket);
    }
    return storeDomainError(e, this.endpoint, bucket);
  }

  /** A small object's text and ETag; null when there is no such key. */
  async getText(
    bucket: string,
    name: string,
    signal?: AbortSignal,
  ): Promise<{ text: string; etag: string } | null> {
    return this.send(
      async (client, abortSignal) => {
        try {
          const out = await client.send(new GetObjectCommand({ Bucket: bucket, Key: name }), { abortSignal });
          const text = (await out.Body?.transformToString("utf8")) ?? "";
          return { text, etag: out.ETag ?? "" };
        } catch (e) {
          if (classifyStoreError(e) === "no-such-key") return null;
          throw e;
        }
      },
      bucket,
      { signal },
    );
  }

  /**
   * An object's bytes as a stream (a range `bytes=a-b` when given); null when there is no such
   * key, or when `ifMatch` no longer matches.
   */
  async getStream(
    bucket: string,
    name: string,
    opts: { range?: { start: number; end: number }; ifMatch?: string; signal?: AbortSignal } = {},
  ): Promise<(StoredObject & { body: Readable }) | null> {
    return this.send(
      async (client, abortSignal) => {
        try {
          const out = await client.send(
            new GetObjectCommand({
              Bucket: bucket,
              Key: name,
              ...(opts.range ? { Range: `bytes=${opts.range.start}-${opts.range.end}` } : {}),
              ...(opts.ifMatch ? { IfMatch: opts.ifMatch } : {}),
            }),
            { abortSignal },
          );
          const body = out.Body as Readable;
          // The SDK stops listening to the signal once it has the response: a caller that goes
          // away while the body streams must still stop the download.
          if (opts.signal && !opts.signal.aborted) {
            const onAbort = () => body.destroy(opts.signal!.reason);
            opts.signal.addEventListener("abort", onAbort, { once: true });
            body.once("close", () => opts.signal!.removeEventListener("abort", onAbort));
          }
          const size = opts.range
            ? totalSize(out.ContentRange, out.ContentLength ?? 0)
            : (out.ContentLength ?? 0);
          return { ...describe(out, size), body };
        } catch (e) {
          // With If-Match: the object changed since the caller looked; null tells it to look again.
          const kind = classifyStoreError(e);
          if (kind === "no-such-key" || (opts.ifMatch && kind === "condition-failed")) return null;
          throw e;
        }
      },
      bucket,
      { signal: opts.signal },
    );
  }

  /** An object's description; null when there is none. NoSuchBucket when the store says so. */
  async head(bucket: string, name: string, signal?: AbortSignal): Promise<StoredObject | null> {
    return this.send(
      async (client, abortSignal) => {
        try {
          const out = await client.send(new HeadObjectCommand({ Bucket: bucket, Key: name }), {
            abortSignal,
          });
          return describe(out, out.ContentLength ?? 0);
        } catch (e) {
          const kind = classifyStoreError(e);
          if (kind === "no-such-key" || kind === "not-found") return null;
          throw e;
        }
      },
      bucket,
      { signal },
    );
  }

  /** An unconditional PUT (a new blob, a manifest); returns the store's ETag. */
  async put(bucket: string, name: string, req: PutRequest): Promise<string> {
    return this.send(
      async (client, abortSignal) =>
        (await client.send(putCommand(bucket, name, req), { abortSignal })).ETag ?? "",
      bucket,
      { signal: req.signal },
    );
  }

  /**
   * A PUT with If-Match / If-None-Match, sent once. A lost condition (412, or 409
   * ConditionalRequestConflict) is an answer, not an error; so is a failure whose outcome is
   * unknown. A request the store certainly refused or never got throws its DomainError.
   */
  async putConditional(bucket: string, name: string, req: PutRequest): Promise<ConditionalPut> {
    try {
      const out = await this.within(req.signal, (abortSignal) =>
        this.once.send(putCommand(bucket, name, req), { abortSignal }),
      );
      return { outcome: "written", etag: out.ETag ?? "" };
    } catch (e) {
      switch (classifyStoreError(e)) {
        case "condition-failed":
          return { outcome: "condition-failed" };
        case "no-such-key":
          // S3 answers If-Match on an object that is gone with 404: the condition failed all the same.
          if (req.ifMatch) return { outcome: "condition-failed" };
          throw this.mapped(e, bucket);
        case "unavailable":
        case "aborted":
          return { outcome: "unknown", error: e };
        default:
          throw this.mapped(e, bucket);
      }
    }
  }

  /** Removes an object; one that is already gone is fine. */
  async delete(bucket: string, name: string): Promise<void> {
    await this.send(async (client, abortSignal) => {
      try {
        await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: name }), { abortSignal });
      } catch (e) {
        if (classifyStoreError(e) !== "no-such-key") throw e;
      }
    }, bucket);
  }

  /**
   * Removes objects with one DeleteObjects request (at most 1000 names); ones already gone are
   * fine. Throws when the store refused the request or any of the names.
   */
  async deleteMany(bucket: string, names: string[]): Promise<void> {
    if (names.length === 0) return;
    await this.send(async (client, abortSignal) => {
      const out = await client.send(
        new DeleteObjectsCommand({
          Bucket: bucket,
          Delete: { Objects: names.map((Key) => ({ Key })), Quiet: true },
        }),
        { abortSignal },
      );
      const failed = (out.Errors ?? []).filter((e) => e.Code !== "NoSuchKey");
      if (failed.length > 0) {
        throw new Error(
          `the store kept ${failed.length} of ${names.length} objects: ${failed[0]?.Code} ${failed[0]?.Message}`,
        );
      }
    }, bucket);
  }

  /** One page of ListObjectsV2 (keys url-encoded on the wire, so that any key survives XML). */
  async list(bucket: string, req: ListRequest): Promise<ListPage> {
    return this.send(
      async (client, abortSignal) => {
        const out = await client.send(
          new ListObjectsV2Command({
            Bucket: bucket,
            EncodingType: "url",
            ...(req.prefix ? { Prefix: req.prefix } : {}),
            ...(req.startAfter ? { StartAfter: req.startAfter } : {}),
            ...(req.delimiter ? { Delimiter: req.delimiter } : {}),
            ...(req.continuationToken ? { ContinuationToken: req.continuationToken } : {}),
            MaxKeys: req.maxKeys ?? 1000,
          }),
          { abortSignal },
        );
        const page: ListPage = {
          objects: (out.Contents ?? []).map((o) => ({
            name: urlDecode(o.Key ?? ""),
            size: o.Size ?? 0,
            etag: o.ETag ?? "",
            lastModified: o.LastModified ?? new Date(0),
          })),
          prefixes: (out.CommonPrefixes ?? []).map((p) => urlDecode(p.Prefix ?? "")),
        };
        if (out.IsTruncated && out.NextContinuationToken) page.next = out.NextContinuationToken;
        return page;
      },
      bucket,
      { signal: req.signal },
    );
  }

  /** Every object under a prefix, page by page. */
  async *listAll(bucket: string, prefix: string, delimiter?: string): AsyncGenerator<ListPage> {
    let continuationToken: string | undefined;
    do {
      const page = await this.list(bucket, {
        prefix,
        ...(delimiter ? { delimiter } : {}),
        ...(continuationToken ? { continuationToken } : {}),
      });
      yield page;
      continuationToken = page.next;
    } while (continuationToken);
  }

  /** The account's buckets (those starting with `prefix`, where the store can filter). */
  async listBuckets(prefix?: string): Promise<{ name: string; creationDate: Date }[]> {
    const buckets: { name: string; creationDate: Date }[] = [];
    let token: string | undefined;
    do {
      const input = { ...(token ? { ContinuationToken: token } : {}), ...(prefix ? { Prefix: prefix } : {}) };
      const out = await this.send(
        (client, abortSignal) => client.send(new ListBucketsCommand(input), { abortSignal }),
        undefined,
      );
      for (const b of out.Buckets ?? []) {
        if (b.Name) buckets.push({ name: b.Name, creationDate: b.CreationDate ?? new Date(0) });
      }
      token = out.ContinuationToken;
    } while (token);
    return buckets;
  }

  /** Whether the bucket exists: ours, missing, or someone else's (403). */
  async bucketState(bucket: string): Promise<"ours" | "missing" | "foreign"> {
    return this.send(async (client, abortSignal) => {
      try {
        await client.send(new HeadBucketCommand({ Bucket: bucket }), { abortSignal });
        return "ours";
      } catch (e) {
        const kind = classifyStoreError(e);
        if (kind === "not-found" || kind === "no-such-bucket") return "missing";
        if (storeStatus(e) === 403) return "foreign";
        throw e;
      }
    }, bucket);
  }

  /** False when it already exists (BucketAlreadyOwnedByYou or BucketAlreadyExists). */
  async createBucket(bucket: string): Promise<boolean> {
    return this.send(async (client, abortSignal) => {
      try {
        const location =
          this.opts.region && this.opts.region !== "us-east-1"
            ? { CreateBucketConfiguration: { LocationConstraint: this.opts.region as never } }
            : {};
        await client.send(new CreateBucketCommand({ Bucket: bucket, ...location }), { abortSignal });
        return true;
      } catch (e) {
        if (classifyStoreError(e) === "bucket-exists") return false;
        throw e;
      }
    }, bucket);
  }

  /** False when the store says the bucket is not empty. */
  async deleteBucket(bucket: string): Promise<boolean> {
    return this.send(async (client, abortSignal) => {
      try {
        await client.send(new DeleteBucketCommand({ Bucket: bucket }), { abortSignal });
        return true;
      } catch (e) {
        if (classifyStoreError(e) === "bucket-not-empty") return false;
        throw e;
      }
    }, bucket);
  }

  async createMultipart(
    bucket: string,
    name: string,
    metadata: Record<string, string>,
    signal?: AbortSignal,
  ): Promise<string> {
    const out = await this.send(
      (client, abortSignal) =>
        client.send(
          new CreateMultipartUploadCommand({
            Bucket: bucket,
            Key: name,
            Metadata: metadata,
            ContentType: "application/octet-stream",
          }),
          { abortSignal },
        ),
      bucket,
      { signal },
    );
    if (!out.UploadId) throw new Error(`the store at ${this.endpoint} returned no upload id`);
    return out.UploadId;
  }

  async uploadPart(
    bucket: string,
    name: string,
    uploadId: string,
    partNumber: number,
    body: Buffer,
    signal?: AbortSignal,
  ): Promise<string> {
    const out = await this.send(
      (client, abortSignal) =>
        client.send(
          new UploadPartCommand({
            Bucket: bucket,
            Key: name,
            UploadId: uploadId,
            PartNumber: partNumber,
            Body: body,
            ContentLength: body.length,
          }),
          { abortSignal },
        ),
      bucket,
      { signal },
    );
    return out.ETag ?? "";
  }

  /** A part copied from another object of the bucket, server-side; null when the source is gone. */
  async uploadPartCopy(
    bucket: string,
    name: string,
    uploadId: string,
    partNumber: number,
    source: string,
    signal?: AbortSignal,
  ): Promise<string | null> {
    return this.send(
      async (client, abortSignal) => {
        try {
          const out = await client.send(
            new UploadPartCopyCommand({
              Bucket: bucket,
              Key: name,
              UploadId: uploadId,
              PartNumber: partNumber,
              CopySource: `${bucket}/${encodeURIComponent(source)}`,
            }),
            { abortSignal },
          );
          return out.CopyPartResult?.ETag ?? "";
        } catch (e) {
          if (classifyStoreError(e) === "no-such-key") return null;
          throw e;
        }
      },
      bucket,
      { signal },
    );
  }

  async completeMultipart(
    bucket: string,
    name: string,
    uploadId: string,
    parts: { partNumber: number; etag: string }[],
    signal?: AbortSignal,
  ): Promise<string> {
    const out = await this.send(
      (client, abortSignal) =>
        client.send(
          new CompleteMultipartUploadCommand({
            Bucket: bucket,
            Key: name,
            UploadId: uploadId,
            MultipartUpload: { Parts: parts.map((p) => ({ PartNumber: p.partNumber, ETag: p.etag })) },
          }),
          { abortSignal },
        ),
      bucket,
      { signal },
    );
    return out.ETag ?? "";
  }

  /** A completion with If-Match / If-None-Match, answered like putConditional. */
  async completeConditional(
    bucket: string,
    name: string,
    uploadId: string,
    parts: { partNumber: number; etag: string }[],
    conditions: { ifMatch?: string; ifNoneMatch?: string },
  ): Promise<ConditionalPut> {
    try {
      const out = await this.within(undefined, (abortSignal) =>
        this.once.send(
          new CompleteMultipartUploadCommand({
            Bucket: bucket,
            Key: name,
            UploadId: uploadId,
            MultipartUpload: { Parts: parts.map((p) => ({ PartNumber: p.partNumber, ETag: p.etag })) },
            ...(conditions.ifMatch ? { IfMatch: conditions.ifMatch } : {}),
            ...(conditions.ifNoneMatch ? { IfNoneMatch: conditions.ifNoneMatch } : {}),
          }),
          { abortSignal },
        ),
      );
      return { outcome: "written", etag: out.ETag ?? "" };
    } catch (e) {
      switch (classifyStoreError(e)) {
        case "condition-failed":
          return { outcome: "condition-failed" };
        case "no-such-key":
          if (conditions.ifMatch) return { outcome: "condition-failed" };
          throw this.mapped(e, bucket);
        case "unavailable":
        case "aborted":
          return { outcome: "unknown", error: e };
        default:
          throw this.mapped(e, bucket);
      }
    }
  }

  /** The store's own multipart uploads under a prefix (blob uploads a crash left open). */
  async listStoreUploads(
    bucket: string,
    prefix: string,
  ): Promise<{ name: string; uploadId: string; initiated: Date }[]> {
    const found: { name: string; uploadId: string; initiated: Date }[] = [];
    let keyMarker: string | undefined;
    let uploadIdMarker: string | undefined;
    for (;;) {
      const out = await this.send(
        (client, abortSignal) =>
          client.send(
            new ListMultipartUploadsCommand({
              Bucket: bucket,
              Prefix: prefix,
              ...(keyMarker !== undefined ? { KeyMarker: keyMarker } : {}),
              ...(uploadIdMarker !== undefined ? { UploadIdMarker: uploadIdMarker } : {}),
            }),
            { abortSignal },
          ),
        bucket,
      );
      for (const u of out.Uploads ?? []) {
        if (u.Key && u.UploadId) {
          found.push({ name: u.Key, uploadId: u.UploadId, initiated: u.Initiated ?? new Date(0) });
        }
      }
      if (!out.IsTruncated || out.NextKeyMarker === undefined) return found;
      keyMarker = out.NextKeyMarker;
      uploadIdMarker = out.NextUploadIdMarker;
    }
  }

  /** Best effort: an upload left behind costs storage until the bucket's lifecycle rule or GC. */
  async abortMultipart(bucket: string, name: string, uploadId: string): Promise<void> {
    await this.send(async (client, abortSignal) => {
      try {
        await client.send(
          new AbortMultipartUploadCommand({ Bucket: bucket, Key: name, UploadId: uploadId }),
          { abortSignal },
        );
      } catch (e) {
        if (classifyStoreError(e) !== "no-such-upload") throw e;
      }
    }, bucket);
  }
}

function putCommand(bucket: string, name: string, req: PutRequest): PutObjectCommand {
  return new PutObjectCommand({
    Bucket: bucket,
    Key: name,
    Body: req.body,
    ContentLength: req.body.length,
    ContentType: req.contentType ?? "application/octet-stream",
    ...(req.metadata ? { Metadata: req.metadata } : {}),
    ...(req.ifMatch ? { IfMatch: req.ifMatch } : {}),
    ...(req.ifNoneMatch ? { IfNoneMatch: req.ifNoneMatch } : {}),
  });
}

type Described = {
  ETag?: string;
  LastModified?: Date;
  Metadata?: Record<string, string>;
  ContentType?: string;
  ContentEncoding?: string;
  ContentDisposition?: string;
  ContentLanguage?: string;
  CacheControl?: string;
  ExpiresString?: string;
};

function describe(out: Described, size: number): StoredObject {
  const headers: ObjectHeaders = {};
  if (out.ContentType) headers.contentType = out.ContentType;
  if (out.ContentEncoding) headers.contentEncoding = out.ContentEncoding;
  if (out.ContentDisposition) headers.contentDisposition = out.ContentDisposition;
  if (out.ContentLanguage) headers.contentLanguage = out.ContentLanguage;
  if (out.CacheControl) headers.cacheControl = out.CacheControl;
  if (out.ExpiresString) headers.expires = out.ExpiresString;
  const metadata: Record<string, string> = {};
  for (const [name, value] of Object.entries(out.Metadata ?? {})) metadata[name.toLowerCase()] = value;
  return { etag: out.ETag ?? "", size, lastModified: out.LastModified ?? new Date(0), metadata, headers };
}

/** `bytes a-b/total` → total. */
function totalSize(contentRange: string | undefined, fallback: number): number {
  const total = contentRange ? Number(contentRange.split("/")[1]) : Number.NaN;
  return Number.isSafeInteger(total) ? total : fallback;
}

/** S3's `encoding-type=url`: percent-encoding, and `+` for a space on Amazon S3. */
function urlDecode(s: string): string {
  return decodeURIComponent(s.replace(/\+/g, " "));
}

/** Tells `observe` of each command the client sends, once per call (its retries included). */
function observeCalls(client: S3Client, observe: CallObserver): void {
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const started = performance.now();
      const operation = (context.commandName ?? "Unknown").replace(/Command$/, "");
      try {
        const out = await next(args);
        observe(operation, "ok", (performance.now() - started) / 1000);
        return out;
      } catch (e) {
        observe(operation, callOutcome(e), (performance.now() - started) / 1000);
        throw e;
      }
    },
    { step: "initialize", name: "fencegateObserveCalls" },
  );
}
