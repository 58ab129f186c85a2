import { PutObjectCommand } from "@aws-sdk/client-s3";
import { afterEach, describe, expect, it } from "vitest";
import type { AuditDraft } from "../../src/audit/audit-log.js";
import { createEmbeddedAuditLog } from "../../src/audit/embedded/embedded-audit-log.js";
import { createFsBackend } from "../../src/backends/fs/index.js";
import { fakeClock } from "../../src/core/clock.js";
import { makeKeyring, signFencingToken } from "../../src/fence/tokens.js";
import { WriteFencer } from "../../src/fence/write-fencer.js";
import { createEmbeddedLeaseStore } from "../../src/leases/embedded/embedded-lease-store.js";
import { LeaseService } from "../../src/leases/lease-service.js";
import { openEmbeddedDb } from "../../src/sqlite/db.js";
import { verifiedBody } from "../support/bodies.js";
import { startTestGateway, type TestGateway, tempDir } from "../support/gateway.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe("audit records and commits", () => {
  it("commits the accepted record in the write's own transaction: if recording fails, nothing is written", async () => {
    const dir = tempDir();
    const db = openEmbeddedDb({ dataDir: dir.path });
    cleanups.push(() => {
      db.close();
      dir.cleanup();
    });
    const clock = fakeClock();
    const backend = await createFsBackend({ dataDir: dir.path, db, clock });
    const leases = createEmbeddedLeaseStore({ db, clock });
    const log = createEmbeddedAuditLog({ db, gatewayId: "gw-test", clock });
    const keyring = makeKeyring([{ id: "k1", secret: Buffer.alloc(32, 1) }]);
    let failRecording = true;
    // The same log, whose appends inside another component's step fail.
    const audit = {
      ...log,
      appendInStep: (draft: AuditDraft) => {
        if (failRecording) throw new Error("disk full");
        return log.appendInStep(draft);
      },
    };
    const fencer = new WriteFencer({
      leases,
      audit,
      keyring,
      clock,
      policyFor: () => "required",
      writeState: (b, k) => backend.writeState(b, k),
      highestToken: (b, k) => backend.highestToken(b, k),
      domainOf: () => backend.domain,
    });
    await backend.createBucket("bkt");
    const granted = await leases.tryAcquire({
      resource: { bucket: "bkt", key: "k" },
      ttlMs: 60_000,
      owner: "t",
    });
    if (!granted.granted) throw new Error("lease not granted");
    const lease = granted.lease;
    const tokenString = signFencingToken(
      { leaseId: lease.leaseId, token: lease.token, bucket: "bkt", key: "k" },
      keyring.active,
    );
    const write = () =>
      fencer.write(
        { op: "PutObject", bucket: "bkt", key: "k", tokenString, principal: "p", requestId: "r" },
        (commit) =>
          backend.putObject(
            {
              bucket: "bkt",
              key: "k",
              body: verifiedBody("data"),
              metadata: { headers: {}, userMetadata: {} },
            },
            commit,
          ),
      );

    // Answered 503 (the log could not take the decision), never as a fault of the request.
    await expect(write()).rejects.toMatchObject({
      code: "ServiceUnavailable",
      cause: new Error("disk full"),
    });
    await expect(backend.headObject("bkt", "k")).rejects.toMatchObject({ code: "NoSuchKey" });
    expect(await backend.highestToken("bkt", "k")).toBeNull();
    const refused = await log.query({ limit: 10 });
    expect(refused.records.map((r) => [r.op, r.decision, r.reason])).toEqual([
      ["PutObject", "rejected", "ServiceUnavailable"],
    ]);

    failRecording = false;
    await write();
    expect((await backend.headObject("bkt", "k")).size).toBe(4);
    const all = await log.query({ limit: 10, decision: "accepted" });
    expect(all.records).toHaveLength(1);
    expect(all.records[0]).toMatchObject({ op: "PutObject", token: lease.token, highestToken: lease.token });
  });
});

describe("refusals before the fencing decision", () => {
  let gw: TestGateway;
  afterEach(async () => {
    await gw?.stop();
  });

  it("records writes to a missing bucket and with oversized metadata", async () => {
    gw = await startTestGateway();
    const s3 = gw.s3();
    const missing = await s3
      .send(new PutObjectCommand({ Bucket: "nobucket", Key: "k", Body: "x" }))
      .catch((e) => e);
    expect(missing.name).toBe("NoSuchBucket");
    const records = (await gw.leases.audit({ bucket: "nobucket" })).records as Array<Record<string, unknown>>;
    expect(records).toHaveLength(1);
    expect(records[0]).toMatchObject({
      op: "PutObject",
      key: "k",
      decision: "rejected",
      reason: "NoSuchBucket",
      principal: "fencegate",
    });
  });
});

describe("lease events and their records", () => {
  it("grants, renews, releases and reports expiry only together with the audit record", async () => {
    const dir = tempDir();
    const db = openEmbeddedDb({ dataDir: dir.path });
    cleanups.push(() => {
      db.close();
      dir.cleanup();
    });
    const clock = fakeClock();
    const log = createEmbeddedAuditLog({ db, gatewayId: "gw-test", clock });
    let failRecording = true;
    const audit = {
      ...log,
      appendInStep: (draft: AuditDraft) => {
        if (failRecording) throw new Error("disk full");
        return log.appendInStep(draft);
      },
    };
    const store = createEmbeddedLeaseStore({ db, clock, events: audit });
    const leases = new LeaseService({
      store,
      audit,
      clock,
      limits: { minTtlMs: 500, maxTtlMs: 60_000, maxWaitMs: 0 },
      fenceObject: async () => {
        throw new Error("no commit intents with a store on the backend's database");
      },
    });
    const caller = { principal: "p", requestId: "r" };
    const acquire = () =>
      leases.acquire({ resource: { bucket: "bkt", key: "k" }, ttlMs: 1_000, waitMs: 0, owner: "o" }, caller);

    await expect(acquire()).rejects.toThrow("disk full");
    expect(await store.list({ bucket: "bkt" })).toEqual([]);
    failRecording = false;
    const lease = await acquire();
    failRecording = true;
    await expect(leases.renew(lease.leaseId, 2_000, caller)).rejects.toThrow("disk full");
    expect((await store.get(lease.leaseId))?.ttlMs).toBe(1_000);
    await expect(leases.release(lease.leaseId, caller)).rejects.toThrow("disk full");
    expect((await store.get(lease.leaseId))?.releasedAt).toBeUndefined();
    clock.advance(5_000);
    await expect(leases.sweepExpired()).rejects.toThrow("disk full");
    failRecording = false;
    expect(await leases.sweepExpired()).toBe(1);
    const records = (await audit.query({ limit: 100 })).records.map((r) => [r.op, r.leaseId]);
    expect(records).toEqual([
      ["LeaseAcquired", lease.leaseId],
      ["LeaseExpired", lease.leaseId],
    ]);
  });
});
