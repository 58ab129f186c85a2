import { randomUUID } from "node:crypto";
import { CreateBucketCommand } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createS3Backend, type S3Backend } from "../../../src/backends/s3/index.js";
import { fencedCommit } from "../../../src/fence/commit.js";
import { metadataOf, readAll, verifiedBody } from "../../support/bodies.js";
import { startTestGateway } from "../../support/gateway.js";
import { expectS3Error, signedRequest } from "../../support/signed-http.js";
import { backendOptions, type S3Fixture, s3Fixture } from "./s3-fixture.js";
import { S3RVER_CREDENTIALS, startS3rver } from "./s3rver.js";

/**
 * Before its first write the backend checks that the store honours If-None-Match: * and If-Match
 * on PutObject and CompleteMultipartUpload. s3rver ignores them: every write is refused with
 * ServiceUnavailable and a one-line reason, never committed without a compare-and-swap.
 */
describe("the conditional-write capability check", () => {
  let s3rver: Awaited<ReturnType<typeof startS3rver>>;
  let fx: S3Fixture;
  const opened: S3Backend[] = [];
  const open = (extra: Parameters<typeof backendOptions>[1] = {}) => {
    const backend = createS3Backend(
      backendOptions(s3rver.url, { credentials: S3RVER_CREDENTIALS, requestTimeoutMs: 5_000, ...extra }),
    );
    opened.push(backend);
    return backend;
  };
  const refusal = () =>
    `the store at ${s3rver.url} ignores If-None-Match on PutObject: fencegate cannot commit atomically there`;

  beforeAll(async () => {
    [s3rver, fx] = await Promise.all([startS3rver(), s3Fixture()]);
  });

  afterAll(async () => {
    for (const backend of opened) await backend.close();
    await Promise.all([s3rver?.stop(), fx?.cleanup()]);
  });

  const newBucket = async (backend: S3Backend) => {
    const bucket = `fg-cap-${randomUUID().slice(0, 8)}`;
    await backend.createBucket(bucket);
    return bucket;
  };

  it("reports what s3rver ignores", async () => {
    const backend = open();
    const report = await backend.verifyConditionalWrites(await newBucket(backend));
    expect(report.ok).toBe(false);
    expect(report.findings).toEqual([
      "ignores If-None-Match on PutObject",
      "ignores If-Match on PutObject",
      "ignores If-None-Match on CompleteMultipartUpload",
      "ignores If-Match on CompleteMultipartUpload",
    ]);
  });

  it("refuses every write to s3rver with the one-line reason, and writes nothing", async () => {
    const backend = open();
    const bucket = await newBucket(backend);
    const put = backend.putObject(
      { bucket, key: "k", body: verifiedBody("must not land"), metadata: metadataOf() },
      fencedCommit(1),
    );
    await expect(put).rejects.toMatchObject({ code: "ServiceUnavailable", message: refusal() });
    await expect(backend.deleteObject({ bucket, key: "k" }, fencedCommit(1))).rejects.toMatchObject({
      code: "ServiceUnavailable",
      message: refusal(),
    });
    await expect(backend.raiseHighestToken(bucket, "k", 5)).rejects.toMatchObject({ message: refusal() });
    await expect(
      backend.multipart.createUpload(
        { bucket, key: "k", metadata: metadataOf(), token: 1, leaseId: "l", initiator: null },
        fencedCommit(1),
      ),
    ).rejects.toMatchObject({ code: "ServiceUnavailable", message: refusal() });
    expect(refusal()).not.toContain("\n");
    // Nothing was written: no object, and no blob (the refused write removed its own).
    await expect(backend.headObject(bucket, "k")).rejects.toMatchObject({ code: "NoSuchKey" });
    expect((await backend.listObjects({ bucket, maxKeys: 10 })).objects).toEqual([]);
  });

  it("checks once at start-up against a scratch bucket when one is given, and refuses writes everywhere", async () => {
    const scratch = `fg-scratch-${randomUUID().slice(0, 8)}`;
    const backend = open({ verifyBucket: scratch });
    const bucket = await newBucket(backend);
    await expect(
      backend.putObject(
        { bucket, key: "k", body: verifiedBody("x"), metadata: metadataOf() },
        fencedCommit(1),
      ),
    ).rejects.toMatchObject({ code: "ServiceUnavailable", message: refusal() });
    expect((await backend.listBuckets()).map((b) => b.name)).toContain(scratch);
  });

  it("through a gateway: a fenced write to a bucket on s3rver is answered 503 with the reason; with verifyBucket the gateway does not start", async () => {
    const env = {
      FENCEGATE_BACKEND: "s3",
      FENCEGATE_S3_ENDPOINT: s3rver.url,
      FENCEGATE_S3_ACCESS_KEY_ID: S3RVER_CREDENTIALS.accessKeyId,
      FENCEGATE_S3_SECRET_ACCESS_KEY: S3RVER_CREDENTIALS.secretAccessKey,
      FENCEGATE_S3_FORCE_PATH_STYLE: "true",
    };
    const gateway = await startTestGateway({ env });
    const s3 = gateway.s3();
    try {
      const bucket = `fg-cap-gw-${randomUUID().slice(0, 8)}`;
      await s3.send(new CreateBucketCommand({ Bucket: bucket }));
      const lease = await gateway.leases.acquire({ bucket, key: "k", ttlMs: 10_000 });
      const refused = await signedRequest(gateway.url, {
        method: "PUT",
        path: `/${bucket}/k`,
        headers: { "x-fence-token": lease.fencingToken },
        body: "must not land",
      });
      const error = expectS3Error(refused, "ServiceUnavailable", 503);
      expect(error.Message).toBe(refusal());
      const records = await gateway.leases.audit({ bucket, key: "k", op: "PutObject" });
      expect(records.records).toMatchObject([{ decision: "rejected", reason: "ServiceUnavailable" }]);
    } finally {
      s3.destroy();
      await gateway.stop();
    }
    await expect(
      startTestGateway({
        env,
        overrides: {
          backend: {
            type: "s3",
            endpoint: s3rver.url,
            accessKeyId: S3RVER_CREDENTIALS.accessKeyId,
            secretAccessKey: S3RVER_CREDENTIALS.secretAccessKey,
            forcePathStyle: true,
            verifyBucket: "fg-scratch",
          },
        },
      }),
    ).rejects.toThrow(/ignores If-None-Match on PutObject/);
  });

  it("still reads what s3rver holds (reading needs no compare-and-swap)", async () => {
    const backend = open({ verify: false });
    const bucket = await newBucket(backend);
    // With the check turned off (an operator's explicit choice) a write goes through; it is read back.
    await backend.putObject(
      { bucket, key: "k", body: verifiedBody("unverified"), metadata: metadataOf() },
      fencedCommit(1),
    );
    const reader = open();
    expect((await readAll((await reader.getObject(bucket, "k")).body)).toString()).toBe("unverified");
  });

  it("passes against a store that honours conditional writes (a fencegate gateway)", async () => {
    const bucket = `fg-cap-${randomUUID().slice(0, 8)}`;
    await fx.backend.createBucket(bucket);
    expect(await fx.current().verifyConditionalWrites(bucket)).toEqual({ ok: true, findings: [] });
    const scratch = `fg-scratch-${randomUUID().slice(0, 8)}`;
    const verified = fx.another({ verifyBucket: scratch });
    await verified.putObject(
      { bucket, key: "k", body: verifiedBody("fine"), metadata: metadataOf() },
      fencedCommit(1),
    );
    expect(await verified.highestToken(bucket, "k")).toBe(1);
  });
});
