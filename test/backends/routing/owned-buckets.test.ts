import {
  CreateBucketCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadBucketCommand,
  ListBucketsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
} from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bindFencingToken, FenceClient } from "../../../src/client/index.js";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../../support/gateway.js";

/**
 * A store bucket that a configured gateway bucket keeps its objects in is not served under its
 * own name by the fallback: leases on the two names would not exclude each other, so a holder of
 * a lease on the other name could overwrite the configured bucket's objects. Such requests are
 * answered 403 AccessDenied, naming the configured bucket.
 */

/** What a client gets back from a request the gateway refused. */
async function failure(p: Promise<unknown>): Promise<{ status?: number; code?: string; message?: string }> {
  const e = (await p.then(
    () => new Error("the request succeeded"),
    (err: unknown) => err,
  )) as { name?: string; message?: string; $metadata?: { httpStatusCode?: number } };
  return { status: e.$metadata?.httpStatusCode, code: e.name, message: e.message };
}

/**
 * A lease on the other name, and every request through it: each refused with 403 AccessDenied
 * naming `owner`, and the configured bucket's object unchanged.
 */
async function expectOtherNameRefused(gw: TestGateway, fence: FenceClient, other: string, owner: RegExp) {
  const s3 = gw.s3();
  const lease = await fence.acquire({ bucket: other, key: "reports/a", ttlMs: 30_000 });
  const refused = { status: 403, code: "AccessDenied", message: expect.stringMatching(owner) };
  const attempts: [string, () => Promise<unknown>][] = [
    [
      "PutObject",
      () =>
        s3.send(
          new PutObjectCommand({
            Bucket: other,
            Key: "reports/a",
            Body: "through the other name",
            Metadata: { "fence-token": lease.fencingToken },
          }),
        ),
    ],
    [
      "DeleteObject",
      () =>
        s3.send(
          bindFencingToken(new DeleteObjectCommand({ Bucket: other, Key: "reports/a" }), lease.fencingToken),
        ),
    ],
    ["GetObject", () => s3.send(new GetObjectCommand({ Bucket: other, Key: "reports/a" }))],
    ["ListObjectsV2", () => s3.send(new ListObjectsV2Command({ Bucket: other }))],
    ["CreateBucket", () => s3.send(new CreateBucketCommand({ Bucket: other }))],
    ["DeleteBucket", () => s3.send(new DeleteBucketCommand({ Bucket: other }))],
  ];
  for (const [what, attempt] of attempts) expect(await failure(attempt()), what).toEqual(refused);
  // HEAD answers carry no body: the status says it.
  expect(await failure(s3.send(new HeadBucketCommand({ Bucket: other })))).toMatchObject({ status: 403 });

  const { records } = await fence.audit({ bucket: other, limit: 100 });
  const writes = records.filter((r) => !r.op.startsWith("Lease"));
  expect(writes.map((r) => [r.op, r.decision, r.reason])).toEqual([
    ["PutObject", "rejected", "AccessDenied"],
    ["DeleteObject", "rejected", "AccessDenied"],
  ]);
  await fence.release(lease.leaseId);

  const got = await s3.send(new GetObjectCommand({ Bucket: "reports", Key: "a" }));
  expect(await got.Body?.transformToString()).toBe("through the configured name");
}

/** A write through the configured name, under a lease on it. */
async function writeThroughConfigured(gw: TestGateway, fence: FenceClient) {
  const lease = await fence.lease({ bucket: "reports", key: "a", ttlMs: 30_000 });
  try {
    await lease
      .s3(gw.s3())
      .send(new PutObjectCommand({ Bucket: "reports", Key: "a", Body: "through the configured name" }));
  } finally {
    await lease.release();
  }
}

describe("the fallback and a route into one of its store buckets", () => {
  let gw: TestGateway;
  let fence: FenceClient;
  beforeAll(async () => {
    gw = await startTestGateway({
      overrides: {
        buckets: {
          reports: { target: "shared", prefix: "reports/" },
          logs: { target: "shared", prefix: "logs/" },
        },
      },
    });
    fence = new FenceClient({ endpoint: gw.url, ...CREDENTIALS });
    await gw.s3().send(new CreateBucketCommand({ Bucket: "reports" })); // creates "shared" in the store
    await gw.s3().send(new CreateBucketCommand({ Bucket: "plain" }));
  });
  afterAll(async () => {
    await gw?.stop();
  });

  it("refuses the store bucket's own name with 403 AccessDenied naming the configured buckets", async () => {
    await writeThroughConfigured(gw, fence);
    await expectOtherNameRefused(gw, fence, "shared", /configured gateway buckets "reports", "logs"/);
    const listed = await gw.s3().send(new ListBucketsCommand({}));
    expect(listed.Buckets?.map((b) => b.Name)).toEqual(["logs", "plain", "reports"]);
  });
});

describe("a route on a named backend that is the fallback's store (S3 at one endpoint, written two ways)", () => {
  let store: TestGateway;
  let gw: TestGateway;
  let fence: FenceClient;
  beforeAll(async () => {
    // The store: a second fencegate with optional fencing, as an S3-compatible store.
    store = await startTestGateway({ env: { FENCEGATE_FENCING: "optional" } });
    const s3 = (endpoint: string) => ({
      type: "s3",
      endpoint,
      forcePathStyle: true,
      requestTimeoutMs: 10_000,
      accessKeyId: CREDENTIALS.accessKeyId,
      secretAccessKey: CREDENTIALS.secretAccessKey,
    });
    gw = await startTestGateway({
      overrides: {
        backend: s3(store.url),
        backends: { lake: s3(store.url.replace("127.0.0.1", "localhost")) },
        buckets: { reports: { backend: "lake", target: "shared", prefix: "reports/" } },
      },
    });
    fence = new FenceClient({ endpoint: gw.url, ...CREDENTIALS });
    await store.s3().send(new CreateBucketCommand({ Bucket: "shared" }));
  });
  afterAll(async () => {
    await gw?.stop();
    await store?.stop();
  });

  it("refuses the store bucket's own name through the default backend", async () => {
    await writeThroughConfigured(gw, fence);
    await expectOtherNameRefused(
      gw,
      fence,
      "shared",
      /configured gateway bucket "reports" keeps its objects/,
    );
  });
});
