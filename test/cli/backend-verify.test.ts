import { CreateBucketCommand, ListObjectsV2Command, S3Client } from "@aws-sdk/client-s3";
import { BlobServiceClient } from "@azure/storage-blob";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rawClient, startStore } from "../backends/s3/s3-fixture.js";
import { S3RVER_CREDENTIALS, startS3rver } from "../backends/s3/s3rver.js";
import { type AzuriteServer, startAzurite } from "../support/azurite.js";
import type { TestGateway } from "../support/gateway.js";
import { CREDENTIALS, ROOT } from "../support/gateway.js";
import { runToExit } from "../support/safety-helpers.js";

/**
 * `fencegate backend verify` (the real CLI in a process) against three stores: a second fencegate
 * (honours If-Match / If-None-Match), s3rver (ignores them) and Azurite. It prints one line per
 * bucket and exits 0 only when every check passed.
 */

const verify = (env: Record<string, string>, args: string[] = []) =>
  runToExit(process.execPath, ["--import", "tsx", "src/cli/main.ts", "backend", "verify", ...args], {
    cwd: ROOT,
    env: { ...process.env, FENCEGATE_CONFIG: "", ...env },
    timeoutMs: 60_000,
  });

const s3Env = (endpoint: string, credentials: { accessKeyId: string; secretAccessKey: string }) => ({
  FENCEGATE_BACKEND: "s3",
  FENCEGATE_S3_ENDPOINT: endpoint,
  FENCEGATE_S3_REGION: "us-east-1",
  FENCEGATE_S3_ACCESS_KEY_ID: credentials.accessKeyId,
  FENCEGATE_S3_SECRET_ACCESS_KEY: credentials.secretAccessKey,
  FENCEGATE_S3_FORCE_PATH_STYLE: "true",
});

describe("fencegate backend verify", () => {
  let store: TestGateway;
  let s3rver: Awaited<ReturnType<typeof startS3rver>>;
  let azurite: AzuriteServer;

  beforeAll(async () => {
    [store, s3rver, azurite] = await Promise.all([
      startStore(),
      startS3rver(),
      startAzurite({ inMemory: true }),
    ]);
    const raw = rawClient(store);
    await raw.send(new CreateBucketCommand({ Bucket: "verified" }));
    raw.destroy();
    const s3rverClient = new S3Client({
      endpoint: s3rver.url,
      region: "us-east-1",
      forcePathStyle: true,
      credentials: S3RVER_CREDENTIALS,
    });
    await s3rverClient.send(new CreateBucketCommand({ Bucket: "unsafe" }));
    s3rverClient.destroy();
    await BlobServiceClient.fromConnectionString(azurite.connectionString).createContainer("verified");
  }, 90_000);

  afterAll(async () => {
    await Promise.all([store?.stop(), s3rver?.stop(), azurite?.stop()]);
  });

  it("passes a store that honours conditional writes, and leaves no probe behind", async () => {
    const run = await verify(s3Env(store.url, CREDENTIALS), ["--bucket", "verified"]);
    expect(run.output).toMatch(
      new RegExp(`default \\(s3 ${store.url}\\) bucket verified: ok, honours If-None-Match and If-Match`),
    );
    expect(run.code, run.output).toBe(0);
    const raw = rawClient(store);
    const left = await raw.send(new ListObjectsV2Command({ Bucket: "verified" }));
    raw.destroy();
    expect(left.Contents ?? []).toEqual([]);
  });

  it("fails on a store that ignores them (s3rver), saying what it ignores", async () => {
    const run = await verify(
      { ...s3Env(s3rver.url, S3RVER_CREDENTIALS), NODE_OPTIONS: "--openssl-legacy-provider" },
      ["--bucket", "unsafe"],
    );
    expect(run.output).toContain(`default (s3 ${s3rver.url}) bucket unsafe: NOT SAFE:`);
    expect(run.output).toContain("ignores If-None-Match on PutObject");
    expect(run.output).toContain("ignores If-Match on PutObject");
    expect(run.code, run.output).toBe(1);
  });

  it("fails clearly when the store cannot be reached or the bucket is missing", async () => {
    const missing = await verify(s3Env(store.url, CREDENTIALS), ["--bucket", "no-such-bucket"]);
    expect(missing.output).toContain(
      "bucket no-such-bucket: does not exist in this store: nothing was checked",
    );
    expect(missing.output).not.toContain("NOT SAFE");
    expect(missing.code, missing.output).toBe(1);
    const nothing = await verify(s3Env("http://127.0.0.1:9", CREDENTIALS), ["--bucket", "verified"]);
    expect(nothing.output).toMatch(/bucket verified: could not check: .*127\.0\.0\.1:9/);
    expect(nothing.output).not.toContain("NOT SAFE");
    expect(nothing.code, nothing.output).toBe(1);
  });

  it("fails when there is no bucket to check", async () => {
    const run = await verify(s3Env(store.url, CREDENTIALS));
    expect(run.output).toContain("no bucket to check");
    expect(run.code, run.output).toBe(1);
  });

  it("passes Azurite's container, and fails a container that does not exist", async () => {
    const env = { FENCEGATE_BACKEND: "azure", FENCEGATE_AZURE_CONNECTION_STRING: azurite.connectionString };
    const ok = await verify(env, ["--bucket", "verified"]);
    expect(ok.output).toContain("default (azure) bucket verified: ok, honours If-None-Match and If-Match");
    expect(ok.code, ok.output).toBe(0);
    const blobs = BlobServiceClient.fromConnectionString(azurite.connectionString)
      .getContainerClient("verified")
      .listBlobsFlat();
    const left: string[] = [];
    for await (const b of blobs) left.push(b.name);
    expect(left).toEqual([]);
    const missing = await verify(env, ["--bucket", "absent"]);
    expect(missing.output).toContain("default (azure) bucket absent: does not exist in this store");
    expect(missing.code, missing.output).toBe(1);
  });

  it("says there is nothing to check on the fs backend", async () => {
    const run = await verify({ FENCEGATE_BACKEND: "fs" });
    expect(run.output).toContain("fencegate's own database transactions: nothing to check");
    expect(run.code, run.output).toBe(0);
  });
});
