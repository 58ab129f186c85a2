/**
 * Principals may not touch each other's leases (issue 10): on one gateway, the root credential
 * (an administrator), a writer limited to `shared/team-a/`, a second writer with the same rights,
 * and a reader. A lease's fencing token is shown only to the key that acquired it and to
 * administrators; only they renew or release it; a LeaseHeld answer names another key's lease
 * without its id; every refusal is audited.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway, tempDir } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";
import { type Credentials, objectPath, signedRequest } from "../support/signed-http.js";
import { type ApiAnswer, apiAs } from "./lease-calls.js";

checkLeaseApiResponses();

const ROOT: Credentials = { accessKeyId: "root-key", secretAccessKey: "root-secret-key" };
const WRITER: Credentials = { accessKeyId: "writer-key", secretAccessKey: "writer-secret-key" };
const WRITER2: Credentials = { accessKeyId: "writer2-key", secretAccessKey: "writer2-secret-key" };
const READER: Credentials = { accessKeyId: "reader-key", secretAccessKey: "reader-secret-key" };

const CONFIG_YAML = `
credentials:
  - accessKeyId: ${WRITER.accessKeyId}
    secretAccessKey: ${WRITER.secretAccessKey}
    allow:
      - { bucket: shared, prefix: team-a/, actions: [read, write, lease] }
  - accessKeyId: ${WRITER2.accessKeyId}
    secretAccessKey: ${WRITER2.secretAccessKey}
    allow:
      - { bucket: shared, prefix: team-a/, actions: [read, write, lease] }
  - accessKeyId: ${READER.accessKeyId}
    secretAccessKey: ${READER.secretAccessKey}
    allow:
      - { bucket: shared, actions: [read] }
`;

let gw: TestGateway;
let cleanup: () => void;
const as = (who: Credentials) => apiAs(gw.url, who);

beforeAll(async () => {
  const dir = tempDir();
  cleanup = dir.cleanup;
  const configFile = join(dir.path, "fencegate.yaml");
  writeFileSync(configFile, CONFIG_YAML);
  gw = await startTestGateway({
    env: {
      FENCEGATE_CONFIG: configFile,
      FENCEGATE_ACCESS_KEY_ID: ROOT.accessKeyId,
      FENCEGATE_SECRET_ACCESS_KEY: ROOT.secretAccessKey,
    },
  });
  expect((await signedRequest(gw.url, { method: "PUT", path: "/shared", credentials: ROOT })).status).toBe(
    200,
  );
});

afterAll(async () => {
  await gw?.stop();
  cleanup?.();
});

/** 403 AccessDenied as JSON, and the refusal in the audit log with the caller's access key. */
async function expectDenied(res: ApiAnswer, op: string, who: Credentials): Promise<void> {
  expect(res.status).toBe(403);
  expect(res.body.error.code).toBe("AccessDenied");
  // A sentence that says why: "Access Denied: lease … belongs to another access key", "Access
  // Denied: this access key may not lease …".
  expect(res.body.error.message).toMatch(/^Access Denied: (this access key |lease \S+ belongs to)/);
  const records = (await as(ROOT).audit({ op, decision: "rejected", limit: "1000" })).body.records as Array<
    Record<string, unknown>
  >;
  const record = records.find((r) => r.requestId === res.requestId);
  expect(record, `no audit record of the refused ${op}`).toMatchObject({
    op,
    decision: "rejected",
    reason: "AccessDenied",
    principal: who.accessKeyId,
  });
}

async function writerLease(key: string) {
  const res = await as(WRITER).acquire({ bucket: "shared", key, ttlMs: 30_000 });
  expect(res.status).toBe(201);
  expect(res.body.fencingToken).toEqual(expect.any(String));
  return res.body as { leaseId: string; fencingToken: string; token: number };
}

describe("token visibility", () => {
  it("the writer sees its token; the other writer and the reader see the lease without it; root sees it", async () => {
    const lease = await writerLease("team-a/visible");
    for (const who of [WRITER2, READER]) {
      const shown = await as(who).get(lease.leaseId);
      expect(shown.status).toBe(200);
      expect(shown.body).toMatchObject({ leaseId: lease.leaseId, token: lease.token, state: "active" });
      expect(shown.body).not.toHaveProperty("fencingToken");
      const listed = await as(who).list({ bucket: "shared", prefix: "team-a/visible" });
      expect(listed.body.leases).toHaveLength(1);
      expect(listed.body.leases[0]).not.toHaveProperty("fencingToken");
      expect(JSON.stringify(listed.body)).not.toContain(lease.fencingToken);
    }
    expect((await as(WRITER).get(lease.leaseId)).body.fencingToken).toBe(lease.fencingToken);
    expect((await as(ROOT).get(lease.leaseId)).body.fencingToken).toBe(lease.fencingToken);
    const mine = await as(WRITER).list({ bucket: "shared", prefix: "team-a/visible" });
    expect(mine.body.leases[0].fencingToken).toBe(lease.fencingToken);
  });

  it("a LeaseHeld answer does not give another key the holder's lease id", async () => {
    const lease = await writerLease("team-a/held");
    const other = await as(WRITER2).acquire({ bucket: "shared", key: "team-a/held", ttlMs: 1_000 });
    expect(other.status).toBe(409);
    expect(other.body.error.code).toBe("LeaseHeld");
    expect(other.body.error.heldBy).not.toHaveProperty("leaseId");
    expect(JSON.stringify(other.body)).not.toContain(lease.leaseId);
    expect(JSON.stringify(other.body)).not.toContain(lease.fencingToken);
    // The holder itself, and an administrator, are told which lease it is.
    const again = await as(WRITER).acquire({ bucket: "shared", key: "team-a/held", ttlMs: 1_000 });
    expect(again.body.error.heldBy.leaseId).toBe(lease.leaseId);
    const admin = await as(ROOT).acquire({ bucket: "shared", key: "team-a/held", ttlMs: 1_000 });
    expect(admin.body.error.heldBy.leaseId).toBe(lease.leaseId);
  });
});

describe("renew and release by others", () => {
  it("are refused with 403 AccessDenied for the other writer and the reader, audited, and change nothing", async () => {
    const lease = await writerLease("team-a/mine");
    for (const who of [WRITER2, READER]) {
      await expectDenied(await as(who).renew(lease.leaseId, { ttlMs: 60_000 }), "LeaseRenewed", who);
      await expectDenied(await as(who).release(lease.leaseId), "LeaseReleased", who);
    }
    const still = await as(WRITER).get(lease.leaseId);
    expect(still.body).toMatchObject({ state: "active", ttlMs: 30_000 });
    // The writer's own write goes through with its token.
    const put = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath("shared", "team-a/mine"),
      headers: { "x-fence-token": lease.fencingToken },
      body: "mine",
      credentials: WRITER,
    });
    expect(put.status).toBe(200);
    expect((await as(WRITER).renew(lease.leaseId)).status).toBe(200);
    expect((await as(WRITER).release(lease.leaseId)).status).toBe(204);
  });

  it("root, an administrator, renews and releases the writer's lease", async () => {
    const lease = await writerLease("team-a/admin");
    const renewed = await as(ROOT).renew(lease.leaseId, { ttlMs: 60_000 });
    expect(renewed.status).toBe(200);
    expect(renewed.body.ttlMs).toBe(60_000);
    expect((await as(ROOT).release(lease.leaseId)).status).toBe(204);
    expect((await as(WRITER).renew(lease.leaseId)).body.error.code).toBe("LeaseLost");
  });
});

describe("acquiring outside one's rights", () => {
  it("is AccessDenied for the reader, and for the writer beside its prefix, and audited", async () => {
    await expectDenied(
      await as(READER).acquire({ bucket: "shared", key: "team-a/x", ttlMs: 1_000 }),
      "LeaseAcquired",
      READER,
    );
    await expectDenied(
      await as(WRITER).acquire({ bucket: "shared", key: "team-b/x", ttlMs: 1_000 }),
      "LeaseAcquired",
      WRITER,
    );
    // A prefix wider than its rule covers keys it may not lease.
    await expectDenied(
      await as(WRITER).acquire({ bucket: "shared", prefix: "team", ttlMs: 1_000 }),
      "LeaseAcquired",
      WRITER,
    );
    expect((await as(WRITER).acquire({ bucket: "shared", prefix: "team-a/sub/", ttlMs: 1_000 })).status).toBe(
      201,
    );
  });
});
