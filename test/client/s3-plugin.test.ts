import {
  CompleteMultipartUploadCommand,
  CopyObjectCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  type S3Client,
  UploadPartCommand,
  UploadPartCopyCommand,
} from "@aws-sdk/client-s3";
import type { FinalizeHandlerArguments } from "@smithy/types";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  FENCE_TOKEN_HEADER,
  FenceClient,
  fencingTokenPlugin,
  type Lease,
  LeaseLostError,
} from "../../src/client/index.js";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";

checkLeaseApiResponses();

const BUCKET = "plugin-bucket";
/** The writes the contract fences, written out here rather than taken from the plugin. */
const WRITES = [
  "PutObject",
  "CopyObject",
  "DeleteObject",
  "DeleteObjects",
  "CreateMultipartUpload",
  "UploadPart",
  "UploadPartCopy",
  "CompleteMultipartUpload",
];
let gw: TestGateway;
let fence: FenceClient;

beforeAll(async () => {
  gw = await startTestGateway();
  fence = new FenceClient({ endpoint: gw.url, ...CREDENTIALS });
  await gw.s3().send(new CreateBucketCommand({ Bucket: BUCKET }));
});
afterAll(async () => {
  await gw?.stop();
});

/** An S3 client that records, per command, the fencing token header of the request as signed and sent. */
function recordingClient(): { s3: S3Client; sent: { command: string; token: string | undefined }[] } {
  const s3 = gw.s3();
  const sent: { command: string; token: string | undefined }[] = [];
  s3.middlewareStack.add(
    (next, context) => async (args) => {
      const headers = (args as FinalizeHandlerArguments<object>).request as {
        headers: Record<string, string>;
      };
      sent.push({
        command: String(context.commandName).replace(/Command$/, ""),
        token: headers.headers[FENCE_TOKEN_HEADER],
      });
      return next(args);
    },
    { step: "deserialize", name: "recordSentToken" },
  );
  return { s3, sent };
}

describe("fencingTokenPlugin", () => {
  it("refuses, without the plugin, a write that carries no token (the gateway requires one)", async () => {
    const err = await gw
      .s3()
      .send(new PutObjectCommand({ Bucket: BUCKET, Key: "p/none", Body: "x" }))
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ name: "FencingTokenRequired", $metadata: { httpStatusCode: 428 } });
  });

  it("sends the lease's token on every write operation, and on no read", async () => {
    const lease: Lease = await fence.lease({ bucket: BUCKET, prefix: "p/", ttlMs: 60_000 });
    const { s3, sent } = recordingClient();
    s3.middlewareStack.use(fencingTokenPlugin(lease));
    try {
      await s3.send(new PutObjectCommand({ Bucket: BUCKET, Key: "p/a", Body: "alpha" }));
      await s3.send(new CopyObjectCommand({ Bucket: BUCKET, Key: "p/b", CopySource: `${BUCKET}/p/a` }));
      const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket: BUCKET, Key: "p/mpu" }));
      const part1 = await s3.send(
        new UploadPartCommand({
          Bucket: BUCKET,
          Key: "p/mpu",
          UploadId,
          PartNumber: 1,
          Body: Buffer.alloc(5 * 1024 * 1024, 1),
        }),
      );
      const part2 = await s3.send(
        new UploadPartCopyCommand({
          Bucket: BUCKET,
          Key: "p/mpu",
          UploadId,
          PartNumber: 2,
          CopySource: `${BUCKET}/p/a`,
        }),
      );
      await s3.send(
        new CompleteMultipartUploadCommand({
          Bucket: BUCKET,
          Key: "p/mpu",
          UploadId,
          MultipartUpload: {
            Parts: [
              { PartNumber: 1, ETag: part1.ETag },
              { PartNumber: 2, ETag: part2.CopyPartResult?.ETag },
            ],
          },
        }),
      );
      await s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: "p/mpu" }));
      const got = await s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: "p/b" }));
      expect(await got.Body?.transformToString()).toBe("alpha");
      await s3.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: "p/" }));
      await s3.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: "p/b" }));
      const deleted = await s3.send(
        new DeleteObjectsCommand({ Bucket: BUCKET, Delete: { Objects: [{ Key: "p/a" }, { Key: "p/mpu" }] } }),
      );
      expect(deleted.Errors ?? []).toEqual([]);

      const writes = sent.filter((s) => WRITES.includes(s.command));
      expect(writes.map((s) => s.command).sort()).toEqual([...WRITES].sort());
      for (const w of writes) expect(w, w.command).toEqual({ command: w.command, token: lease.fencingToken });
      const reads = sent.filter((s) => !WRITES.includes(s.command));
      expect(reads.map((s) => s.command)).toEqual(["HeadObject", "GetObject", "ListObjectsV2"]);
      for (const r of reads) expect(r.token, r.command).toBeUndefined();

      // The gateway checked and accepted each write with this lease's token.
      const { records } = await fence.audit({ bucket: BUCKET, leaseId: lease.leaseId, limit: 1000 });
      const accepted = records.filter((r) => r.decision === "accepted" && !r.op.startsWith("Lease"));
      const ops = new Set(accepted.map((r) => r.op));
      for (const op of WRITES) {
        expect(ops.has(op) || (op === "DeleteObjects" && ops.has("DeleteObject")), op).toBe(true);
      }
      for (const r of accepted) expect(r.token, r.op).toBe(lease.token);
      expect(records.filter((r) => r.decision === "rejected")).toEqual([]);
    } finally {
      await lease.release();
    }
  });

  it("fails a write locally once the lease is lost, sending nothing", async () => {
    const lease = await fence.lease({ bucket: BUCKET, key: "p/late", ttlMs: 60_000 });
    const { s3, sent } = recordingClient();
    s3.middlewareStack.use(fencingTokenPlugin(lease));
    await fence.release(lease.leaseId);
    await expect(lease.renew()).rejects.toBeInstanceOf(LeaseLostError);
    const err = await s3
      .send(new PutObjectCommand({ Bucket: BUCKET, Key: "p/late", Body: "late" }))
      .catch((e) => e);
    expect(err).toBeInstanceOf(LeaseLostError);
    expect(sent).toEqual([]);
  });

  it("takes the token from a string or a function too", async () => {
    const lease = await fence.acquire({ bucket: BUCKET, key: "p/plain", ttlMs: 60_000 });
    for (const source of [lease.fencingToken, () => lease.fencingToken]) {
      const s3 = gw.s3();
      s3.middlewareStack.use(fencingTokenPlugin(source));
      const out = await s3.send(new PutObjectCommand({ Bucket: BUCKET, Key: "p/plain", Body: "x" }));
      expect(out.$metadata.httpStatusCode).toBe(200);
    }
    await fence.release(lease.leaseId);
  });
});
