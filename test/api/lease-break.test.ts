/**
 * Breaking a lease (issue 11): an administrator ends a lease whoever holds it and fences what it
 * covered at once, so that the old holder's next write is refused although nobody else has
 * written; a non-administrator cannot break; both are audited. Through a real gateway.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway, tempDir } from "../support/gateway.js";
import { type Credentials, objectPath, signedRequest } from "../support/signed-http.js";
import { apiAs, apiCall } from "./lease-calls.js";

const ROOT: Credentials = { accessKeyId: "root-key", secretAccessKey: "root-secret-key" };
const WRITER: Credentials = { accessKeyId: "writer-key", secretAccessKey: "writer-secret-key" };

let gw: TestGateway;
let cleanup: () => void;
const as = (who: Credentials) => apiAs(gw.url, who);
const breakAs = (who: Credentials, leaseId: string) =>
  apiCall(gw.url, who, "POST", `/leases/${leaseId}/break`);

beforeAll(async () => {
  const dir = tempDir();
  cleanup = dir.cleanup;
  const configFile = join(dir.path, "fencegate.yaml");
  writeFileSync(
    configFile,
    `credentials:
  - accessKeyId: ${WRITER.accessKeyId}
    secretAccessKey: ${WRITER.secretAccessKey}
    allow:
      - { bucket: work, prefix: jobs/, actions: [read, write, lease] }
`,
  );
  gw = await startTestGateway({
    env: {
      FENCEGATE_CONFIG: configFile,
      FENCEGATE_ACCESS_KEY_ID: ROOT.accessKeyId,
      FENCEGATE_SECRET_ACCESS_KEY: ROOT.secretAccessKey,
    },
  });
  expect((await signedRequest(gw.url, { method: "PUT", path: "/work", credentials: ROOT })).status).toBe(200);
});

afterAll(async () => {
  await gw?.stop();
  cleanup?.();
});

function put(key: string, fencingToken: string) {
  return signedRequest(gw.url, {
    method: "PUT",
    path: objectPath("work", key),
    headers: { "x-fence-token": fencingToken },
    body: `written to ${key}`,
    credentials: WRITER,
  });
}

async function auditOf(leaseId: string) {
  return (await as(ROOT).audit({ leaseId, limit: "100" })).body.records as Array<Record<string, unknown>>;
}

describe("POST /_fence/v1/leases/{leaseId}/break", () => {
  it("a non-administrator is refused with 403 AccessDenied, audited, and the lease lives on", async () => {
    const lease = (await as(WRITER).acquire({ bucket: "work", key: "jobs/mine", ttlMs: 30_000 })).body;
    const refused = await breakAs(WRITER, lease.leaseId);
    expect(refused.status).toBe(403);
    expect(refused.body.error.code).toBe("AccessDenied");
    expect(await auditOf(lease.leaseId)).toContainEqual(
      expect.objectContaining({
        op: "LeaseBroken",
        decision: "rejected",
        reason: "AccessDenied",
        principal: WRITER.accessKeyId,
      }),
    );
    expect((await as(WRITER).get(lease.leaseId)).body.state).toBe("active");
    expect((await put("jobs/mine", lease.fencingToken)).status).toBe(200);
  });

  it("on a key lease: the old holder's next write is refused though nobody else wrote, and the HCT was raised", async () => {
    const lease = (await as(WRITER).acquire({ bucket: "work", key: "jobs/k", ttlMs: 30_000 })).body;
    expect((await put("jobs/k", lease.fencingToken)).status).toBe(200);
    const broken = await breakAs(ROOT, lease.leaseId);
    expect(broken.status).toBe(200);
    expect(broken.body).toMatchObject({ leaseId: lease.leaseId, state: "released" });
    expect(broken.body.floorToken).toBeGreaterThan(lease.token);

    const late = await put("jobs/k", lease.fencingToken);
    expect(late.status).toBe(409);
    // The refusal says what happened: broken by an administrator, not "released" (the code is
    // the contract's; only the words changed).
    expect(late.text).toContain("<Code>LeaseExpired</Code>");
    expect(late.text).toMatch(/<Message>[^<]*broken by an administrator[^<]*<\/Message>/);
    expect(late.text).not.toContain("was released");
    expect(Number(late.headers["x-fence-highest-token"])).toBeGreaterThanOrEqual(broken.body.floorToken);
    expect((await as(WRITER).renew(lease.leaseId)).body.error.code).toBe("LeaseLost");
    const records = await auditOf(lease.leaseId);
    expect(records).toContainEqual(
      expect.objectContaining({ op: "LeaseBroken", decision: "accepted", principal: ROOT.accessKeyId }),
    );
    // The object keeps its last acknowledged content.
    const get = await signedRequest(gw.url, {
      method: "GET",
      path: objectPath("work", "jobs/k"),
      credentials: WRITER,
    });
    expect(get.text).toBe("written to jobs/k");
    // A new lease on the key writes again.
    const next = (await as(WRITER).acquire({ bucket: "work", key: "jobs/k", ttlMs: 30_000 })).body;
    expect(next.token).toBeGreaterThan(broken.body.floorToken);
    expect((await put("jobs/k", next.fencingToken)).status).toBe(200);
  });

  it("on a prefix lease: a write under it to a key nobody ever wrote is refused", async () => {
    const lease = (await as(WRITER).acquire({ bucket: "work", prefix: "jobs/batch/", ttlMs: 30_000 })).body;
    expect((await put("jobs/batch/1", lease.fencingToken)).status).toBe(200);
    expect((await breakAs(ROOT, lease.leaseId)).status).toBe(200);
    for (const key of ["jobs/batch/1", "jobs/batch/never-written"]) {
      const late = await put(key, lease.fencingToken);
      expect(late.status, key).toBe(409);
      expect(late.text, key).toContain("<Code>LeaseExpired</Code>");
      expect(late.text, key).toContain("broken by an administrator");
    }
    expect((await breakAs(ROOT, lease.leaseId)).status).toBe(404);
  });
});
