/**
 * GET /_fence/v1/metrics after a scripted run on a real gateway: grants, an accepted write, a
 * break and the stale write it causes, a write without a token, a wait that is granted, a wait
 * that runs out, a renewal, a release and an expiry. Every counter is checked by value, and the
 * exposition parses with a strict Prometheus text parser. No token, key or secret shows in it.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { apiAs, apiCall } from "../api/lease-calls.js";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";
import { type Family, parsePrometheusText, sampleValue, sumOf } from "../support/prom-text.js";
import { objectPath, signedRequest } from "../support/signed-http.js";
import { waitFor } from "../support/wait.js";

checkLeaseApiResponses();

let gw: TestGateway;
let other: TestGateway;
const api = () => apiAs(gw.url, CREDENTIALS);

async function scrape(url = gw.url): Promise<{ text: string; families: Map<string, Family> }> {
  const res = await fetch(`${url}/_fence/v1/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
  const text = await res.text();
  return { text, families: parsePrometheusText(text) };
}

const put = (key: string, token?: string) =>
  signedRequest(gw.url, {
    method: "PUT",
    path: objectPath("metrics", key),
    headers: token ? { "x-fence-token": token } : {},
    body: `body of ${key}`,
    credentials: CREDENTIALS,
  });

/** Secrets and live tokens the run used: none may appear anywhere in the exposition. */
const secrets: string[] = [];
/** The code a write with the broken lease's token was refused with. */
let breakRefusal = "";

beforeAll(async () => {
  [gw, other] = await Promise.all([startTestGateway(), startTestGateway()]);
  secrets.push(CREDENTIALS.secretAccessKey);
  expect(
    (await signedRequest(gw.url, { method: "PUT", path: "/metrics", credentials: CREDENTIALS })).status,
  ).toBe(200);

  // Grant 1, an accepted write, the break, and the stale write it causes.
  const first = (await api().acquire({ bucket: "metrics", key: "a", ttlMs: 60_000, owner: "job-1" })).body;
  secrets.push(first.fencingToken);
  expect((await put("a", first.fencingToken)).status).toBe(200);
  expect((await apiCall(gw.url, CREDENTIALS, "POST", `/leases/${first.leaseId}/break`)).status).toBe(200);
  const afterBreak = await put("a", first.fencingToken);
  expect(afterBreak.status).toBe(409);
  breakRefusal = /<Code>(\w+)<\/Code>/.exec(afterBreak.text)![1]!;
  // Grant 2 supersedes the broken lease: its old token is now stale.
  const next = (await api().acquire({ bucket: "metrics", key: "a", ttlMs: 60_000 })).body;
  secrets.push(next.fencingToken);
  const stale = await put("a", first.fencingToken);
  expect(stale.status).toBe(409);
  expect(stale.text).toContain("<Code>StaleFencingToken</Code>");
  // A write without a token (the default policy requires one).
  const bare = await put("a");
  expect(bare.status).toBe(428);

  // Grant 3 holds b; a request that will not wait is refused; grant 4 waits until it is released.
  const holder = (await api().acquire({ bucket: "metrics", key: "b", ttlMs: 60_000 })).body;
  secrets.push(holder.fencingToken);
  expect((await api().acquire({ bucket: "metrics", key: "b", ttlMs: 60_000 })).status).toBe(409);
  const waiting = api().acquire({ bucket: "metrics", key: "b", ttlMs: 60_000, waitMs: 30_000 });
  await waitFor(async () => sampleValue((await scrape()).families, "fencegate_lease_waiters") === 1, {
    what: "the waiter to be counted",
  });
  expect((await api().release(holder.leaseId)).status).toBe(204);
  const waited = (await waiting).body;
  expect(waited.token).toBeGreaterThan(holder.token);
  secrets.push(waited.fencingToken);
  expect((await api().renew(waited.leaseId)).status).toBe(200);
  // A wait that runs out while b is still held.
  expect((await api().acquire({ bucket: "metrics", key: "b", ttlMs: 60_000, waitMs: 300 })).status).toBe(409);

  // Grant 5 ends by expiry (the sweep finds it).
  const short = (await api().acquire({ bucket: "metrics", key: "c", ttlMs: 500 })).body;
  secrets.push(short.fencingToken);
  await waitFor(async () => sampleValue((await scrape()).families, "fencegate_lease_expiries_total") === 1, {
    what: "the expiry to be counted",
    timeoutMs: 20_000,
  });
}, 60_000);

afterAll(async () => {
  await Promise.all([gw?.stop(), other?.stop()]);
});

describe("GET /_fence/v1/metrics after a scripted run", () => {
  it("counts lease events by value: grants, renewals, releases, expiries, breaks, waits and refusals", async () => {
    const { families } = await scrape();
    expect(sampleValue(families, "fencegate_lease_grants_total")).toBe(5);
    expect(sampleValue(families, "fencegate_lease_renewals_total")).toBe(1);
    expect(sampleValue(families, "fencegate_lease_releases_total")).toBe(1);
    expect(sampleValue(families, "fencegate_lease_expiries_total")).toBe(1);
    expect(sampleValue(families, "fencegate_lease_breaks_total")).toBe(1);
    expect(sampleValue(families, "fencegate_lease_waits_total", { outcome: "granted" })).toBe(1);
    expect(sampleValue(families, "fencegate_lease_waits_total", { outcome: "timeout" })).toBe(1);
    expect(sampleValue(families, "fencegate_lease_wait_duration_seconds_count", { outcome: "granted" })).toBe(
      1,
    );
    expect(sampleValue(families, "fencegate_lease_wait_duration_seconds_count", { outcome: "timeout" })).toBe(
      1,
    );
    // The timed-out wait lasted its waitMs at least.
    expect(
      sampleValue(families, "fencegate_lease_wait_duration_seconds_sum", { outcome: "timeout" }),
    ).toBeGreaterThanOrEqual(0.29);
    // One refused at once (waitMs 0), one after its wait.
    expect(
      sampleValue(families, "fencegate_lease_refusals_total", {
        event: "LeaseAcquired",
        reason: "LeaseHeld",
      }),
    ).toBe(2);
    // Grant 2 on a and the waiter's grant on b are active; nothing is waiting any more.
    expect(sampleValue(families, "fencegate_leases_active")).toBe(2);
    expect(sampleValue(families, "fencegate_lease_waiters")).toBe(0);
  });

  it("counts fencing decisions by operation and reason", async () => {
    const { families } = await scrape();
    const decision = (decision: string, reason: string) =>
      sampleValue(families, "fencegate_fencing_decisions_total", {
        operation: "PutObject",
        decision,
        reason,
      });
    expect(decision("accepted", "accepted")).toBe(1);
    expect(decision("rejected", "StaleFencingToken")).toBe(1);
    expect(decision("rejected", "FencingTokenRequired")).toBe(1);
    // The write with the broken lease's token, refused before anyone else took the key.
    expect(["LeaseExpired", "StaleFencingToken"]).toContain(breakRefusal);
    expect(
      sumOf(families, "fencegate_fencing_decisions_total", { operation: "PutObject", reason: breakRefusal }),
    ).toBe(breakRefusal === "StaleFencingToken" ? 2 : 1);
    expect(sumOf(families, "fencegate_fencing_decisions_total")).toBe(4);
  });

  it("counts requests by operation and status, with latency histograms", async () => {
    const { families } = await scrape();
    const requests = (operation: string, status: string) =>
      sampleValue(families, "fencegate_http_requests_total", { operation, status });
    expect(requests("PutObject", "200")).toBe(1);
    expect(requests("PutObject", "409")).toBe(2);
    expect(requests("PutObject", "428")).toBe(1);
    expect(requests("CreateBucket", "200")).toBe(1);
    expect(requests("acquireLease", "201")).toBe(5);
    expect(requests("acquireLease", "409")).toBe(2);
    expect(requests("breakLease", "200")).toBe(1);
    expect(requests("renewLease", "200")).toBe(1);
    expect(requests("releaseLease", "204")).toBe(1);
    expect(
      sampleValue(families, "fencegate_http_request_duration_seconds_count", {
        operation: "PutObject",
        status_class: "4xx",
      }),
    ).toBe(3);
    // Scrapes are requests too, named by their route, never by a raw path.
    expect(
      sampleValue(families, "fencegate_http_requests_total", { operation: "metrics", status: "200" }),
    ).toBeGreaterThan(0);
    const operations = new Set(
      families.get("fencegate_http_requests_total")!.samples.map((s) => s.labels.operation),
    );
    for (const op of operations) expect(op).toMatch(/^[A-Za-z_.]+$/);
  });

  it("reports the embedded store's group commits, audit appends, build and process metrics", async () => {
    const { families } = await scrape();
    expect(sampleValue(families, "fencegate_group_commit_batch_size_count")).toBeGreaterThan(0);
    expect(
      sampleValue(families, "fencegate_audit_append_duration_seconds_count", {
        log: "embedded",
        outcome: "ok",
      }),
    ).toBeGreaterThan(0);
    expect(sampleValue(families, "fencegate_build_info", { gateway: gw.gatewayId })).toBe(1);
    expect(sampleValue(families, "fencegate_lease_last_token")).toBeGreaterThan(0);
    // Redis and archive gauges exist only where they mean something.
    expect(families.has("fencegate_redis_connected")).toBe(false);
    expect(families.has("fencegate_redis_token_epoch")).toBe(false);
    expect(families.has("fencegate_audit_archive_lag_records")).toBe(false);
    expect(families.get("process_cpu_user_seconds_total")?.type).toBe("counter");
    expect(families.get("nodejs_eventloop_lag_seconds")?.type).toBe("gauge");
    // Every fencegate family follows the naming conventions.
    for (const family of families.values()) {
      if (!family.name.startsWith("fencegate_")) continue;
      expect(family.help, family.name).toBeTruthy();
      if (family.type === "counter") expect(family.name).toMatch(/_total$/);
      expect(family.name).not.toMatch(/_(ms|milliseconds)(_|$)/);
    }
  });

  it("names no secret, fencing token or lease id anywhere", async () => {
    const { text } = await scrape();
    expect(secrets.length).toBeGreaterThan(4);
    for (const secret of secrets) expect(text).not.toContain(secret);
    expect(text).not.toMatch(/fencegate-secret|x-fence-token/);
  });

  it("keeps each gateway's metrics to itself in one process", async () => {
    const { families } = await scrape(other.url);
    expect(sampleValue(families, "fencegate_lease_grants_total")).toBe(0);
    expect(sampleValue(families, "fencegate_build_info", { gateway: other.gatewayId })).toBe(1);
    expect(sampleValue(families, "fencegate_build_info", { gateway: gw.gatewayId })).toBeUndefined();
  });

  it("is read with GET only: any other method gets the lease API's JSON error", async () => {
    const post = await fetch(`${gw.url}/_fence/v1/metrics`, { method: "POST" });
    expect(post.status).toBeGreaterThanOrEqual(400);
    expect(post.headers.get("content-type")).toMatch(/^application\/json/);
    expect(((await post.json()) as { error: { code: string } }).error.code).toBeTypeOf("string");
  });
});
