import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Lease, LeaseApiError, LeaseClient } from "../../src/client/lease-client.js";
import type { AuditQuery } from "../../src/client/types.js";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";
import { requireTools, TOOLS } from "../support/tools.js";
import { sleep } from "../support/wait.js";

checkLeaseApiResponses();

const run = promisify(execFile);
let gw: TestGateway;
let api: LeaseClient;

beforeAll(async () => {
  gw = await startTestGateway({
    overrides: { leases: { minTtlMs: 500, maxTtlMs: 3_600_000, maxWaitMs: 60_000 } },
  });
  api = gw.leases;
});

afterAll(async () => {
  await gw?.stop();
});

/** The API's JSON error for a call that must fail. */
async function failure(p: Promise<unknown>): Promise<{ status: number; code: string; body: unknown }> {
  try {
    await p;
  } catch (e) {
    if (e instanceof LeaseApiError) return { status: e.status, code: e.code, body: e.body };
    throw e;
  }
  throw new Error("expected the call to fail");
}

describe("POST /_fence/v1/leases", () => {
  it("grants a key lease with every contract field and a strictly larger token each time", async () => {
    const a = await api.acquire({ bucket: "api", key: "k1", ttlMs: 30_000, owner: "worker-7" });
    expect(a).toMatchObject({ bucket: "api", key: "k1", owner: "worker-7", ttlMs: 30_000 });
    expect(a.leaseId).toEqual(expect.any(String));
    expect(Number.isSafeInteger(a.token)).toBe(true);
    expect(a.fencingToken).toEqual(expect.any(String));
    expect(Date.parse(a.expiresAt) - Date.parse(a.acquiredAt)).toBe(30_000);
    expect(new Date(a.acquiredAt).toISOString()).toBe(a.acquiredAt);
    const b = await api.acquire({ bucket: "api", prefix: "p/", ttlMs: 30_000 });
    expect(b).toMatchObject({ prefix: "p/", owner: CREDENTIALS.accessKeyId });
    expect(b).not.toHaveProperty("key");
    expect(b.token).toBeGreaterThan(a.token);
  });

  it("answers 409 LeaseHeld for overlapping resources, naming the holder but not its token string", async () => {
    const held = await api.acquire({ bucket: "api", prefix: "nest/", ttlMs: 30_000 });
    for (const resource of [{ key: "nest/a" }, { prefix: "nest/deeper/" }, { prefix: "nes" }]) {
      const f = await failure(api.acquire({ bucket: "api", ...resource, ttlMs: 1_000 }));
      expect(f).toMatchObject({ status: 409, code: "LeaseHeld" });
      const heldBy = (f.body as { error: { heldBy: Record<string, unknown> } }).error.heldBy;
      expect(heldBy).toMatchObject({ leaseId: held.leaseId, token: held.token });
      expect(JSON.stringify(f.body)).not.toContain(held.fencingToken);
    }
    // Another bucket and a disjoint prefix are free.
    await api.acquire({ bucket: "api2", prefix: "nest/", ttlMs: 1_000 });
    await api.acquire({ bucket: "api", prefix: "nesting/", ttlMs: 1_000 });
  });

  it("waits up to waitMs for a held resource", async () => {
    const first = await api.acquire({ bucket: "api", key: "wait", ttlMs: 600 });
    const started = Date.now();
    const second = await api.acquire({ bucket: "api", key: "wait", ttlMs: 1_000, waitMs: 5_000 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(400);
    expect(second.token).toBeGreaterThan(first.token);
    const third = await failure(api.acquire({ bucket: "api", key: "wait", ttlMs: 1_000, waitMs: 200 }));
    expect(third).toMatchObject({ status: 409, code: "LeaseHeld" });
  });

  it("wakes a waiting acquire as soon as the holder releases", async () => {
    const holder = await api.acquire({ bucket: "api", key: "wake", ttlMs: 60_000 });
    const waiting = api.acquire({ bucket: "api", key: "wake", ttlMs: 1_000, waitMs: 30_000 });
    await sleep(200);
    const released = Date.now();
    await api.release(holder.leaseId);
    await waiting;
    expect(Date.now() - released).toBeLessThan(2_000);
  });

  it("refuses invalid requests with 400 InvalidRequest", async () => {
    const bad: unknown[] = [
      { key: "k", ttlMs: 1_000 },
      { bucket: "api", ttlMs: 1_000 },
      { bucket: "api", key: "k", prefix: "p", ttlMs: 1_000 },
      { bucket: "api", key: "k" },
      { bucket: "api", key: "k", ttlMs: 499 },
      { bucket: "api", key: "k", ttlMs: 3_600_001 },
      { bucket: "api", key: "k", ttlMs: 1_000.5 },
      { bucket: "api", key: "k", ttlMs: "1000" },
      { bucket: "api", key: "k", ttlMs: 1_000, waitMs: 60_001 },
      { bucket: "api", key: "k", ttlMs: 1_000, waitMs: -1 },
      { bucket: "api", key: "", ttlMs: 1_000 },
      { bucket: "api", key: "k", ttlMs: 1_000, owner: 7 },
      [1, 2],
      "not an object",
    ];
    for (const body of bad) {
      expect(await failure(api.call("POST", "/_fence/v1/leases", body))).toMatchObject({
        status: 400,
        code: "InvalidRequest",
      });
    }
  });

  it("refuses a body over 64 KiB with 400 InvalidRequest and keeps serving", async () => {
    const huge = { bucket: "api", key: "big", ttlMs: 1_000, owner: "x".repeat(70 * 1024) };
    const refused = await failure(api.call("POST", "/_fence/v1/leases", huge));
    expect(refused).toMatchObject({ status: 400, code: "InvalidRequest" });
    expect(JSON.stringify(refused.body)).toContain("exceeds");
    const lease = await api.acquire({ bucket: "api", key: "big", ttlMs: 1_000 });
    await api.release(lease.leaseId);
  });
});

describe("GET, renew and DELETE /_fence/v1/leases/{leaseId}", () => {
  let lease: Lease;
  beforeAll(async () => {
    lease = await api.acquire({ bucket: "api", key: "life", ttlMs: 800 });
  });

  it("shows, renews (keeping the token) and lists the lease", async () => {
    expect(await api.show(lease.leaseId)).toMatchObject({ leaseId: lease.leaseId, token: lease.token });
    const renewed = await api.renew(lease.leaseId, 5_000);
    expect(renewed.token).toBe(lease.token);
    expect(renewed.fencingToken).toBe(lease.fencingToken);
    expect(renewed.ttlMs).toBe(5_000);
    expect(Date.parse(renewed.expiresAt)).toBeGreaterThan(Date.parse(lease.expiresAt));
    const keep = await api.renew(lease.leaseId);
    expect(keep.ttlMs).toBe(5_000);
    const { leases } = await api.list({ bucket: "api", prefix: "li" });
    expect(leases.map((l) => l.leaseId)).toEqual([lease.leaseId]);
    expect(await failure(api.renew(lease.leaseId, 10))).toMatchObject({
      status: 400,
      code: "InvalidRequest",
    });
  });

  it("releases with 204, then answers 404 LeaseNotFound and 409 LeaseLost", async () => {
    await api.release(lease.leaseId);
    expect(await failure(api.release(lease.leaseId))).toMatchObject({ status: 404, code: "LeaseNotFound" });
    expect(await failure(api.show(lease.leaseId))).toMatchObject({ status: 404, code: "LeaseNotFound" });
    expect(await failure(api.renew(lease.leaseId))).toMatchObject({ status: 409, code: "LeaseLost" });
    expect((await api.list({ bucket: "api", prefix: "life" })).leases).toEqual([]);
  });

  it("answers LeaseLost for an expired lease even when nobody took it", async () => {
    const short = await api.acquire({ bucket: "api", key: "short", ttlMs: 500 });
    await sleep(700);
    expect(await failure(api.renew(short.leaseId))).toMatchObject({ status: 409, code: "LeaseLost" });
    expect((await api.show(short.leaseId)).state).toBe("expired");
  });

  it("answers 404 for unknown leases", async () => {
    for (const id of ["nope", "x".repeat(200), "%00"]) {
      expect(await failure(api.show(id))).toMatchObject({ status: 404 });
      expect(await failure(api.release(id))).toMatchObject({ status: 404, code: "LeaseNotFound" });
    }
    expect(await failure(api.renew("nope"))).toMatchObject({ status: 404, code: "LeaseNotFound" });
  });
});

describe("GET /_fence/v1/audit", () => {
  it("filters, pages with a cursor in commit order, and validates its parameters", async () => {
    const l = await api.acquire({ bucket: "audited", key: "x", ttlMs: 1_000 });
    await api.renew(l.leaseId);
    await api.release(l.leaseId);
    const all = await api.audit({ bucket: "audited" });
    expect((all.records as Array<{ op: string }>).map((r) => r.op)).toEqual([
      "LeaseAcquired",
      "LeaseRenewed",
      "LeaseReleased",
    ]);
    const page1 = await api.audit({ bucket: "audited", limit: "2" });
    expect(page1.records).toHaveLength(2);
    expect(page1.nextCursor).toEqual(expect.any(String));
    const page2 = await api.audit({ bucket: "audited", limit: "2", cursor: page1.nextCursor! });
    expect(page2.records).toHaveLength(1);
    expect(page2.nextCursor).toBeNull();
    const seqs = [...page1.records, ...page2.records].map((r) => (r as { seq: number }).seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect((await api.audit({ leaseId: l.leaseId, op: "LeaseRenewed" })).records).toHaveLength(1);
    expect((await api.audit({ bucket: "audited", decision: "rejected" })).records).toHaveLength(0);
    expect((await api.audit({ bucket: "audited", since: "2999-01-01T00:00:00Z" })).records).toHaveLength(0);
    for (const q of [
      { limit: "0" },
      { limit: "1001" },
      { limit: "x" },
      { decision: "maybe" },
      { since: "yesterday" },
      { cursor: "garbage" },
    ]) {
      // Values the client's types refuse, sent anyway: the API refuses them too.
      expect(await failure(api.audit(q as AuditQuery))).toMatchObject({ status: 400 });
    }
  });
});

describe("authentication and health", () => {
  it("serves health without authentication", async () => {
    const res = await fetch(`${gw.url}/_fence/v1/health`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: "ok" });
  });

  it("refuses unsigned and wrongly signed calls with a JSON error", async () => {
    const unsigned = await fetch(`${gw.url}/_fence/v1/leases`);
    expect(unsigned.status).toBe(403);
    expect(await unsigned.json()).toMatchObject({ error: { code: "AccessDenied" } });
    const wrong = new LeaseClient({
      endpoint: gw.url,
      accessKeyId: "fencegate",
      secretAccessKey: "wrong-secret",
    });
    expect(await failure(wrong.list())).toMatchObject({ status: 403, code: "SignatureDoesNotMatch" });
  });

  it("answers unknown API paths with a JSON 404", async () => {
    expect(await failure(api.call("GET", "/_fence/v1/nothing-here"))).toMatchObject({ status: 404 });
  });
});

describe("the lease API with curl", () => {
  requireTools("curl");

  it("works with curl --aws-sigv4, as docs/lease-api.md shows", async () => {
    const { stdout } = await run(TOOLS.curl.path, [
      "-s",
      "--aws-sigv4",
      "aws:amz:us-east-1:s3",
      "--user",
      `${CREDENTIALS.accessKeyId}:${CREDENTIALS.secretAccessKey}`,
      "-H",
      "content-type: application/json",
      "-d",
      JSON.stringify({ bucket: "curl", key: "report.csv", ttlMs: 30_000, owner: "worker-7" }),
      `${gw.url}/_fence/v1/leases`,
    ]);
    expect(JSON.parse(stdout)).toMatchObject({ bucket: "curl", key: "report.csv", owner: "worker-7" });
    const listed = await run(TOOLS.curl.path, [
      "-s",
      "--aws-sigv4",
      "aws:amz:us-east-1:s3",
      "--user",
      `${CREDENTIALS.accessKeyId}:${CREDENTIALS.secretAccessKey}`,
      `${gw.url}/_fence/v1/leases?bucket=curl`,
    ]);
    expect(JSON.parse(listed.stdout).leases).toHaveLength(1);
  });
});
