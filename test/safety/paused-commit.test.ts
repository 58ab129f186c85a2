// Safety scenario 2: a write whose body arrives slowly outlives its lease. Whatever happened
// meanwhile (expiry and a newer lease that wrote, a release and a newer lease that has not
// written yet, a plain expiry), the late commit is refused and leaves no trace.
import { readdirSync } from "node:fs";
import { join } from "node:path";
import {
  CreateBucketCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  type S3Client,
} from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { INLINE_MAX_BYTES } from "../../src/backends/fs/index.js";
import type { Lease } from "../../src/client/lease-client.js";
import { md5Hex } from "../support/digest.js";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import { allAuditRecords, type SlowPutResponse, slowSignedPut } from "../support/safety-helpers.js";
import { sleep } from "../support/wait.js";

const BUCKET = "slow";
// Long enough for the slow write to be authorized on a busy machine, short enough to wait out.
const SHORT_TTL_MS = 1000;

describe("a write whose body outlives its lease", () => {
  let gw: TestGateway;
  let s3: S3Client;

  beforeAll(async () => {
    gw = await startTestGateway();
    s3 = gw.s3();
    await s3.send(new CreateBucketCommand({ Bucket: BUCKET }));
  });

  afterAll(async () => {
    s3?.destroy();
    await gw?.stop();
  });

  /**
   * Starts a slow PutObject with `lease`'s token: headers and a first chunk go out at once,
   * the rest only when `finish()` is called. Resolves once the gateway has accepted the request
   * for reading (its blob temp file exists), i.e. it authorized the write with the lease active.
   */
  async function startSlowPut(key: string, lease: Lease) {
    // The first chunk alone is too large to be kept inline: the fs backend starts its blob file
    // as soon as it has arrived, which is how waitForBodyInProgress sees the body under way.
    const chunks = [
      Buffer.alloc(INLINE_MAX_BYTES + 64 * 1024, "s"),
      Buffer.alloc(64 * 1024, "l"),
      Buffer.from("ow-end"),
    ];
    const body = Buffer.concat(chunks);
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const response = slowSignedPut({
      endpoint: gw.url,
      bucket: BUCKET,
      key,
      chunks,
      headers: {
        "x-fence-token": lease.fencingToken,
        "content-type": "application/x-slow",
        "x-amz-meta-writer": "slow",
      },
      gate: () => gate,
    });
    // Should the test fail before finish(), the request dies with the gateway: not unhandled.
    response.catch(() => undefined);
    await waitForBodyInProgress(gw.dataDir, response);
    return {
      body,
      finish: async (): Promise<SlowPutResponse> => {
        release();
        return response;
      },
    };
  }

  async function fencedPut(key: string, lease: Lease, body: string, writer: string) {
    return s3.send(
      new PutObjectCommand({
        Bucket: BUCKET,
        Key: key,
        Body: body,
        ContentType: "text/plain",
        Metadata: { "fence-token": lease.fencingToken, writer },
      }),
    );
  }

  async function expectObject(key: string, body: string, writer: string) {
    const head = await s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: key }));
    expect(head.ETag).toBe(`"${md5Hex(body)}"`);
    expect(head.ContentLength).toBe(Buffer.byteLength(body));
    expect(head.ContentType).toBe("text/plain");
    expect(head.Metadata).toEqual({ writer });
    const got = await s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: key }));
    expect(await got.Body!.transformToString()).toBe(body);
    expect(got.ETag).toBe(`"${md5Hex(body)}"`);
  }

  async function expectRefusalAudited(key: string, slow: SlowPutResponse, token: number, reason: string) {
    const records = await allAuditRecords(gw.leases, { bucket: BUCKET, key, op: "PutObject" });
    const mine = records.filter((r) => r.requestId === slow.requestId);
    expect(mine).toHaveLength(1);
    expect(mine[0]).toMatchObject({ decision: "rejected", reason, token });
  }

  it("refuses it (409) when the lease expired and a newer lease committed meanwhile", async () => {
    const key = "expired-then-overwritten";
    const lease1 = await gw.leases.acquire({ bucket: BUCKET, key, ttlMs: SHORT_TTL_MS, owner: "slow" });
    const slow = await startSlowPut(key, lease1);

    // Lease 1 runs out while its body is still arriving; lease 2 is granted and commits.
    const lease2 = await gw.leases.acquire({
      bucket: BUCKET,
      key,
      ttlMs: 30_000,
      waitMs: 5000,
      owner: "fast",
    });
    expect(lease2.token).toBeGreaterThan(lease1.token);
    const fast = await fencedPut(key, lease2, "lease 2's bytes", "fast");
    expect(fast.$metadata.httpStatusCode).toBe(200);

    const res = await slow.finish();
    expect(res.respondedBeforeBodyEnd, "refused before the body was complete").toBe(false);
    expect(res.status, res.body).toBe(409);
    expect(res.code).toBe("StaleFencingToken");
    expect(res.highestToken).toBe(lease2.token);

    await expectObject(key, "lease 2's bytes", "fast");
    await expectRefusalAudited(key, res, lease1.token, "StaleFencingToken");
    expect(leftoverTempFiles(gw.dataDir)).toEqual([]);
  });

  it("refuses it (409) when a newer lease was granted but has not written yet", async () => {
    const key = "superseded-not-yet-written";
    const lease0 = await gw.leases.acquire({ bucket: BUCKET, key, ttlMs: 30_000, owner: "first" });
    await fencedPut(key, lease0, "the original bytes", "first");
    await gw.leases.release(lease0.leaseId);

    const lease1 = await gw.leases.acquire({ bucket: BUCKET, key, ttlMs: 30_000, owner: "slow" });
    const slow = await startSlowPut(key, lease1);
    await gw.leases.release(lease1.leaseId);
    const lease2 = await gw.leases.acquire({ bucket: BUCKET, key, ttlMs: 30_000, owner: "next" });

    const res = await slow.finish();
    expect(res.respondedBeforeBodyEnd, "refused before the body was complete").toBe(false);
    expect(res.status, res.body).toBe(409);
    expect(res.code).toBe("StaleFencingToken");
    expect(res.highestToken).toBe(lease0.token); // unchanged: nothing of the slow write committed

    await expectObject(key, "the original bytes", "first");
    await expectRefusalAudited(key, res, lease1.token, "StaleFencingToken");
    expect(leftoverTempFiles(gw.dataDir)).toEqual([]);

    // The newer lease writes normally afterwards.
    const next = await fencedPut(key, lease2, "lease 2 after all", "next");
    expect(next.$metadata.httpStatusCode).toBe(200);
    await expectObject(key, "lease 2 after all", "next");
  });

  it("refuses it (409 LeaseExpired) when the lease expired and nobody took it since", async () => {
    const key = "expired-alone";
    const lease1 = await gw.leases.acquire({ bucket: BUCKET, key, ttlMs: SHORT_TTL_MS, owner: "slow" });
    const slow = await startSlowPut(key, lease1);
    await sleep(Math.max(0, Date.parse(lease1.expiresAt) - Date.now()) + 50);

    const res = await slow.finish();
    expect(res.respondedBeforeBodyEnd, "refused before the body was complete").toBe(false);
    expect(res.status, res.body).toBe(409);
    expect(res.code).toBe("LeaseExpired");

    await expect(s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: key }))).rejects.toMatchObject({
      $metadata: { httpStatusCode: 404 },
    });
    await expectRefusalAudited(key, res, lease1.token, "LeaseExpired");
  });
});

function leftoverTempFiles(dataDir: string): string[] {
  return readdirSync(join(dataDir, "blobs", "tmp"));
}

/**
 * Waits until the gateway is receiving the slow body: the fs backend streams a body larger than
 * its inline threshold into a temp file under <dataDir>/blobs/tmp, only after the write passed
 * authorization and the early HCT check. Fails if the request is answered first.
 */
async function waitForBodyInProgress(dataDir: string, response: Promise<SlowPutResponse>): Promise<void> {
  let answered: SlowPutResponse | undefined;
  response.then(
    (r) => {
      answered = r;
    },
    () => undefined,
  );
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    if (answered) throw new Error(`the slow write was answered early: ${answered.status} ${answered.body}`);
    if (leftoverTempFiles(dataDir).length > 0) return;
    await sleep(5);
  }
  throw new Error("the gateway never started receiving the slow body");
}
