/**
 * Several replicas on one Redis that loses its data: the token epochs they share live in the
 * backend's system bucket, whatever the replicas' data directories hold. The deployments are the
 * documented ones: S3 from environment variables alone, and config/azure.yaml with a Redis URL.
 */
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ListObjectsV2Command } from "@aws-sdk/client-s3";
import { BlobServiceClient } from "@azure/storage-blob";
import { afterEach, describe, expect, it } from "vitest";
import { parse as parseYaml, stringify as stringifyYaml } from "yaml";
import { rawClient, startStore } from "../backends/s3/s3-fixture.js";
import { startAzurite } from "../support/azurite.js";
import { CREDENTIALS, ROOT, startTestGateway, type TestGateway, tempDir } from "../support/gateway.js";
import { startRedis } from "../support/redis.js";
import { requireTools } from "../support/tools.js";
import { expectNeverBack, grantTokens, loseEverything, tokensAcrossALoss } from "./epochs-kit.js";

requireTools("redis-server");

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const SIGNING_KEY = "one-signing-key-for-every-replica";

async function replica(env: Record<string, string>): Promise<TestGateway> {
  const gw = await startTestGateway({ env });
  cleanups.push(() => gw.stop());
  return gw;
}

describe("replicas sharing one Redis that loses its data", () => {
  it("S3, set up from environment variables alone: no token repeats or goes back", async () => {
    const store = await startStore();
    cleanups.push(() => store.stop());
    const redis = { current: await startRedis({ persistence: "none" }) };
    cleanups.push(() => redis.current.stop());
    // What the contract names, nothing more: no configuration file, a data directory each.
    const env = {
      FENCEGATE_BACKEND: "s3",
      FENCEGATE_S3_ENDPOINT: store.url,
      FENCEGATE_S3_REGION: "us-east-1",
      FENCEGATE_S3_ACCESS_KEY_ID: CREDENTIALS.accessKeyId,
      FENCEGATE_S3_SECRET_ACCESS_KEY: CREDENTIALS.secretAccessKey,
      FENCEGATE_S3_FORCE_PATH_STYLE: "true",
      FENCEGATE_REDIS_URL: redis.current.url,
      FENCEGATE_TOKEN_SIGNING_KEY: SIGNING_KEY,
    };
    const a = await replica({ ...env, FENCEGATE_GATEWAY_ID: "gw-a" });
    const b = await replica({ ...env, FENCEGATE_GATEWAY_ID: "gw-b" });
    expect(a.dataDir).not.toBe(b.dataDir);
    await tokensAcrossALoss({ a, b }, async () => {
      redis.current = await loseEverything(redis.current);
    });

    // The epochs are records of the store's system bucket: two, one per life of Redis.
    const raw = rawClient(store);
    cleanups.push(() => raw.destroy());
    const listed = await raw.send(
      new ListObjectsV2Command({ Bucket: "fencegate-system", Prefix: ".fencegate/epochs/" }),
    );
    expect((listed.Contents ?? []).map((o) => o.Key)).toEqual([
      ".fencegate/epochs/0000000",
      ".fencegate/epochs/0000001",
    ]);
  }, 60_000);

  it("S3 with a Redlock quorum, set up from environment variables alone: replicas started after every instance lost its data grant above every earlier token", async () => {
    const store = await startStore();
    cleanups.push(() => store.stop());
    const redis = await Promise.all([startRedis(), startRedis(), startRedis()]);
    cleanups.push(() => Promise.all(redis.map((r) => r.stop())).then(() => undefined));
    const env = {
      FENCEGATE_BACKEND: "s3",
      FENCEGATE_S3_ENDPOINT: store.url,
      FENCEGATE_S3_REGION: "us-east-1",
      FENCEGATE_S3_ACCESS_KEY_ID: CREDENTIALS.accessKeyId,
      FENCEGATE_S3_SECRET_ACCESS_KEY: CREDENTIALS.secretAccessKey,
      FENCEGATE_S3_FORCE_PATH_STYLE: "true",
      FENCEGATE_REDLOCK_URLS: redis.map((r) => r.url).join(","),
      FENCEGATE_TOKEN_SIGNING_KEY: SIGNING_KEY,
    };
    // A quorum that lost its data grants nothing for leases.maxTtlMs: a short one here.
    const overrides = { leases: { minTtlMs: 100, maxTtlMs: 1_000 } };
    const dataDirs: string[] = [];
    const start = async (id: string) => {
      const gw = await startTestGateway({ env: { ...env, FENCEGATE_GATEWAY_ID: id }, overrides });
      cleanups.push(() => gw.stop());
      dataDirs.push(gw.dataDir);
      return gw;
    };
    const ttl = { ttlMs: 1_000 };
    const a = await start("gw-a");
    const before = await grantTokens(a, "a-before", 3, ttl);
    // Replica a goes away (its machine replaced); then every instance loses its data.
    await a.close();
    for (let i = 0; i < redis.length; i++) redis[i] = await loseEverything(redis[i]!);
    // Replicas that never granted anything before.
    const b = await start("gw-b");
    const afterB = await grantTokens(b, "b-after", 3, ttl);
    const c = await start("gw-c");
    const afterC = await grantTokens(c, "c-after", 2, ttl);
    expectNeverBack({ a: before, b: afterB, c: afterC }, before, [...afterB, ...afterC]);

    for (const dir of dataDirs) expect(readdirSync(dir)).not.toContain("redlock-epochs");
    const raw = rawClient(store);
    cleanups.push(() => raw.destroy());
    const listed = await raw.send(
      new ListObjectsV2Command({ Bucket: "fencegate-system", Prefix: ".fencegate/epochs/" }),
    );
    expect((listed.Contents ?? []).map((o) => o.Key)).toEqual([
      ".fencegate/epochs/0000000",
      ".fencegate/epochs/0000001",
    ]);
  }, 60_000);

  it("Azure, config/azure.yaml with FENCEGATE_REDIS_URL (the documented replica setup): no token repeats or goes back", async () => {
    const azurite = await startAzurite({ inMemory: true });
    cleanups.push(() => azurite.stop());
    const redis = { current: await startRedis({ persistence: "none" }) };
    cleanups.push(() => redis.current.stop());
    // The example file as it is, with only the account replaced by Azurite's.
    const doc = parseYaml(readFileSync(join(ROOT, "config/azure.yaml"), "utf8")) as {
      backend: Record<string, unknown>;
    };
    doc.backend.connectionString = azurite.connectionString;
    const dir = tempDir("fencegate-azure-replicas-");
    cleanups.push(() => dir.cleanup());
    const file = join(dir.path, "azure.yaml");
    writeFileSync(file, stringifyYaml(doc));
    const env = {
      FENCEGATE_CONFIG: file,
      FENCEGATE_REDIS_URL: redis.current.url,
      FENCEGATE_TOKEN_SIGNING_KEY: SIGNING_KEY,
    };
    const a = await replica({ ...env, FENCEGATE_GATEWAY_ID: "gw-a" });
    const b = await replica({ ...env, FENCEGATE_GATEWAY_ID: "gw-b" });
    await tokensAcrossALoss({ a, b }, async () => {
      redis.current = await loseEverything(redis.current);
    });

    const container = BlobServiceClient.fromConnectionString(azurite.connectionString).getContainerClient(
      "fencegate-system",
    );
    const names: string[] = [];
    for await (const blob of container.listBlobsFlat({ prefix: ".fencegate/epochs/" })) names.push(blob.name);
    expect(names).toEqual([".fencegate/epochs/0000000", ".fencegate/epochs/0000001"]);
  }, 60_000);
});
