import { createHash } from "node:crypto";
import {
  GetObjectCommand,
  HeadObjectCommand,
  ListBucketsCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  type S3Client,
} from "@aws-sdk/client-s3";
import { createS3Backend, type S3Backend, type S3BackendOptions } from "../../../src/backends/s3/index.js";
import type { fakeClock } from "../../../src/core/clock.js";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../../support/gateway.js";
import type { MultipartFixture } from "../multipart.contract.js";

/** fencegate's namespace in the store buckets, as the tests read it directly. */
export const META = ".fencegate/";

/**
 * The store under test: a second fencegate gateway (fs backend) in this process, with optional
 * fencing, so that its writes need no token. It honours If-Match / If-None-Match on PutObject
 * and CompleteMultipartUpload and answers a lost condition with 412.
 */
export function startStore(): Promise<TestGateway> {
  return startTestGateway({ env: { FENCEGATE_FENCING: "optional" } });
}

export function backendOptions(url: string, extra: Partial<S3BackendOptions> = {}): S3BackendOptions {
  return {
    endpoint: url,
    region: "us-east-1",
    credentials: CREDENTIALS,
    forcePathStyle: true,
    requestTimeoutMs: 10_000,
    ...extra,
  };
}

/** A client that reads the store directly, bypassing the backend. */
export function rawClient(store: TestGateway): S3Client {
  return store.s3({
    requestChecksumCalculation: "WHEN_REQUIRED",
    responseChecksumValidation: "WHEN_REQUIRED",
  });
}

export type S3Fixture = MultipartFixture & {
  store: TestGateway;
  raw: S3Client;
  current: () => S3Backend;
  /** Another backend on the same store (closed by cleanup). */
  another: (extra?: Partial<S3BackendOptions>) => S3Backend;
  leftovers: () => Promise<string[]>;
  storedParts: () => Promise<number>;
};

/**
 * An S3 backend on a store of its own (a fresh gateway per fixture, so that store-wide sweeps
 * and leftover checks see only this test's buckets); reopen = a new S3Backend on the same store.
 */
export async function s3Fixture(
  opts: { clock?: ReturnType<typeof fakeClock>; options?: Partial<S3BackendOptions> } = {},
): Promise<S3Fixture> {
  const store = await startStore();
  const raw = rawClient(store);
  const open = (extra: Partial<S3BackendOptions> = {}) =>
    createS3Backend(
      backendOptions(store.url, {
        ...(opts.clock ? { clock: opts.clock } : {}),
        multipartMaxAgeMs: 60_000,
        ...opts.options,
        ...extra,
      }),
    );
  let backend = open();
  const others: S3Backend[] = [];
  return {
    store,
    raw,
    get backend() {
      return backend;
    },
    ...(opts.clock ? { clock: opts.clock } : {}),
    current: () => backend,
    another(extra = {}) {
      const other = open(extra);
      others.push(other);
      return other;
    },
    async reopen() {
      await backend.close();
      backend = open();
      return backend;
    },
    async leftovers() {
      // Replaced blobs are removed a moment later, together: those waiting go first.
      for (const b of [backend, ...others]) await b.flushReplaced();
      return unreferencedBlobs(raw);
    },
    sweepAbandoned: () => backend.multipart.sweepAbandoned(),
    storedParts: () => countPartManifests(raw),
    async cleanup() {
      await backend.close();
      for (const other of others) await other.close();
      raw.destroy();
      await store.stop();
    },
  };
}

async function* names(raw: S3Client, bucket: string, prefix: string, delimiter?: string) {
  let token: string | undefined;
  do {
    const page = await raw.send(
      new ListObjectsV2Command({
        Bucket: bucket,
        Prefix: prefix,
        ...(delimiter ? { Delimiter: delimiter } : {}),
        ...(token ? { ContinuationToken: token } : {}),
      }),
    );
    for (const o of page.Contents ?? []) yield o.Key!;
    token = page.NextContinuationToken;
  } while (token);
}

export async function storeBuckets(raw: S3Client): Promise<string[]> {
  return ((await raw.send(new ListBucketsCommand({}))).Buckets ?? []).map((b) => b.Name!);
}

async function readJson(raw: S3Client, bucket: string, key: string): Promise<Record<string, unknown> | null> {
  try {
    const got = await raw.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    return JSON.parse(await got.Body!.transformToString()) as Record<string, unknown>;
  } catch (e) {
    if ((e as Error).name === "NoSuchKey") return null;
    throw e;
  }
}

/** The record name of a key, as the layout documents it (written out again here on purpose). */
export function recordName(key: string): string {
  const direct = `${META}r/${key}`;
  if (Buffer.byteLength(direct) <= 1024) return direct;
  return `${META}l/${createHash("sha256").update(key).digest("hex")}`;
}

/**
 * Read straight from the store, without the backend's code: every blob that neither the record
 * of its key (as the live version) nor a part manifest references, and every multipart upload
 * left open in the store.
 */
export async function unreferencedBlobs(raw: S3Client): Promise<string[]> {
  const found: string[] = [];
  for (const bucket of await storeBuckets(raw)) {
    for await (const name of names(raw, bucket, `${META}d/`)) {
      const id = name.slice(`${META}d/`.length);
      const head = await raw
        .send(new HeadObjectCommand({ Bucket: bucket, Key: name }))
        .catch((e: { name?: string }) => {
          // Removed since it was listed (a discard or a batch of replaced blobs finishing): not left over.
          if (e.name === "NotFound" || e.name === "NoSuchKey") return null;
          throw e;
        });
      if (!head) continue;
      const meta = head.Metadata ?? {};
      let referenced = false;
      if (meta["fg-kind"] === "part") {
        const part = await readJson(
          raw,
          bucket,
          `${META}u/${meta["fg-upload"]}/${String(meta["fg-part"]).padStart(5, "0")}`,
        );
        referenced = part?.blob === id;
      } else {
        const key = Buffer.from(meta["fg-key"] ?? "", "base64url").toString("utf8");
        const record = (await readJson(raw, bucket, recordName(key))) as {
          state?: string;
          live?: { blob?: string };
        } | null;
        referenced = record?.state === "live" && record.live?.blob === id;
      }
      if (!referenced) found.push(`${bucket}/${name}`);
    }
    const uploads = await raw.send(new ListMultipartUploadsCommand({ Bucket: bucket }));
    for (const u of uploads.Uploads ?? []) found.push(`${bucket}: store upload ${u.Key} ${u.UploadId}`);
  }
  return found;
}

/** How many part manifests the store holds, in all buckets. */
export async function countPartManifests(raw: S3Client): Promise<number> {
  let count = 0;
  for (const bucket of await storeBuckets(raw)) {
    for await (const name of names(raw, bucket, `${META}u/`)) {
      if (name.slice(`${META}u/`.length).includes("/")) count++;
    }
  }
  return count;
}
