import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  CreateBucketCommand,
  GetObjectCommand,
  HeadBucketCommand,
  PutObjectCommand,
  type S3Client,
} from "@aws-sdk/client-s3";
import { BlobServiceClient } from "@azure/storage-blob";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse as parseYaml, stringify as stringifyYaml } from "yaml";
import { type AzuriteServer, startAzurite } from "../support/azurite.js";
import { CREDENTIALS, ROOT, startTestGateway, type TestGateway, tempDir } from "../support/gateway.js";
import { rawClient, recordName, startStore } from "./s3/s3-fixture.js";

/**
 * The remote-backend examples in config/ serve: a gateway started from each file, with only the
 * store's address and credentials replaced by the test stores (a second fencegate for S3, Azurite
 * for Azure), creates a bucket, takes a lease, writes with its token and reads back.
 */

const example = (name: string) => join(ROOT, "config", name);

describe("the remote-backend examples in config/", () => {
  let store: TestGateway;
  let azurite: AzuriteServer;
  const s3Store = () => ({
    endpoint: store.url,
    accessKeyId: CREDENTIALS.accessKeyId,
    secretAccessKey: CREDENTIALS.secretAccessKey,
    forcePathStyle: true,
  });

  beforeAll(async () => {
    [store, azurite] = await Promise.all([startStore(), startAzurite({ inMemory: true })]);
  }, 60_000);

  afterAll(async () => {
    await Promise.all([store?.stop(), azurite?.stop()]);
  });

  /**
   * A gateway started from the example file, after `patch` replaced the store's address and
   * credentials in it (written to a temporary copy).
   */
  async function withGateway(
    file: string,
    patch: (doc: Record<string, Record<string, unknown>>) => void,
    run: (s3: S3Client, gw: TestGateway) => Promise<void>,
  ) {
    const doc = parseYaml(readFileSync(example(file), "utf8")) as Record<string, Record<string, unknown>>;
    patch(doc);
    const copy = tempDir("fencegate-config-example-");
    const path = join(copy.path, file);
    writeFileSync(path, stringifyYaml(doc));
    const gw = await startTestGateway({ env: { FENCEGATE_CONFIG: path } });
    const s3 = gw.s3();
    try {
      await run(s3, gw);
    } finally {
      s3.destroy();
      await gw.stop();
      copy.cleanup();
    }
  }

  async function fencedRoundTrip(s3: S3Client, gw: TestGateway, bucket: string, key: string) {
    const lease = await gw.leases.acquire({ bucket, key, ttlMs: 10_000 });
    const put = await s3.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: key,
        Body: `written through ${bucket}`,
        Metadata: { "fence-token": lease.fencingToken },
      }),
    );
    expect(put.$metadata.httpStatusCode).toBe(200);
    const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    expect(await got.Body!.transformToString()).toBe(`written through ${bucket}`);
    await gw.leases.release(lease.leaseId);
  }

  it("s3.yaml", async () => {
    await withGateway(
      "s3.yaml",
      (doc) => Object.assign(doc.backend!, s3Store()),
      async (s3, gw) => {
        expect(gw.url).toBeTruthy();
        await s3.send(new CreateBucketCommand({ Bucket: "example-s3" }));
        await fencedRoundTrip(s3, gw, "example-s3", "k");
      },
    );
  });

  it("minio.yaml, which checks conditional writes at start-up in its scratch bucket", async () => {
    await withGateway(
      "minio.yaml",
      (doc) => Object.assign(doc.backend!, s3Store()),
      async (s3, gw) => {
        await s3.send(new CreateBucketCommand({ Bucket: "example-minio" }));
        await fencedRoundTrip(s3, gw, "example-minio", "k");
      },
    );
    const raw = rawClient(store);
    try {
      // The scratch bucket of verifyBucket was created in the store for the start-up check.
      const head = await raw.send(new HeadBucketCommand({ Bucket: "fencegate-scratch" }));
      expect(head.$metadata.httpStatusCode).toBe(200);
    } finally {
      raw.destroy();
    }
  });

  it("azure.yaml", async () => {
    await withGateway(
      "azure.yaml",
      (doc) => Object.assign(doc.backend!, { connectionString: azurite.connectionString }),
      async (s3, gw) => {
        await s3.send(new CreateBucketCommand({ Bucket: "example-azure" }));
        await fencedRoundTrip(s3, gw, "example-azure", "k");
      },
    );
    const blob = BlobServiceClient.fromConnectionString(azurite.connectionString)
      .getContainerClient("example-azure")
      .getBlobClient("k");
    expect((await blob.downloadToBuffer()).toString()).toBe("written through example-azure");
  });

  it("several-backends.yaml: buckets under prefixes of one S3 bucket, a container, the fs default", async () => {
    const raw = rawClient(store);
    await raw.send(new CreateBucketCommand({ Bucket: "company-lake" }));
    await BlobServiceClient.fromConnectionString(azurite.connectionString).createContainer("cold");
    await withGateway(
      "several-backends.yaml",
      (doc) => {
        const backends = doc.backends as Record<string, Record<string, unknown>>;
        Object.assign(backends.lake!, { region: "us-east-1", ...s3Store() });
        Object.assign(backends.archive!, { connectionString: azurite.connectionString });
      },
      async (s3, gw) => {
        await fencedRoundTrip(s3, gw, "reports", "q3.csv");
        await fencedRoundTrip(s3, gw, "events", "e1");
        await fencedRoundTrip(s3, gw, "cold", "old");
        await s3.send(new CreateBucketCommand({ Bucket: "local" }));
        await fencedRoundTrip(s3, gw, "local", "here");
      },
    );
    // The two gateway buckets share the S3 bucket, each under its prefix (records name the keys).
    for (const key of ["reports/q3.csv", "events/e1"]) {
      const record = await raw.send(new GetObjectCommand({ Bucket: "company-lake", Key: recordName(key) }));
      expect(JSON.parse(await record.Body!.transformToString())).toMatchObject({ key, state: "live" });
    }
    raw.destroy();
  });
});
