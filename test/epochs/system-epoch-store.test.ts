/**
 * Token epochs as records of a system bucket, on S3 (a second fencegate as the store) and on Azure
 * (Azurite): created once by a conditional create that exactly one racer wins, never replaced,
 * counted by name whatever their content, and counted with the epochs older versions left (their
 * gateway objects, deleted ones included, and their epoch directories).
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { CreateBucketCommand, PutObjectCommand } from "@aws-sdk/client-s3";
import { BlobServiceClient } from "@azure/storage-blob";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAzureBackend } from "../../src/backends/azure/index.js";
import { createS3Backend } from "../../src/backends/s3/index.js";
import type { StorageBackend, SystemRecords } from "../../src/backends/storage-backend.js";
import { createSystemEpochStore, epochRecordName } from "../../src/epochs/system-epoch-store.js";
import { fencedCommit, unfencedCommit } from "../../src/fence/commit.js";
import { backendOptions, rawClient, startStore } from "../backends/s3/s3-fixture.js";
import { type AzuriteServer, startAzurite } from "../support/azurite.js";
import { verifiedBody } from "../support/bodies.js";
import type { TestGateway } from "../support/gateway.js";
import { tempDir } from "../support/temp.js";

/** A remote backend, and a way to put a raw object into its store behind its back. */
type Remote = {
  backend: StorageBackend & { systemRecords(bucket: string): SystemRecords };
  createBucket(bucket: string): Promise<void>;
  rawPut(bucket: string, name: string, body: string): Promise<void>;
};

let store: TestGateway;
let azurite: AzuriteServer;
const opened: StorageBackend[] = [];

beforeAll(async () => {
  [store, azurite] = await Promise.all([startStore(), startAzurite({ inMemory: true })]);
}, 60_000);

afterAll(async () => {
  for (const backend of opened) await backend.close();
  await Promise.all([store?.stop(), azurite?.stop()]);
});

function s3Remote(): Remote {
  const backend = createS3Backend(backendOptions(store.url));
  opened.push(backend);
  const raw = rawClient(store);
  return {
    backend,
    createBucket: (bucket) => backend.createBucket(bucket),
    async rawPut(bucket, name, body) {
      await raw.send(new CreateBucketCommand({ Bucket: bucket })).catch(() => undefined);
      await raw.send(new PutObjectCommand({ Bucket: bucket, Key: name, Body: body }));
    },
  };
}

function azureRemote(): Remote {
  const backend = createAzureBackend({
    connectionString: azurite.connectionString,
    multipartSweepIntervalMs: 0,
  });
  opened.push(backend);
  return {
    backend,
    createBucket: (bucket) => backend.createBucket(bucket),
    async rawPut(bucket, name, body) {
      const container = BlobServiceClient.fromConnectionString(azurite.connectionString).getContainerClient(
        bucket,
      );
      await container.createIfNotExists();
      await container.getBlockBlobClient(name).upload(body, Buffer.byteLength(body));
    },
  };
}

let buckets = 0;
/** A bucket name of its own for each test (valid on S3 and as an Azure container). */
const freshBucket = (tag: string) => `epochs-${tag}-${++buckets}`;

describe.each([
  ["S3", s3Remote],
  ["Azure", azureRemote],
])("token epochs in the system bucket on %s", (_name, remote) => {
  it("opens (creates) the bucket, creates each epoch once, and a racing create has exactly one winner", async () => {
    const { backend } = remote();
    const bucket = freshBucket("once");
    const epochs = createSystemEpochStore({ records: backend.systemRecords(bucket) });
    await epochs.ready(); // the bucket is missing: created
    expect(await epochs.highest()).toBe(-1);
    expect(await epochs.create(0)).toBe(true);
    expect(await epochs.create(0)).toBe(false);
    const race = await Promise.all(
      Array.from({ length: 8 }, () =>
        createSystemEpochStore({ records: remote().backend.systemRecords(bucket) }).create(1),
      ),
    );
    expect(race.filter(Boolean)).toHaveLength(1);
    expect(await epochs.create(12)).toBe(true);
    // Another replica's view of the same bucket.
    expect(await createSystemEpochStore({ records: remote().backend.systemRecords(bucket) }).highest()).toBe(
      12,
    );
    expect((await backend.systemRecords(bucket).list("epochs/")).sort()).toEqual(
      [0, 1, 12].map(epochRecordName),
    );
  });

  it("counts every record by its name whatever it holds, and never replaces one", async () => {
    const r = remote();
    const bucket = freshBucket("names");
    const records = r.backend.systemRecords(bucket);
    const epochs = createSystemEpochStore({ records });
    await epochs.ready();
    await r.rawPut(bucket, `.fencegate/${epochRecordName(42)}`, "not JSON at all");
    await r.rawPut(bucket, ".fencegate/epochs/not-an-epoch", "{}");
    expect(await epochs.highest()).toBe(42);
    expect(await epochs.create(42)).toBe(false);
    expect(await records.create(epochRecordName(42), Buffer.from("replaced?"))).toBe(false);
    expect(await epochs.create(43)).toBe(true);
    expect(await epochs.highest()).toBe(43);
  });

  it("counts the epoch objects older versions wrote in the bucket, also after they were deleted", async () => {
    const { backend, createBucket } = remote();
    const bucket = freshBucket("legacy");
    const prefix = "legacy-epochs/";
    await createBucket(bucket);
    // What an older version did: gateway objects, written without a token...
    for (const epoch of [3, 7]) {
      await backend.putObject(
        {
          bucket,
          key: `${prefix}${String(epoch).padStart(7, "0")}`,
          body: verifiedBody(JSON.stringify({ epoch })),
          metadata: { headers: {}, userMetadata: {} },
        },
        unfencedCommit({ conditions: { ifNoneMatch: "*" } }),
      );
    }
    // ... and a delete of the highest through the S3 API, which leaves a tombstone (with a token,
    // as the default fencing policy asks).
    await backend.deleteObject({ bucket, key: `${prefix}0000007` }, fencedCommit(1));
    const listed = await backend.listObjects({ bucket, prefix, maxKeys: 10 });
    expect(listed.objects.map((o) => o.key)).toEqual([`${prefix}0000003`]);

    const records = backend.systemRecords(bucket);
    expect(await createSystemEpochStore({ records }).highest()).toBe(-1);
    const epochs = createSystemEpochStore({ records, legacyPrefix: prefix });
    expect(await epochs.highest()).toBe(7);
    expect(await epochs.create(8)).toBe(true);
    expect(await epochs.highest()).toBe(8);
  });

  it("counts the epoch directory an older version kept in the data directory", async () => {
    const { backend } = remote();
    const bucket = freshBucket("local");
    const dir = tempDir("fencegate-old-epochs-");
    try {
      mkdirSync(join(dir.path, "redis-epochs"));
      writeFileSync(join(dir.path, "redis-epochs", "5"), "");
      const epochs = createSystemEpochStore({
        records: backend.systemRecords(bucket),
        localDirs: [join(dir.path, "redis-epochs"), join(dir.path, "missing")],
      });
      await epochs.ready();
      expect(await epochs.highest()).toBe(5);
    } finally {
      dir.cleanup();
    }
  });
});

describe("a system bucket that cannot be used", () => {
  it("Azure: a name Azure refuses makes ready() fail with LeaseStoreUnavailable naming the bucket and FENCEGATE_SYSTEM_BUCKET", async () => {
    const epochs = createSystemEpochStore({
      records: azureRemote().backend.systemRecords("not.a.container"),
    });
    await expect(epochs.ready()).rejects.toMatchObject({
      code: "LeaseStoreUnavailable",
      message: expect.stringMatching(/container not\.a\.container.*FENCEGATE_SYSTEM_BUCKET/),
    });
  });

  it("ready() tries again once retryMs has passed, and stays ready once it was", async () => {
    let opens = 0;
    let usable = false;
    const records: SystemRecords = {
      where: "bucket flaky of a store",
      async open() {
        opens++;
        if (!usable) throw new Error("403 Forbidden");
      },
      create: async () => true,
      list: async () => [],
      legacyKeys: async () => [],
    };
    const epochs = createSystemEpochStore({ records, retryMs: 200 });
    await expect(epochs.ready()).rejects.toMatchObject({
      code: "LeaseStoreUnavailable",
      message: expect.stringMatching(/bucket flaky of a store.*403 Forbidden.*FENCEGATE_SYSTEM_BUCKET/),
    });
    usable = true;
    await expect(epochs.ready()).rejects.toMatchObject({ code: "LeaseStoreUnavailable" });
    expect(opens).toBe(1); // within retryMs: the same answer, nothing asked
    await new Promise((resolve) => setTimeout(resolve, 250));
    await epochs.ready();
    usable = false;
    await epochs.ready();
    expect(opens).toBe(2);
  });
});
