// Safety scenario 2 on the remote backends, paused at the exact step: a gateway process (S3 or
// Azure backend) has checked a write's lease and HCT and sent the conditional write that commits
// it; the store's proxy holds that call. Meanwhile the lease ends, a newer lease is granted (which
// fences the paused commit's object) and writes, even the very same bytes. When the held call
// reaches the store it must be refused, and the object keep the newer lease's bytes and HCT.
import {
  CreateBucketCommand,
  DeleteBucketCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  type S3Client,
} from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Lease, LeaseClient } from "../../src/client/lease-client.js";
import { md5Hex } from "../support/digest.js";
import { CREDENTIALS, type GatewayProcess, s3Client, spawnGateway, tempDir } from "../support/gateway.js";
import { allAuditRecords, outcomeOfError, quietLogger, type S3Outcome } from "../support/safety-helpers.js";
import { sleep } from "../support/wait.js";
import { REMOTE_STORES, type RemoteStore, reached } from "./remote-stores.js";

const BUCKET = "paused";

/** The HTTP outcome of a failed call; a call that got no answer (the gateway gone) is status 0. */
function outcomeOf(err: unknown): S3Outcome {
  try {
    return outcomeOfError(err);
  } catch {
    return { status: 0, code: String(err), highestToken: null, requestId: null };
  }
}

for (const remote of REMOTE_STORES) {
  describe(`a commit paused at its conditional write (${remote.name})`, () => {
    const dir = tempDir("fencegate-safety-paused-");
    let store: RemoteStore;
    let gateway: GatewayProcess;
    let s3: S3Client;
    let leases: LeaseClient;

    beforeAll(async () => {
      store = await remote.start();
      gateway = await spawnGateway(dir.path, store.env);
      s3 = s3Client(gateway.url, { logger: quietLogger });
      leases = new LeaseClient({ endpoint: gateway.url, ...CREDENTIALS });
      await s3.send(new CreateBucketCommand({ Bucket: BUCKET }));
    }, 90_000);

    afterAll(async () => {
      s3?.destroy();
      await gateway?.kill("SIGKILL");
      await store?.stop();
      dir.cleanup();
    });

    const put = (key: string, lease: Lease, body: string, writer: string) =>
      s3.send(
        new PutObjectCommand({
          Bucket: BUCKET,
          Key: key,
          Body: body,
          ContentType: "text/plain",
          Metadata: { "fence-token": lease.fencingToken, writer },
        }),
      );

    /** Starts a write with `lease` and resolves once its commit call is held by the store's proxy. */
    async function pausedPut(key: string, lease: Lease, body: string, writer: string) {
      const hold = store.holdCommit(BUCKET, key);
      const answer = put(key, lease, body, writer).then(
        (out): S3Outcome => ({
          status: out.$metadata.httpStatusCode ?? 0,
          code: null,
          highestToken: null,
          requestId: out.$metadata.requestId ?? null,
        }),
        (err: unknown) => outcomeOf(err),
      );
      await Promise.race([
        reached(hold, `the commit of ${key} to reach the store`),
        answer.then((a) => {
          throw new Error(`the write was answered before its commit: ${JSON.stringify(a)}`);
        }),
      ]);
      return { release: hold.release, answer };
    }

    async function expectObject(key: string, body: string, writer: string) {
      const head = await s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: key }));
      expect(head.ETag).toBe(`"${md5Hex(body)}"`);
      expect(head.Metadata).toEqual({ writer });
      const got = await s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: key }));
      expect(await got.Body!.transformToString()).toBe(body);
    }

    /** A write with `stale` is refused, naming an HCT of at least `hct`; nothing changes. */
    async function expectHct(key: string, stale: Lease, hct: number) {
      const refused = await put(key, stale, "a stale write", "stale").then(
        () => null,
        (err: unknown) => outcomeOfError(err),
      );
      expect(refused).toMatchObject({ status: 409, code: "StaleFencingToken" });
      expect(refused!.highestToken).toBeGreaterThanOrEqual(hct);
    }

    async function expectRefusalAudited(key: string, requestId: string | null, token: number) {
      const records = await allAuditRecords(leases, { bucket: BUCKET, key, op: "PutObject" });
      const mine = records.filter((r) => r.token === token);
      expect(mine.map((r) => [r.decision, r.reason, r.requestId])).toEqual([
        ["rejected", "StaleFencingToken", requestId],
      ]);
    }

    it("refuses it when the lease was released and a newer lease wrote the same bytes meanwhile", async () => {
      const key = "released-same-bytes";
      const lease1 = await leases.acquire({ bucket: BUCKET, key, ttlMs: 30_000, owner: "paused" });
      const paused = await pausedPut(key, lease1, "the same bytes", "same");

      await leases.release(lease1.leaseId);
      const lease2 = await leases.acquire({ bucket: BUCKET, key, ttlMs: 30_000, owner: "next" });
      expect(lease2.token).toBeGreaterThan(lease1.token);
      const written = await put(key, lease2, "the same bytes", "same");
      expect(written.$metadata.httpStatusCode).toBe(200);

      paused.release();
      const res = await paused.answer;
      expect(res.status).toBe(409);
      expect(res.code).toBe("StaleFencingToken");
      expect(res.highestToken).toBeGreaterThanOrEqual(lease2.token);
      await expectObject(key, "the same bytes", "same");
      await expectRefusalAudited(key, res.requestId, lease1.token);
      await expectHct(key, lease1, lease2.token);
      await expectObject(key, "the same bytes", "same");

      // Lease 2 goes on writing.
      await put(key, lease2, "lease 2 again", "next");
      await expectObject(key, "lease 2 again", "next");
      await leases.release(lease2.leaseId);
    });

    it("refuses it when the lease expired and a newer lease was granted but has not written", async () => {
      const key = "expired-not-written";
      const lease0 = await leases.acquire({ bucket: BUCKET, key, ttlMs: 30_000, owner: "first" });
      await put(key, lease0, "the original bytes", "first");
      await leases.release(lease0.leaseId);

      const lease1 = await leases.acquire({ bucket: BUCKET, key, ttlMs: 1_000, owner: "paused" });
      const paused = await pausedPut(key, lease1, "the paused bytes", "paused");
      await sleep(Math.max(0, Date.parse(lease1.expiresAt) - Date.now()) + 50);
      const lease2 = await leases.acquire({
        bucket: BUCKET,
        key,
        ttlMs: 30_000,
        waitMs: 5_000,
        owner: "next",
      });

      paused.release();
      const res = await paused.answer;
      expect(res.status).toBe(409);
      expect(res.code).toBe("StaleFencingToken");
      await expectObject(key, "the original bytes", "first");
      await expectRefusalAudited(key, res.requestId, lease1.token);

      expect((await put(key, lease2, "lease 2's bytes", "next")).$metadata.httpStatusCode).toBe(200);
      await expectObject(key, "lease 2's bytes", "next");
      await expectHct(key, lease1, lease2.token);
      await leases.release(lease2.leaseId);
    });

    it("refuses it when its bucket was deleted and created again meanwhile; the next lease is granted", async () => {
      // An empty bucket, so that deleting it removes it from the store (S3) or marks it (Azure).
      const bucket = "paused-gone";
      const key = "in-a-deleted-bucket";
      await s3.send(new CreateBucketCommand({ Bucket: bucket }));
      const lease1 = await leases.acquire({ bucket, key, ttlMs: 30_000, owner: "paused" });
      const hold = store.holdCommit(bucket, key);
      const answer = s3
        .send(
          new PutObjectCommand({
            Bucket: bucket,
            Key: key,
            Body: "the paused bytes",
            Metadata: { "fence-token": lease1.fencingToken },
          }),
        )
        .then(
          () => null,
          (err: unknown) => outcomeOf(err),
        );
      await reached(hold, `the commit of ${key} to reach the store`);
      await leases.release(lease1.leaseId);
      await s3.send(new DeleteBucketCommand({ Bucket: bucket }));

      // The grant first fences the paused commit's object, in a bucket that is gone.
      const lease2 = await leases.acquire({ bucket, key, ttlMs: 30_000, owner: "next" });
      expect(lease2.token).toBeGreaterThan(lease1.token);
      await s3.send(new CreateBucketCommand({ Bucket: bucket }));

      hold.release();
      expect(await answer).toMatchObject({ status: 409, code: "StaleFencingToken" });
      await expect(s3.send(new HeadObjectCommand({ Bucket: bucket, Key: key }))).rejects.toMatchObject({
        $metadata: { httpStatusCode: 404 },
      });
      const next = await s3.send(
        new PutObjectCommand({
          Bucket: bucket,
          Key: key,
          Body: "lease 2's bytes",
          Metadata: { "fence-token": lease2.fencingToken },
        }),
      );
      expect(next.$metadata.httpStatusCode).toBe(200);
      await leases.release(lease2.leaseId);
    });

    it("kill -9 of the gateway while its commit is held: after a restart and a new grant, the commit arrives and is refused", {
      timeout: 120_000,
    }, async () => {
      const key = "killed-mid-commit";
      const lease0 = await leases.acquire({ bucket: BUCKET, key, ttlMs: 30_000, owner: "first" });
      await put(key, lease0, "the old bytes", "first");
      await leases.release(lease0.leaseId);

      const lease1 = await leases.acquire({ bucket: BUCKET, key, ttlMs: 1_500, owner: "killed" });
      const paused = await pausedPut(key, lease1, "bytes of the killed gateway", "killed");
      await gateway.kill("SIGKILL");
      expect((await paused.answer).status).toBe(0); // no answer: the gateway is gone

      // Restarted on the same data directory (its lease store holds lease 1's commit intent).
      s3.destroy();
      gateway = await spawnGateway(dir.path, store.env);
      s3 = s3Client(gateway.url, { logger: quietLogger });
      leases = new LeaseClient({ endpoint: gateway.url, ...CREDENTIALS });
      const lease2 = await leases.acquire({
        bucket: BUCKET,
        key,
        ttlMs: 30_000,
        waitMs: 10_000,
        owner: "next",
      });
      expect(lease2.token).toBeGreaterThan(lease1.token);

      // The dead gateway's conditional write reaches the store only now: it must change nothing.
      paused.release();
      await sleep(500);
      await expectObject(key, "the old bytes", "first");
      expect((await put(key, lease2, "lease 2's bytes", "next")).$metadata.httpStatusCode).toBe(200);
      await expectObject(key, "lease 2's bytes", "next");
      await expectHct(key, lease1, lease2.token);
      await leases.release(lease2.leaseId);
    });

    it("commits it when nothing happened meanwhile (the hold itself changes nothing)", async () => {
      const key = "undisturbed";
      const lease = await leases.acquire({ bucket: BUCKET, key, ttlMs: 30_000, owner: "alone" });
      const paused = await pausedPut(key, lease, "committed after the pause", "alone");
      await sleep(200);
      paused.release();
      expect((await paused.answer).status).toBe(200);
      await expectObject(key, "committed after the pause", "alone");
      await leases.release(lease.leaseId);
    });

    it("leaves nothing behind that the collector does not remove", async () => {
      expect(await store.leftovers()).toEqual([]);
    });
  });
}
