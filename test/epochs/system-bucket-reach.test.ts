/**
 * No S3 request reaches fencegate's own records: neither the system bucket that holds the token
 * epochs (every request on it answers 403 AccessDenied, and ListBuckets never shows it) nor the
 * meta namespace inside a bucket (keys under `.fencegate/` are refused, and never listed). Through
 * the gateway, with the AWS SDK, on S3 (a second fencegate as the store) and on Azure (Azurite).
 */
import {
  CopyObjectCommand,
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
  type S3Client,
} from "@aws-sdk/client-s3";
import { BlobServiceClient } from "@azure/storage-blob";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createS3Backend } from "../../src/backends/s3/index.js";
import { unfencedCommit } from "../../src/fence/commit.js";
import { backendOptions, rawClient, startStore } from "../backends/s3/s3-fixture.js";
import { startAzurite } from "../support/azurite.js";
import { verifiedBody } from "../support/bodies.js";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../support/gateway.js";
import { type RedisServer, startRedis } from "../support/redis.js";
import { requireTools } from "../support/tools.js";
import { grantTokens } from "./epochs-kit.js";

requireTools("redis-server");

const SYSTEM = "fencegate-system";
const EPOCH_0 = ".fencegate/epochs/0000000";

/** What the test needs of a store besides the gateway: reading it directly. */
type Store = {
  name: string;
  env: Record<string, string>;
  /** The bytes of a store object, or null when there is none. */
  read(bucket: string, name: string): Promise<string | null>;
  /** Every store object under `prefix`. */
  names(bucket: string, prefix: string): Promise<string[]>;
  /** Leaves an object under the meta prefix of `bucket`, as older versions could. */
  plantMeta(bucket: string, key: string): Promise<void>;
  /** The name of an object of fencegate's own in `bucket`, made by writing `key` through `s3`. */
  metaObject(s3: S3Client, bucket: string, key: string): Promise<string>;
  stop(): Promise<void>;
};

async function s3Store(): Promise<Store> {
  const store = await startStore();
  const raw = rawClient(store);
  const names = async (bucket: string, prefix: string) =>
    ((await raw.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix }))).Contents ?? []).map(
      (o) => o.Key!,
    );
  return {
    name: "s3",
    env: {
      FENCEGATE_BACKEND: "s3",
      FENCEGATE_S3_ENDPOINT: store.url,
      FENCEGATE_S3_REGION: "us-east-1",
      FENCEGATE_S3_ACCESS_KEY_ID: CREDENTIALS.accessKeyId,
      FENCEGATE_S3_SECRET_ACCESS_KEY: CREDENTIALS.secretAccessKey,
      FENCEGATE_S3_FORCE_PATH_STYLE: "true",
    },
    async read(bucket, name) {
      try {
        return await (
          await raw.send(new GetObjectCommand({ Bucket: bucket, Key: name }))
        ).Body!.transformToString();
      } catch (e) {
        if ((e as Error).name === "NoSuchKey") return null;
        throw e;
      }
    },
    names,
    async plantMeta(bucket, key) {
      // Through the backend itself, below the gateway's routing: a record `.fencegate/r/<key>`.
      const backend = createS3Backend(backendOptions(store.url));
      try {
        await backend.putObject(
          { bucket, key, body: verifiedBody("planted"), metadata: { headers: {}, userMetadata: {} } },
          unfencedCommit(),
        );
      } finally {
        await backend.close();
      }
    },
    async metaObject(s3, bucket, key) {
      await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: "data" }));
      return `.fencegate/r/${key}`;
    },
    async stop() {
      raw.destroy();
      await store.stop();
    },
  };
}

async function azureStore(): Promise<Store> {
  const azurite = await startAzurite({ inMemory: true });
  const service = BlobServiceClient.fromConnectionString(azurite.connectionString);
  const names = async (bucket: string, prefix: string) => {
    const found: string[] = [];
    for await (const b of service.getContainerClient(bucket).listBlobsFlat({ prefix })) found.push(b.name);
    return found;
  };
  return {
    name: "azure",
    env: { FENCEGATE_BACKEND: "azure", FENCEGATE_AZURE_CONNECTION_STRING: azurite.connectionString },
    async read(bucket, name) {
      const blob = service.getContainerClient(bucket).getBlobClient(name);
      if (!(await blob.exists())) return null;
      return (await blob.downloadToBuffer()).toString();
    },
    names,
    async plantMeta(bucket, key) {
      await service.getContainerClient(bucket).getBlockBlobClient(key).upload("planted", 7);
    },
    async metaObject(s3, bucket, key) {
      // An open multipart upload: its record is a blob under the meta prefix.
      const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: key }));
      return `.fencegate/uploads/${UploadId}`;
    },
    async stop() {
      await azurite.stop();
    },
  };
}

/** The SDK error of a call that must fail, or a failure of the test when it succeeded. */
async function failure(call: Promise<unknown>): Promise<Error & { $metadata: { httpStatusCode?: number } }> {
  const outcome = await call.then(
    (answer) => ({ answer }),
    (error: unknown) => ({ error }),
  );
  if ("answer" in outcome) {
    const status = (outcome.answer as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
    throw new Error(`the request succeeded (${status})`);
  }
  return outcome.error as Error & { $metadata: { httpStatusCode?: number } };
}

async function expectReserved(call: Promise<unknown>, head = false): Promise<void> {
  const e = await failure(call);
  expect(e.$metadata.httpStatusCode, e.message).toBe(403);
  // HEAD answers carry no body, so neither code nor message.
  if (!head)
    expect(e).toMatchObject({
      name: "AccessDenied",
      message: expect.stringMatching(/reserved for fencegate/),
    });
}

async function expectReservedKey(call: Promise<unknown>, head = false): Promise<void> {
  const e = await failure(call);
  expect(e.$metadata.httpStatusCode, e.message).toBe(400);
  if (!head)
    expect(e).toMatchObject({
      name: "InvalidArgument",
      message: expect.stringMatching(/reserved by fencegate/),
    });
}

describe.each([
  ["S3", s3Store],
  ["Azure", azureStore],
])("on %s, no S3 request reaches fencegate's own records", (_name, open) => {
  let store: Store;
  let redis: RedisServer;
  let gw: TestGateway;
  let s3: S3Client;

  beforeAll(async () => {
    [store, redis] = await Promise.all([open(), startRedis()]);
    // Fencing optional: a write without a token goes all the way to the backend.
    gw = await startTestGateway({
      env: { ...store.env, FENCEGATE_REDIS_URL: redis.url, FENCEGATE_FENCING: "optional" },
    });
    s3 = gw.s3();
    await grantTokens(gw, "first", 1); // the deployment's first epoch: a record in the system bucket
  }, 60_000);

  afterAll(async () => {
    s3?.destroy();
    await gw?.stop();
    await Promise.all([store?.stop(), redis?.stop()]);
  });

  it("the system bucket: hidden from ListBuckets, 403 AccessDenied to every request, its records untouched", async () => {
    const epoch0 = await store.read(SYSTEM, EPOCH_0);
    expect(epoch0).toMatch(/"epoch":0/);
    await s3.send(new CreateBucketCommand({ Bucket: "data" })).catch(() => undefined);
    await s3.send(new PutObjectCommand({ Bucket: "data", Key: "k", Body: "data" }));

    const buckets = (await s3.send(new ListBucketsCommand({}))).Buckets ?? [];
    expect(buckets.map((b) => b.Name)).toContain("data");
    expect(buckets.map((b) => b.Name)).not.toContain(SYSTEM);

    const Bucket = SYSTEM;
    await expectReserved(s3.send(new ListObjectsV2Command({ Bucket })));
    await expectReserved(s3.send(new ListObjectsV2Command({ Bucket, Prefix: ".fencegate/" })));
    await expectReserved(s3.send(new ListMultipartUploadsCommand({ Bucket })));
    await expectReserved(s3.send(new HeadBucketCommand({ Bucket })), true);
    await expectReserved(s3.send(new GetObjectCommand({ Bucket, Key: EPOCH_0 })));
    await expectReserved(s3.send(new HeadObjectCommand({ Bucket, Key: EPOCH_0 })), true);
    await expectReserved(s3.send(new PutObjectCommand({ Bucket, Key: EPOCH_0, Body: "junk" })));
    await expectReserved(s3.send(new PutObjectCommand({ Bucket, Key: "other", Body: "junk" })));
    await expectReserved(s3.send(new DeleteObjectCommand({ Bucket, Key: EPOCH_0 })));
    await expectReserved(
      s3.send(
        new DeleteObjectsCommand({ Bucket, Delete: { Objects: [{ Key: EPOCH_0 }, { Key: "other" }] } }),
      ),
    );
    await expectReserved(s3.send(new CreateMultipartUploadCommand({ Bucket, Key: EPOCH_0 })));
    await expectReserved(
      s3.send(
        new CopyObjectCommand({ Bucket, Key: EPOCH_0, CopySource: "data/k", MetadataDirective: "COPY" }),
      ),
    );
    await expectReserved(
      s3.send(new CopyObjectCommand({ Bucket: "data", Key: "copy", CopySource: `${SYSTEM}/${EPOCH_0}` })),
    );
    await expectReserved(s3.send(new CreateBucketCommand({ Bucket })));
    await expectReserved(s3.send(new DeleteBucketCommand({ Bucket })));

    // The store still holds exactly what the gateway wrote there, as it wrote it.
    expect(await store.read(SYSTEM, EPOCH_0)).toBe(epoch0);
    expect(await store.names(SYSTEM, "")).toEqual(
      (await store.names(SYSTEM, "")).filter((n) => n.startsWith(".fencegate/")),
    );
    expect(await store.names(SYSTEM, ".fencegate/epochs/")).toEqual([EPOCH_0]);
    expect(await store.read("data", "copy")).toBeNull();
  });

  it("the meta namespace of a bucket: keys under .fencegate/ refused, never listed, never changed", async () => {
    await s3.send(new CreateBucketCommand({ Bucket: "meta" }));
    await s3.send(new PutObjectCommand({ Bucket: "meta", Key: "k", Body: "data" }));
    const meta = await store.metaObject(s3, "meta", "k");
    const before = await store.read("meta", meta);
    expect(before).not.toBeNull();
    await store.plantMeta("meta", ".fencegate/old/0000001");

    const Bucket = "meta";
    await expectReservedKey(s3.send(new GetObjectCommand({ Bucket, Key: meta })));
    await expectReservedKey(s3.send(new HeadObjectCommand({ Bucket, Key: meta })), true);
    await expectReservedKey(s3.send(new PutObjectCommand({ Bucket, Key: meta, Body: "junk" })));
    await expectReservedKey(s3.send(new DeleteObjectCommand({ Bucket, Key: meta })));
    await expectReservedKey(s3.send(new CreateMultipartUploadCommand({ Bucket, Key: meta })));
    await expectReservedKey(
      s3.send(new CopyObjectCommand({ Bucket, Key: "copy", CopySource: `meta/${meta}` })),
    );
    await expectReservedKey(s3.send(new CopyObjectCommand({ Bucket, Key: meta, CopySource: "meta/k" })));
    const many = await s3.send(new DeleteObjectsCommand({ Bucket, Delete: { Objects: [{ Key: meta }] } }));
    expect(many.Deleted ?? []).toEqual([]);
    expect(many.Errors?.map((e) => [e.Key, e.Code])).toEqual([[meta, "InvalidArgument"]]);

    const listed = await s3.send(new ListObjectsV2Command({ Bucket }));
    expect((listed.Contents ?? []).map((o) => o.Key)).toEqual(["k"]);
    const underMeta = await s3.send(new ListObjectsV2Command({ Bucket, Prefix: ".fencegate/" }));
    expect(underMeta.KeyCount).toBe(0);
    const folders = await s3.send(new ListObjectsV2Command({ Bucket, Delimiter: "/" }));
    expect(folders.CommonPrefixes ?? []).toEqual([]);

    expect(await store.read("meta", meta)).toBe(before);
    expect(await store.read("meta", "copy")).toBeNull();
  });
});
