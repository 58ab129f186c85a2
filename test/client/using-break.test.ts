import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { CreateBucketCommand, GetObjectCommand, PutObjectCommand } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FenceClient, fencingTokenPlugin, LeaseLostError } from "../../src/client/index.js";
import { startTestGateway, type TestGateway, tempDir } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";

checkLeaseApiResponses();

/**
 * using() when an administrator breaks the lease: the work's signal fires at the next renewal,
 * using() rejects with LeaseLostError, and a write the holder sends before noticing is refused by
 * the gateway. Two principals: a worker holds the lease, the root credential (an administrator)
 * breaks it.
 */

const ROOT = { accessKeyId: "root-key", secretAccessKey: "root-secret-key" };
const WORKER = { accessKeyId: "worker-key", secretAccessKey: "worker-secret-key" };
let gw: TestGateway;
let cleanup: () => void;

beforeAll(async () => {
  const dir = tempDir();
  cleanup = dir.cleanup;
  const configFile = join(dir.path, "fencegate.yaml");
  writeFileSync(
    configFile,
    `credentials:
  - accessKeyId: ${WORKER.accessKeyId}
    secretAccessKey: ${WORKER.secretAccessKey}
    allow:
      - { bucket: breaks, prefix: jobs/, actions: [read, write, lease] }
`,
  );
  gw = await startTestGateway({
    env: {
      FENCEGATE_CONFIG: configFile,
      FENCEGATE_ACCESS_KEY_ID: ROOT.accessKeyId,
      FENCEGATE_SECRET_ACCESS_KEY: ROOT.secretAccessKey,
    },
  });
  await gw.s3({ credentials: ROOT }).send(new CreateBucketCommand({ Bucket: "breaks" }));
});

afterAll(async () => {
  await gw?.stop();
  cleanup?.();
});

describe("using() and an administrator's break", () => {
  it("aborts the work, rejects with LeaseLostError, and the holder's late write is refused", async () => {
    const worker = new FenceClient({ endpoint: gw.url, ...WORKER });
    const admin = new FenceClient({ endpoint: gw.url, ...ROOT });
    const s3 = gw.s3({ credentials: WORKER });
    let lateWrite: unknown;
    let sawAbort = false;
    const started = Date.now();
    const outcome = worker.using({ bucket: "breaks", key: "jobs/report", ttlMs: 3_000 }, async (lease) => {
      s3.middlewareStack.use(fencingTokenPlugin(() => lease.fencingToken));
      await s3.send(new PutObjectCommand({ Bucket: "breaks", Key: "jobs/report", Body: "first" }));
      const broken = await admin.breakLease(lease.leaseId);
      expect(broken.floorToken).toBeGreaterThan(lease.token);
      // The holder has not noticed yet; the gateway refuses its write anyway.
      lateWrite = await s3
        .send(new PutObjectCommand({ Bucket: "breaks", Key: "jobs/report", Body: "late" }))
        .catch((e: unknown) => e);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, 30_000);
        lease.signal.addEventListener("abort", () => {
          sawAbort = true;
          clearTimeout(t);
          resolve();
        });
      });
      return "finished";
    });
    const err = await outcome.then(
      () => new Error("using() resolved"),
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(LeaseLostError);
    expect(sawAbort).toBe(true);
    expect(Date.now() - started).toBeLessThan(3_000); // the next renewal, well before the TTL ran out
    expect(lateWrite).toMatchObject({ $metadata: { httpStatusCode: 409 } });
    const got = await gw
      .s3({ credentials: WORKER })
      .send(new GetObjectCommand({ Bucket: "breaks", Key: "jobs/report" }));
    expect(await got.Body?.transformToString()).toBe("first");
  });

  it("a worker cannot break a lease", async () => {
    const worker = new FenceClient({ endpoint: gw.url, ...WORKER });
    const lease = await worker.acquire({ bucket: "breaks", key: "jobs/other", ttlMs: 5_000 });
    await expect(worker.breakLease(lease.leaseId)).rejects.toMatchObject({
      name: "AccessDeniedError",
      status: 403,
    });
    await worker.release(lease.leaseId);
  });
});
