// Every fenced write path with the answer of its commit lost, on every remote backend:
// CreateMultipartUpload, UploadPart, CompleteMultipartUpload (also retried after the gateway
// restarted), CopyObject, DeleteObject and each key of DeleteObjects. The store acts, the gateway
// never hears: the client is told it landed, or that its outcome is unknown (503 with
// x-fence-outcome: unknown), never that it was refused; the audit log never says "rejected" for it,
// and its last word is "accepted".
import {
  CompleteMultipartUploadCommand,
  CopyObjectCommand,
  CreateMultipartUploadCommand,
  DeleteObjectsCommand,
  type S3Client,
  UploadPartCommand,
} from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fencingTokenClient } from "../../../src/client/s3-plugin.js";
import type { HttpMatch } from "../../support/fault-proxy.js";
import { type TestGateway, tempDir } from "../../support/gateway.js";
import { quietLogger } from "../../support/safety-helpers.js";
import {
  createBucket,
  del,
  expectAcceptedOrUnknown,
  gatewayOn,
  newBucket,
  put,
  read,
  settledRecords,
} from "./fault-kit.js";
import { FAULTY_STORES, type FaultyStore } from "./faulty-store.js";

/** The status and request id of an SDK call, thrown or not. */
async function sdkAnswer(call: Promise<unknown>) {
  try {
    const out = (await call) as { $metadata: { httpStatusCode?: number; requestId?: string } };
    return {
      status: out.$metadata.httpStatusCode ?? 0,
      requestId: out.$metadata.requestId ?? "",
      outcome: undefined,
    };
  } catch (e) {
    const err = e as {
      $metadata?: { httpStatusCode?: number; requestId?: string };
      $response?: { headers?: Record<string, string> };
      name?: string;
    };
    const status = err.$metadata?.httpStatusCode;
    if (status === undefined) throw e;
    return {
      status,
      requestId: err.$metadata?.requestId ?? err.$response?.headers?.["x-amz-request-id"] ?? "",
      outcome: err.$response?.headers?.["x-fence-outcome"],
      code: err.name,
    };
  }
}

describe.each(FAULTY_STORES)("every write path with a lost commit answer on $name", ({ start }) => {
  let store: FaultyStore;
  let gw: TestGateway;
  let s3: S3Client;
  // Kept across the gateway's restart: its leases, commit intents and audit log live there.
  const dataDir = tempDir();

  beforeAll(async () => {
    store = await start();
    gw = await gatewayOn(store, { requestTimeoutMs: 2_000 }, { dataDir: dataDir.path });
    s3 = gw.s3({ maxAttempts: 1, logger: quietLogger });
  }, 60_000);

  afterAll(async () => {
    s3?.destroy();
    await gw?.stop();
    await store?.stop();
    dataDir.cleanup();
  });

  /** Loses the answers of the requests `match` picks while `run` runs; returns how many. */
  async function losing<T>(match: HttpMatch, run: () => Promise<T>): Promise<{ value: T; lost: number }> {
    const rule = store.proxy.on(match, { kind: "drop-answer" }, { times: Infinity });
    try {
      return { value: await run(), lost: rule.count };
    } finally {
      rule.cancel();
    }
  }

  async function lastWord(bucket: string, requestId: string) {
    const records = await settledRecords(gw, bucket, requestId);
    expect(records.map((r) => r.decision)).not.toContain("rejected");
    return records.at(-1)!.decision;
  }

  it("CopyObject", async () => {
    const bucket = newBucket(store);
    await createBucket(gw, bucket);
    const lease = await gw.leases.acquire({ bucket, prefix: "", ttlMs: 60_000 });
    expect((await put(gw, bucket, "src", "copied bytes", lease.fencingToken)).status).toBe(200);
    const fenced = fencingTokenClient(s3, lease.fencingToken);
    const { value: answer, lost } = await losing(store.commit(bucket, "dst"), () =>
      sdkAnswer(
        fenced.send(new CopyObjectCommand({ Bucket: bucket, Key: "dst", CopySource: `${bucket}/src` })),
      ),
    );
    expect(lost).toBeGreaterThan(0);
    expect(await read(gw, bucket, "dst")).toBe("copied bytes");
    expectAcceptedOrUnknown({ ...answer, code: null, text: "" });
    expect(await lastWord(bucket, answer.requestId)).toBe("accepted");
  });

  it("DeleteObject", async () => {
    const bucket = newBucket(store);
    await createBucket(gw, bucket);
    const lease = await gw.leases.acquire({ bucket, key: "k", ttlMs: 60_000 });
    expect((await put(gw, bucket, "k", "to delete", lease.fencingToken)).status).toBe(200);
    const { value: answer, lost } = await losing(store.commit(bucket, "k"), () =>
      del(gw, bucket, "k", lease.fencingToken),
    );
    expect(lost).toBeGreaterThan(0);
    expect(await read(gw, bucket, "k")).toBeNull();
    expectAcceptedOrUnknown(answer, 204);
    expect(await lastWord(bucket, answer.requestId)).toBe("accepted");
  });

  it("each key of DeleteObjects", async () => {
    const bucket = newBucket(store);
    await createBucket(gw, bucket);
    const lease = await gw.leases.acquire({ bucket, prefix: "", ttlMs: 60_000 });
    for (const key of ["a", "b"])
      expect((await put(gw, bucket, key, key, lease.fencingToken)).status).toBe(200);
    const fenced = fencingTokenClient(s3, lease.fencingToken);
    const { value: out, lost } = await losing(store.commit(bucket, "a"), () =>
      fenced.send(
        new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: [{ Key: "a" }, { Key: "b" }] } }),
      ),
    );
    expect(lost).toBeGreaterThan(0);
    expect(await read(gw, bucket, "a")).toBeNull();
    expect(await read(gw, bucket, "b")).toBeNull();
    // A key whose outcome stayed unknown is reported as an error of that key, never refused.
    for (const error of out.Errors ?? []) {
      expect(error).toMatchObject({ Key: "a", Code: "ServiceUnavailable" });
      expect(error.Message).toMatch(/may or may not have landed/);
    }
    expect((out.Deleted ?? []).map((d) => d.Key)).toContain("b");
  });

  it("CreateMultipartUpload, UploadPart and CompleteMultipartUpload, then the completion retried after a restart", async () => {
    const bucket = newBucket(store);
    await createBucket(gw, bucket);
    const lease = await gw.leases.acquire({ bucket, key: "mp", ttlMs: 60_000 });
    const fenced = fencingTokenClient(s3, lease.fencingToken);
    // The upload's and the parts' records: the store keeps them, the answers are lost.
    const meta: HttpMatch = { method: "PUT", path: (p) => p.includes("/.fencegate/u/") };
    const created = await losing(meta, () =>
      sdkAnswer(fenced.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: "mp" }))),
    );
    expect(created.value.status === 200 || created.value.outcome === "unknown").toBe(true);
    // The client retries an unknown creation: a second upload, the first one is harmless.
    const { UploadId } = await fenced.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: "mp" }));
    const part = await losing(meta, () =>
      sdkAnswer(
        fenced.send(
          new UploadPartCommand({ Bucket: bucket, Key: "mp", UploadId, PartNumber: 1, Body: "part one" }),
        ),
      ),
    );
    expect(part.value.status === 200 || part.value.outcome === "unknown").toBe(true);
    // Retried (with the same bytes) whatever happened: a part is overwritten.
    const { ETag } = await fenced.send(
      new UploadPartCommand({ Bucket: bucket, Key: "mp", UploadId, PartNumber: 1, Body: "part one" }),
    );
    const complete = () =>
      sdkAnswer(
        fenced.send(
          new CompleteMultipartUploadCommand({
            Bucket: bucket,
            Key: "mp",
            UploadId,
            MultipartUpload: { Parts: [{ PartNumber: 1, ETag }] },
          }),
        ),
      );
    const completed = await losing(store.commit(bucket, "mp"), complete);
    expect(completed.lost).toBeGreaterThan(0);
    expect(await read(gw, bucket, "mp")).toBe("part one");
    expectAcceptedOrUnknown({ ...completed.value, code: null, text: "" });
    expect(await lastWord(bucket, completed.value.requestId)).toBe("accepted");
    // The gateway restarts; the client, which never heard, completes again: the same answer.
    await gw.stop();
    gw = await gatewayOn(store, { requestTimeoutMs: 2_000 }, { dataDir: dataDir.path });
    s3.destroy();
    s3 = gw.s3({ maxAttempts: 1, logger: quietLogger });
    const again = await sdkAnswer(
      fencingTokenClient(s3, lease.fencingToken).send(
        new CompleteMultipartUploadCommand({
          Bucket: bucket,
          Key: "mp",
          UploadId,
          MultipartUpload: { Parts: [{ PartNumber: 1, ETag }] },
        }),
      ),
    );
    expect(again.status).toBe(200);
    expect(await read(gw, bucket, "mp")).toBe("part one");
  }, 60_000);
});
