import { CreateBucketCommand, PutObjectCommand } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AccessDeniedError,
  FenceClient,
  fencingTokenPlugin,
  LeaseLostError,
} from "../../src/client/index.js";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";
import { sleep } from "../support/wait.js";

checkLeaseApiResponses();

/**
 * The SDK's side of delegated liveness: the owner hands a worker a delegate credential, the
 * worker attaches a Lease handle with it (releases: false) and keeps the lease alive and writes
 * after the owner stopped renewing; it cannot release; the owner's release ends it for the worker.
 */

let gw: TestGateway;

beforeAll(async () => {
  gw = await startTestGateway({
    overrides: { leases: { minTtlMs: 500, maxTtlMs: 3_600_000, maxWaitMs: 60_000 } },
  });
  await gw.s3().send(new CreateBucketCommand({ Bucket: "delegated" }));
});
afterAll(async () => {
  await gw?.stop();
});

describe("delegates through the SDK", () => {
  it("a worker keeps the owner's lease alive with a delegate credential, writes, and cannot release", async () => {
    const owner = new FenceClient({ endpoint: gw.url, ...CREDENTIALS });
    const lease = await owner.lease({ bucket: "delegated", key: "out", ttlMs: 1_000 });
    const credential = await owner.delegate(lease.leaseId);
    expect(credential).toMatchObject({ leaseId: lease.leaseId, accessKeyId: expect.any(String) });
    expect((await owner.listDelegates(lease.leaseId)).delegates.map((d) => d.delegateId)).toEqual([
      credential.delegateId,
    ]);

    const worker = new FenceClient({
      endpoint: gw.url,
      accessKeyId: credential.accessKeyId,
      secretAccessKey: credential.secretAccessKey,
    });
    const held = await worker.attach(lease.leaseId, { releases: false });
    expect(held.fencingToken).toBe(lease.fencingToken);
    lease.detach(); // the owner stops renewing
    await sleep(2_500); // two and a half TTLs
    expect(held.state, String(held.signal.reason)).toBe("held");

    const s3 = gw.s3({
      credentials: { accessKeyId: credential.accessKeyId, secretAccessKey: credential.secretAccessKey },
    });
    s3.middlewareStack.use(fencingTokenPlugin(held));
    const put = await s3.send(
      new PutObjectCommand({ Bucket: "delegated", Key: "out", Body: "by the worker" }),
    );
    expect(put.$metadata.httpStatusCode).toBe(200);

    await expect(worker.release(lease.leaseId)).rejects.toBeInstanceOf(AccessDeniedError);
    await expect(worker.delegate(lease.leaseId)).rejects.toBeInstanceOf(AccessDeniedError);

    await owner.release(lease.leaseId);
    const lost = await new Promise<unknown>((resolve) => {
      if (held.signal.aborted) resolve(held.signal.reason);
      held.signal.addEventListener("abort", () => resolve(held.signal.reason));
    });
    expect(lost).toBeInstanceOf(LeaseLostError);
  });

  it("a revoked delegate's renewals are refused and its handle fires", async () => {
    const owner = new FenceClient({ endpoint: gw.url, ...CREDENTIALS });
    const lease = await owner.lease({ bucket: "delegated", key: "revoked", ttlMs: 1_000 });
    const credential = await owner.delegate(lease.leaseId);
    const worker = new FenceClient({
      endpoint: gw.url,
      accessKeyId: credential.accessKeyId,
      secretAccessKey: credential.secretAccessKey,
      retry: { attempts: 1 },
    });
    const held = await worker.attach(lease.leaseId, { releases: false });
    await owner.revokeDelegate(lease.leaseId, credential.delegateId);
    const reason = await new Promise<unknown>((resolve) => {
      held.signal.addEventListener("abort", () => resolve(held.signal.reason));
    });
    expect(reason).toBeInstanceOf(LeaseLostError);
    expect(lease.state).toBe("held"); // the owner's own handle is unaffected
    await lease.release();
  });
});
