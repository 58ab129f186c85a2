import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { CreateBucketCommand, PutObjectCommand } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  describeLeaseLoss,
  explainLeaseLoss,
  FenceClient,
  type Lease,
  LeaseLostError,
} from "../../src/client/index.js";
import { startTestGateway, type TestGateway, tempDir } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";
import { sleep } from "../support/wait.js";

checkLeaseApiResponses();

/**
 * A lost lease says what happened: broken by an administrator, expired, superseded by token N,
 * released; in the SDK's LeaseLostError (reason and message) and in the audit log. A refused
 * write's audit record names the owner of the lease its token belongs to.
 */

const ADMIN = { accessKeyId: "root-key", secretAccessKey: "root-secret-key" };
const WORKER = { accessKeyId: "worker-key", secretAccessKey: "worker-secret-key" };
let gw: TestGateway;
let cleanup: () => void;
let admin: FenceClient;
let worker: FenceClient;

beforeAll(async () => {
  const dir = tempDir();
  cleanup = dir.cleanup;
  const configFile = join(dir.path, "fencegate.yaml");
  writeFileSync(
    configFile,
    `credentials:\n  - accessKeyId: ${WORKER.accessKeyId}\n    secretAccessKey: ${WORKER.secretAccessKey}\n`,
  );
  gw = await startTestGateway({
    env: {
      FENCEGATE_CONFIG: configFile,
      FENCEGATE_ACCESS_KEY_ID: ADMIN.accessKeyId,
      FENCEGATE_SECRET_ACCESS_KEY: ADMIN.secretAccessKey,
    },
  });
  admin = new FenceClient({ endpoint: gw.url, ...ADMIN });
  worker = new FenceClient({ endpoint: gw.url, ...WORKER });
  await gw.s3({ credentials: ADMIN }).send(new CreateBucketCommand({ Bucket: "words" }));
});

afterAll(async () => {
  await gw?.stop();
  cleanup?.();
});

/** The LeaseLostError a handle signals (its renewals come every ~250 ms with a 600 ms TTL). */
function lossOf(lease: Lease): Promise<LeaseLostError> {
  return new Promise((resolve) => {
    lease.signal.addEventListener("abort", () => resolve(lease.signal.reason as LeaseLostError));
  });
}

describe("describeLeaseLoss", () => {
  it("has distinct words for each way a lease ends", () => {
    const words = [
      describeLeaseLoss("broken", { leaseId: "L1" }),
      describeLeaseLoss("expired", { leaseId: "L1" }),
      describeLeaseLoss("superseded", { leaseId: "L1", supersededBy: 43 }),
      describeLeaseLoss("released", { leaseId: "L1" }),
    ];
    expect(words[0]).toBe("lease L1 was broken by an administrator");
    expect(words[1]).toBe("lease L1 expired (not renewed in time)");
    expect(words[2]).toContain("lease L1 was superseded by token 43");
    expect(words[3]).toBe("lease L1 was released");
    expect(new Set(words).size).toBe(4);
  });
});

describe("a Lease handle's LeaseLostError", () => {
  it("says broken by an administrator when an administrator broke it, and the audit says LeaseBroken", async () => {
    const lease = await worker.lease({ bucket: "words", key: "broken", ttlMs: 600 });
    const lost = lossOf(lease);
    await admin.breakLease(lease.leaseId);
    const err = await lost;
    expect(err).toBeInstanceOf(LeaseLostError);
    expect(err.reason).toBe("broken");
    expect(err.by).toBe(ADMIN.accessKeyId);
    expect(err.message).toBe(`lease ${lease.leaseId} was broken by an administrator (${ADMIN.accessKeyId})`);
    expect(() => lease.throwIfLost()).toThrow(/broken by an administrator/);
    const ops = (await admin.audit({ leaseId: lease.leaseId })).records.map((r) => r.op);
    expect(ops).toContain("LeaseBroken");
    expect(ops).not.toContain("LeaseReleased");
  });

  it("says released when it was released by someone else, and the audit says LeaseReleased", async () => {
    const lease = await worker.lease({ bucket: "words", key: "released", ttlMs: 600 });
    const lost = lossOf(lease);
    await admin.release(lease.leaseId);
    const err = await lost;
    expect(err.reason).toBe("released");
    expect(err.message).toBe(`lease ${lease.leaseId} was released (${ADMIN.accessKeyId})`);
    const ops = (await admin.audit({ leaseId: lease.leaseId })).records.map((r) => r.op);
    expect(ops).toContain("LeaseReleased");
    expect(ops).not.toContain("LeaseBroken");
  });

  it("says expired when it could not be renewed in time", async () => {
    // A client whose renewals never reach a gateway: the handle's own expiry ends it.
    const lease = await worker.lease({
      bucket: "words",
      key: "expired",
      ttlMs: 600,
      renewAt: { from: 5, to: 5 },
    });
    const err = await lossOf(lease);
    expect(err.reason).toBe("expired");
    expect(err.message).toBe(`lease ${lease.leaseId} expired (not renewed in time)`);
  });
});

describe("explainLeaseLoss and the gateway's answer", () => {
  it("tells a superseded lease (by the newer token) from one that only expired", async () => {
    const old = await worker.acquire({ bucket: "words", key: "superseded", ttlMs: 500 });
    await sleep(700);
    const renewal = await worker.renew(old.leaseId).catch((e: unknown) => e);
    expect(renewal).toBeInstanceOf(LeaseLostError);
    expect((renewal as LeaseLostError).reason).toBe("expired");
    // Until a newer lease is granted it is not called superseded (its LeaseExpired record may
    // not be written yet: the gateway records expiries as it notices them).
    const before = await explainLeaseLoss((q) => worker.audit(q), old);
    expect(before?.reason ?? "expired").toBe("expired");

    const next = await admin.acquire({ bucket: "words", key: "superseded", ttlMs: 5_000 });
    expect(await explainLeaseLoss((q) => worker.audit(q), old)).toEqual({
      reason: "superseded",
      supersededBy: next.token,
    });
    await admin.release(next.leaseId);
  });
});

describe("the audit record of a refused write", () => {
  it("names the owner of the lease its token belongs to", async () => {
    const s3 = gw.s3({ credentials: WORKER });
    try {
      const first = await worker.acquire({ bucket: "words", key: "owned", ttlMs: 500, owner: "worker-7" });
      await sleep(700);
      const second = await admin.acquire({ bucket: "words", key: "owned", ttlMs: 5_000, owner: "worker-8" });
      const refused = await s3
        .send(
          new PutObjectCommand({
            Bucket: "words",
            Key: "owned",
            Body: "late",
            Metadata: { "fence-token": first.fencingToken },
          }),
        )
        .catch((e: { name: string; $metadata: { requestId?: string } }) => e);
      expect((refused as { name: string }).name).toBe("StaleFencingToken");
      const records = (await admin.audit({ bucket: "words", key: "owned", op: "PutObject" })).records;
      const record = records.find(
        (r) => r.requestId === (refused as { $metadata: { requestId?: string } }).$metadata.requestId,
      );
      expect(record).toMatchObject({
        decision: "rejected",
        reason: "StaleFencingToken",
        leaseId: first.leaseId,
        token: first.token,
        owner: "worker-7",
      });
      await admin.release(second.leaseId);
    } finally {
      s3.destroy();
    }
  });
});
