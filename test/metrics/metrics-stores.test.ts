/**
 * The store-side metrics on real stores: calls to an S3 backend (here another gateway, a real
 * S3 endpoint) by operation and outcome with their latency; the dependency gauges readiness
 * sets; Redis connectivity, the token epoch, and the audit archive's lag on a Redis audit log.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { apiAs } from "../api/lease-calls.js";
import { type AzuriteServer, startAzurite } from "../support/azurite.js";
import { type HttpFaultProxy, startHttpFaultProxy } from "../support/fault-proxy.js";
import { CREDENTIALS, startTestGateway, type TestGateway, tempDir } from "../support/gateway.js";
import { type Family, parsePrometheusText, sampleValue, sumOf } from "../support/prom-text.js";
import { type RedisServer, startRedis } from "../support/redis.js";
import { objectPath, signedRequest } from "../support/signed-http.js";
import { requireTools } from "../support/tools.js";
import { waitFor } from "../support/wait.js";

requireTools("redis-server");

async function scrape(url: string): Promise<Map<string, Family>> {
  const res = await fetch(`${url}/_fence/v1/metrics`);
  expect(res.status).toBe(200);
  return parsePrometheusText(await res.text());
}

describe("a gateway on the S3 backend", () => {
  let store: TestGateway;
  let gw: TestGateway;
  beforeAll(async () => {
    store = await startTestGateway({ env: { FENCEGATE_FENCING: "optional" } });
    gw = await startTestGateway({
      overrides: {
        backend: {
          type: "s3",
          endpoint: store.url,
          region: "us-east-1",
          accessKeyId: CREDENTIALS.accessKeyId,
          secretAccessKey: CREDENTIALS.secretAccessKey,
          forcePathStyle: true,
        },
      },
    });
  }, 30_000);
  afterAll(async () => {
    await gw?.stop();
    await store?.stop();
  });

  it("counts its store calls by operation and outcome, with latency, and the dependency gauges", async () => {
    expect(
      (await signedRequest(gw.url, { method: "PUT", path: "/data", credentials: CREDENTIALS })).status,
    ).toBe(200);
    const lease = (await apiAs(gw.url, CREDENTIALS).acquire({ bucket: "data", key: "k", ttlMs: 30_000 }))
      .body;
    const put = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath("data", "k"),
      headers: { "x-fence-token": lease.fencingToken },
      body: "stored through S3",
      credentials: CREDENTIALS,
    });
    expect(put.status).toBe(200);
    const missing = await signedRequest(gw.url, {
      method: "GET",
      path: objectPath("data", "none"),
      credentials: CREDENTIALS,
    });
    expect(missing.status).toBe(404);
    expect((await fetch(`${gw.url}/_fence/v1/health/ready`)).status).toBe(200);

    const families = await scrape(gw.url);
    const calls = families.get("fencegate_store_calls_total")!;
    expect(calls.type).toBe("counter");
    expect(calls.samples.every((s) => s.labels.backend === "s3")).toBe(true);
    // Every PUT of the write went out and was answered.
    expect(
      sumOf(families, "fencegate_store_calls_total", { operation: "PutObject", outcome: "ok" }),
    ).toBeGreaterThan(0);
    // The missing object was asked for and not found (a HEAD or GET, as the backend reads state).
    expect(sumOf(families, "fencegate_store_calls_total", { outcome: "not_found" })).toBeGreaterThan(0);
    // The latency histogram counts exactly the calls counted.
    for (const op of new Set(calls.samples.map((s) => s.labels.operation!))) {
      expect(
        sampleValue(families, "fencegate_store_call_duration_seconds_count", {
          backend: "s3",
          operation: op,
        }),
        op,
      ).toBe(sumOf(families, "fencegate_store_calls_total", { backend: "s3", operation: op }));
    }
    // The readiness check that ran set the dependency gauges.
    expect(sampleValue(families, "fencegate_dependency_up", { dependency: "backend", kind: "s3" })).toBe(1);
    expect(
      sampleValue(families, "fencegate_dependency_up", { dependency: "leaseStore", kind: "embedded" }),
    ).toBe(1);
    expect(
      sampleValue(families, "fencegate_dependency_up", { dependency: "auditLog", kind: "embedded" }),
    ).toBe(1);
    // The store's credentials, endpoint and the object's key are in no label.
    const text = await (await fetch(`${gw.url}/_fence/v1/metrics`)).text();
    expect(text).not.toContain(CREDENTIALS.secretAccessKey);
    expect(text).not.toContain(store.url);
    expect(text).not.toContain('"none"');
  });
});

describe("a gateway on the Azure backend (Azurite)", () => {
  let azurite: AzuriteServer;
  let gw: TestGateway;
  beforeAll(async () => {
    azurite = await startAzurite({ inMemory: true });
    gw = await startTestGateway({
      env: { FENCEGATE_BACKEND: "azure", FENCEGATE_AZURE_CONNECTION_STRING: azurite.connectionString },
    });
  }, 60_000);
  afterAll(async () => {
    await gw?.stop();
    await azurite?.stop();
  });

  it("counts its calls to Azure by operation and outcome, with labels free of names", async () => {
    expect(
      (await signedRequest(gw.url, { method: "PUT", path: "/azdata", credentials: CREDENTIALS })).status,
    ).toBe(200);
    const lease = (
      await apiAs(gw.url, CREDENTIALS).acquire({ bucket: "azdata", key: "obj-7f3e", ttlMs: 30_000 })
    ).body;
    const put = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath("azdata", "obj-7f3e"),
      headers: { "x-fence-token": lease.fencingToken },
      body: "stored in Azure",
      credentials: CREDENTIALS,
    });
    expect(put.status).toBe(200);
    const families = await scrape(gw.url);
    const calls = families.get("fencegate_store_calls_total")!.samples;
    expect(calls.length).toBeGreaterThan(0);
    expect(calls.every((s) => s.labels.backend === "azure")).toBe(true);
    expect(
      sumOf(families, "fencegate_store_calls_total", { backend: "azure", outcome: "ok" }),
    ).toBeGreaterThan(0);
    // The commit of the object went out and was answered.
    expect(
      sumOf(families, "fencegate_store_calls_total", { operation: "commit", outcome: "ok" }),
    ).toBeGreaterThan(0);
    for (const s of calls) {
      expect(s.labels.operation).toMatch(/^[a-z]+(_[a-z]+)?$/);
      expect(s.labels.operation).not.toMatch(/azdata|obj|7f3e/);
    }
  }, 60_000);
});

describe("a gateway on the S3 backend whose commits are lost on the way", () => {
  let store: TestGateway;
  let proxy: HttpFaultProxy;
  let gw: TestGateway;
  beforeAll(async () => {
    store = await startTestGateway({ env: { FENCEGATE_FENCING: "optional" } });
    proxy = await startHttpFaultProxy(store.url);
    gw = await startTestGateway({
      overrides: {
        backend: {
          type: "s3",
          endpoint: proxy.url,
          region: "us-east-1",
          accessKeyId: CREDENTIALS.accessKeyId,
          secretAccessKey: CREDENTIALS.secretAccessKey,
          forcePathStyle: true,
        },
      },
    });
  }, 30_000);
  afterAll(async () => {
    await gw?.stop();
    await proxy?.close();
    await store?.stop();
  });

  it("counts the write as an unknown decision, and the lost calls by their outcome", async () => {
    expect(
      (await signedRequest(gw.url, { method: "PUT", path: "/data", credentials: CREDENTIALS })).status,
    ).toBe(200);
    const lease = (await apiAs(gw.url, CREDENTIALS).acquire({ bucket: "data", key: "k", ttlMs: 30_000 }))
      .body;
    const write = (body: string) =>
      signedRequest(gw.url, {
        method: "PUT",
        path: objectPath("data", "k"),
        headers: { "x-fence-token": lease.fencingToken },
        body,
        credentials: CREDENTIALS,
      });
    expect((await write("first")).status).toBe(200);
    // Every send of the next commit is lost on the way: the gateway cannot learn its outcome.
    const rule = proxy.on(
      { method: "PUT", path: "/data/.fencegate/r/k" },
      { kind: "reset" },
      { times: Infinity },
    );
    const put = await write("never arrives");
    expect(put.status, put.text).toBe(503);
    expect(put.headers["x-fence-outcome"]).toBe("unknown");
    expect(rule.count).toBeGreaterThan(0);
    rule.cancel();

    const families = await scrape(gw.url);
    expect(
      sampleValue(families, "fencegate_fencing_decisions_total", {
        operation: "PutObject",
        decision: "unknown",
        reason: "unknown",
      }),
    ).toBe(1);
    expect(sumOf(families, "fencegate_fencing_decisions_total", { decision: "accepted" })).toBe(1);
    // The commit's PUTs that never got an answer are not counted as successes.
    expect(
      sumOf(families, "fencegate_store_calls_total", { backend: "s3", operation: "PutObject" }) -
        sumOf(families, "fencegate_store_calls_total", {
          backend: "s3",
          operation: "PutObject",
          outcome: "ok",
        }),
    ).toBeGreaterThan(0);
    expect(
      sampleValue(families, "fencegate_http_requests_total", { operation: "PutObject", status: "503" }),
    ).toBe(1);
  }, 30_000);
});

describe("a gateway on Redis with an archiving audit log", () => {
  let redis: RedisServer;
  let gw: TestGateway;
  let archive: ReturnType<typeof tempDir>;
  beforeAll(async () => {
    redis = await startRedis();
    archive = tempDir();
    gw = await startTestGateway({
      overrides: {
        leaseStore: { type: "redis", url: redis.url },
        audit: { type: "redis", retention: { maxRecords: 1_000, archiveDir: archive.path, intervalMs: 0 } },
      },
    });
  }, 30_000);
  afterAll(async () => {
    await gw?.stop();
    await redis?.stop();
    archive?.cleanup();
  });

  it("reports Redis connected, the epoch of its tokens, and the records not yet archived", async () => {
    const api = apiAs(gw.url, CREDENTIALS);
    const acquired = await api.acquire({ bucket: "bkt", key: "k", ttlMs: 30_000 });
    expect(acquired.status, JSON.stringify(acquired.body)).toBe(201);
    const lease = acquired.body;
    expect((await api.renew(lease.leaseId)).status).toBe(200);
    expect((await api.release(lease.leaseId)).status).toBe(204);
    const records = (await api.audit({ limit: "1000" })).body.records as unknown[];
    expect(records.length).toBe(3);

    const families = await scrape(gw.url);
    expect(sampleValue(families, "fencegate_redis_connected")).toBe(1);
    expect(sampleValue(families, "fencegate_redis_token_epoch")).toBe(Math.floor(lease.token / 2 ** 32));
    expect(sampleValue(families, "fencegate_lease_last_token")).toBe(lease.token);
    // Nothing archived yet (intervalMs 0): every record appended is lag.
    expect(sampleValue(families, "fencegate_audit_archive_lag_records")).toBe(records.length);
    // The lag is what lies above the archive's mark: with the first two marked archived, one.
    expect(await redis.command("GET", "{fencegate}:a:seq")).toBe(String(records.length));
    expect(await redis.command("SET", "{fencegate}:a:archived", "2")).toBe("OK");
    expect(sampleValue(await scrape(gw.url), "fencegate_audit_archive_lag_records")).toBe(records.length - 2);
    expect(sampleValue(families, "fencegate_lease_grants_total")).toBe(1);
    expect(sampleValue(families, "fencegate_lease_renewals_total")).toBe(1);
    expect(sampleValue(families, "fencegate_lease_releases_total")).toBe(1);
    expect(sampleValue(families, "fencegate_leases_active")).toBe(0);
  });

  it("reports Redis gone at once, and a new token epoch once Redis lost its counter", async () => {
    const api = apiAs(gw.url, CREDENTIALS);
    const before = sampleValue(await scrape(gw.url), "fencegate_redis_token_epoch")!;
    await redis.kill9();
    const started = performance.now();
    const down = await scrape(gw.url);
    expect(performance.now() - started).toBeLessThan(5_000);
    expect(sampleValue(down, "fencegate_redis_connected")).toBe(0);
    // Without persistence, the restarted Redis has lost the token counter.
    redis = await redis.restart();
    const granted = await waitFor(
      async () => {
        const answer = await api.acquire({ bucket: "bkt", key: "after-loss", ttlMs: 30_000 });
        return answer.status === 201 ? answer.body : null;
      },
      { what: "a grant after Redis came back", timeoutMs: 20_000, intervalMs: 200 },
    );
    const after = await scrape(gw.url);
    expect(sampleValue(after, "fencegate_redis_connected")).toBe(1);
    expect(sampleValue(after, "fencegate_redis_token_epoch")).toBe(Math.floor(granted.token / 2 ** 32));
    expect(sampleValue(after, "fencegate_redis_token_epoch")).toBeGreaterThan(before);
  }, 40_000);
});
