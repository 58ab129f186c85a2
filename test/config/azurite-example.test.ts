import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { CreateBucketCommand, GetObjectCommand, PutObjectCommand } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config/load.js";
import { AZURITE_KEY, type AzuriteServer, startAzurite } from "../support/azurite.js";
import { ROOT, startTestGateway, tempDir } from "../support/gateway.js";

const EXAMPLE = join(ROOT, "config/azurite.yaml");

/**
 * config/azurite.yaml, the local Azure trial: Azurite's well-known development account on its
 * default port 10000. The test runs Azurite on a free port and changes only that in a copy.
 */
describe("config/azurite.yaml", () => {
  let azurite: AzuriteServer;
  const dir = tempDir();
  beforeAll(async () => {
    azurite = await startAzurite({ inMemory: true });
  }, 60_000);
  afterAll(async () => {
    await azurite?.stop();
    dir.cleanup();
  });

  it("holds Azurite's well-known development connection string on its default port", () => {
    const backend = loadConfig({ FENCEGATE_CONFIG: EXAMPLE }).backend;
    expect(backend.type).toBe("azure");
    const conn = backend.type === "azure" ? backend.connectionString : undefined;
    expect(conn).toContain("AccountName=devstoreaccount1");
    expect(conn).toContain(`AccountKey=${AZURITE_KEY}`);
    expect(conn).toContain("BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1");
  });

  it("serves fenced writes through Azurite", { timeout: 60_000 }, async () => {
    const port = new URL(azurite.url).port;
    const copy = join(dir.path, "azurite.yaml");
    writeFileSync(copy, readFileSync(EXAMPLE, "utf8").replace("127.0.0.1:10000", `127.0.0.1:${port}`));
    const gw = await startTestGateway({ env: { FENCEGATE_CONFIG: copy } });
    const s3 = gw.s3();
    try {
      await s3.send(new CreateBucketCommand({ Bucket: "trial" }));
      const lease = await gw.leases.acquire({ bucket: "trial", key: "hello.txt", ttlMs: 10_000 });
      const put = await s3.send(
        new PutObjectCommand({
          Bucket: "trial",
          Key: "hello.txt",
          Body: "hello from Azurite",
          Metadata: { "fence-token": lease.fencingToken },
        }),
      );
      expect(put.$metadata.httpStatusCode).toBe(200);
      const got = await s3.send(new GetObjectCommand({ Bucket: "trial", Key: "hello.txt" }));
      expect(await got.Body!.transformToString()).toBe("hello from Azurite");
    } finally {
      s3.destroy();
      await gw.stop();
    }
  });
});
