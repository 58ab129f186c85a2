/**
 * Lease API holes found by adversarial testing (issue 10), through a real gateway: ill-formed and
 * S3-invalid names never reach the store, a clock stepped back revives no ended lease, and
 * expiries are recorded in order.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";
import { objectPath, signedRequest } from "../support/signed-http.js";
import { apiAs } from "./lease-calls.js";

checkLeaseApiResponses();

let gw: TestGateway;
/** The gateway's wall clock: real time plus a step the tests move. */
let step = 0;
const api = () => apiAs(gw.url, CREDENTIALS);
const BUCKET = "hardening";

beforeAll(async () => {
  gw = await startTestGateway({
    clock: () => Date.now() + step,
    overrides: { leases: { minTtlMs: 500, maxTtlMs: 3_600_000, maxWaitMs: 60_000 } },
  });
  expect((await signedRequest(gw.url, { method: "PUT", path: `/${BUCKET}` })).status).toBe(200);
});

afterAll(async () => {
  await gw?.stop();
});

function put(key: string, fencingToken: string, body = "data") {
  return signedRequest(gw.url, {
    method: "PUT",
    path: objectPath(BUCKET, key),
    headers: { "x-fence-token": fencingToken },
    body,
  });
}

describe("names the S3 endpoint would refuse are refused by the lease API", () => {
  it("a prefix ending in a lone surrogate is InvalidRequest, and the key it would have covered is free", async () => {
    const refused = await api().acquire({ bucket: BUCKET, prefix: "a\uD800", ttlMs: 30_000 });
    expect(refused.status).toBe(400);
    expect(refused.body.error.code).toBe("InvalidRequest");
    expect(refused.body.error.message).toMatch(/UTF-8|Unicode/);
    const key = await api().acquire({ bucket: BUCKET, key: "a\u{10000}", ttlMs: 30_000 });
    expect(key.status).toBe(201);
    // A valid prefix over it is held off: one grant only.
    expect((await api().acquire({ bucket: BUCKET, prefix: "a", ttlMs: 30_000 })).status).toBe(409);
    expect((await api().acquire({ bucket: BUCKET, prefix: "a\uD800", ttlMs: 30_000 })).status).toBe(400);
    const listed = await api().list({ bucket: BUCKET, prefix: "a" });
    expect(listed.body.leases.map((l: { leaseId: string }) => l.leaseId)).toEqual([key.body.leaseId]);
    expect((await api().release(key.body.leaseId)).status).toBe(204);
  });

  it.each([
    ["a key with a lone surrogate", { key: "x\uDC00" }],
    ["a key with a NUL", { key: "x\u0000y" }],
    ["a key with a dot segment", { key: "../x" }],
    ["a key like a path out of the root", { key: "../../etc/passwd" }],
    ["a key with a leading slash", { key: "/x" }],
    ["a prefix with a dot segment", { prefix: "a/../" }],
    ["a prefix with a NUL", { prefix: "a\u0000" }],
    ["a bucket name S3 refuses", { bucket: "BadBucket", key: "k" }],
    ["a bucket with a lone surrogate", { bucket: "ab\uD800", key: "k" }],
    ["an owner with a lone surrogate", { key: "k", owner: "w\uD800" }],
    ["an owner with a control character", { key: "k", owner: "w\u0007" }],
  ])("refuses %s with 400 InvalidRequest", async (_what, fields) => {
    const res = await api().acquire({ bucket: BUCKET, ttlMs: 30_000, ...fields });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe("InvalidRequest");
  });

  it("accepts prefixes whose last segment may still grow into a valid key", async () => {
    for (const prefix of ["", "a/.", "a/..", "dir/"]) {
      const res = await api().acquire({ bucket: "other-bucket", prefix, ttlMs: 30_000 });
      expect(res.status, prefix).toBe(201);
      expect((await api().release(res.body.leaseId)).status).toBe(204);
    }
  });
});

describe("a clock stepped back revives no ended lease", () => {
  it("after A expired and B acquired, a step back lets neither A's write nor A's renewal through", async () => {
    const a = await api().acquire({ bucket: BUCKET, key: "clock/k", ttlMs: 1_000 });
    expect(a.status).toBe(201);
    expect((await put("clock/k", a.body.fencingToken, "from A")).status).toBe(200);
    step += 1_500; // A has expired
    const b = await api().acquire({ bucket: BUCKET, key: "clock/k", ttlMs: 60_000 });
    expect(b.status).toBe(201);
    step -= 1_800; // the wall clock steps back to before A's expiry

    const write = await put("clock/k", a.body.fencingToken, "late write from A");
    expect(write.status).toBe(409);
    expect(write.text).toMatch(/StaleFencingToken/);
    const renew = await api().renew(a.body.leaseId);
    expect(renew.status).toBe(409);
    expect(renew.body.error.code).toBe("LeaseLost");
    expect((await api().get(a.body.leaseId)).body.state).toBe("expired");
    const active = (await api().list({ bucket: BUCKET, prefix: "clock/" })).body.leases;
    expect(active.map((l: { leaseId: string }) => l.leaseId)).toEqual([b.body.leaseId]);
    expect((await put("clock/k", b.body.fencingToken, "from B")).status).toBe(200);
    step = 0;
  });
});

describe("expiry recorded in order", () => {
  it("A's LeaseExpired comes before B's LeaseAcquired", async () => {
    const a = await api().acquire({ bucket: BUCKET, key: "order/k", ttlMs: 1_000 });
    step += 1_200;
    const b = await api().acquire({ bucket: BUCKET, key: "order/k", ttlMs: 30_000 });
    expect(b.status).toBe(201);
    step = 0;
    const records = (await api().audit({ bucket: BUCKET, key: "order/k", limit: "100" })).body
      .records as Array<Record<string, unknown>>;
    const expired = records.filter((r) => r.op === "LeaseExpired" && r.leaseId === a.body.leaseId);
    const acquired = records.find((r) => r.op === "LeaseAcquired" && r.leaseId === b.body.leaseId);
    expect(expired).toHaveLength(1);
    expect(Number(expired[0]!.seq)).toBeLessThan(Number(acquired!.seq));
  });

  it("a lease released after it expired is recorded as expired, once, and never as released", async () => {
    const a = await api().acquire({ bucket: BUCKET, key: "late-release/k", ttlMs: 1_000 });
    step += 1_100; // expired; the sweep (every second) may or may not have seen it yet
    expect((await api().release(a.body.leaseId)).status).toBe(204);
    expect((await api().release(a.body.leaseId)).status).toBe(204);
    step = 0;
    const records = (await api().audit({ leaseId: a.body.leaseId, limit: "100" })).body.records as Array<
      Record<string, unknown>
    >;
    expect(records.map((r) => r.op)).toEqual(["LeaseAcquired", "LeaseExpired"]);
    expect((await api().get(a.body.leaseId)).body.state).toBe("expired");
  });
});
