/**
 * Health within its deadline (src/server/health.ts): dependencies are checked in parallel, one
 * that does not answer in time is reported as such and never waited for, a check still running is
 * joined rather than started again, liveness calls nothing; and the gateway's three health
 * endpoints answer without a signature, /health keeping its original shape.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createHealth, type Dependency } from "../../src/server/health.js";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";

checkLeaseApiResponses();

const fields = { gateway: "gw-test", backend: "s3", leaseStore: "redis", auditLog: "redis" };

/** A dependency that never answers, counting how often it was asked. */
function silent(name: string, kind = "s3"): Dependency & { calls: number } {
  const dep = {
    name,
    kind,
    calls: 0,
    check: () => {
      dep.calls++;
      return new Promise<never>(() => undefined);
    },
  };
  return dep;
}

const answering = (name: string, kind: string): Dependency => ({ name, kind, check: async () => [] });

describe("createHealth", () => {
  it("answers within its deadline, naming the dependency that did not answer, and checks the others in parallel", async () => {
    const slowOk: Dependency = {
      name: "auditLog",
      kind: "redis",
      check: () => new Promise((resolve) => setTimeout(resolve, 150)),
    };
    const health = createHealth({
      dependencies: [silent("backend"), answering("leaseStore", "redis"), slowOk],
      timeoutMs: 300,
      describe: fields,
      draining: () => null,
    });
    const started = performance.now();
    const report = await health.ready();
    const ms = performance.now() - started;
    expect(ms).toBeGreaterThanOrEqual(290);
    expect(ms).toBeLessThan(600);
    expect(report.ok).toBe(false);
    expect(report.body).toMatchObject({
      status: "unavailable",
      failing: ["backend"],
      error: "backend (s3): no answer within 300 ms",
      gateway: "gw-test",
      checks: {
        backend: { kind: "s3", status: "timeout" },
        leaseStore: { kind: "redis", status: "ok" },
        auditLog: { kind: "redis", status: "ok" },
      },
    });
  });

  it("reports a dependency's error as unavailable, and answers 200 once all answer", async () => {
    let fail = true;
    const flaky: Dependency = {
      name: "leaseStore",
      kind: "redis",
      check: async () => {
        if (fail) throw new Error("the Redis lease store is unavailable: connection refused");
      },
    };
    const health = createHealth({
      dependencies: [answering("backend", "fs"), flaky],
      timeoutMs: 1_000,
      describe: fields,
      draining: () => null,
    });
    const down = await health.ready();
    expect(down).toMatchObject({
      ok: false,
      body: {
        failing: ["leaseStore"],
        error: "leaseStore (redis): the Redis lease store is unavailable: connection refused",
        checks: { leaseStore: { status: "unavailable" }, backend: { status: "ok" } },
      },
    });
    fail = false;
    const up = await health.ready();
    expect(up).toMatchObject({ ok: true, body: { status: "ok", ...fields } });
    expect(up.body).not.toHaveProperty("failing");
  });

  it("joins a check still running instead of asking a silent dependency again on every poll", async () => {
    const backend = silent("backend");
    const health = createHealth({
      dependencies: [backend],
      timeoutMs: 50,
      describe: fields,
      draining: () => null,
    });
    for (let i = 0; i < 5; i++) expect((await health.ready()).ok).toBe(false);
    expect(backend.calls).toBe(1);
  });

  it("answers liveness without calling any dependency, and fails readiness at once while draining", async () => {
    const backend = silent("backend");
    let draining: string | null = null;
    const health = createHealth({
      dependencies: [backend],
      timeoutMs: 10_000,
      describe: fields,
      draining: () => draining,
    });
    expect(health.live()).toEqual({ status: "ok", ...fields });
    expect(backend.calls).toBe(0);
    draining = "the gateway is shutting down";
    const started = performance.now();
    const report = await health.ready();
    expect(performance.now() - started).toBeLessThan(100);
    expect(report).toMatchObject({
      ok: false,
      body: { status: "unavailable", error: "the gateway is shutting down", draining: true },
    });
    expect(backend.calls).toBe(0);
  });
});

describe("the health endpoints of a gateway", () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startTestGateway();
  });
  afterAll(async () => {
    await gw?.stop();
  });

  it("answer without a signature: live, ready, and /health in its original shape", async () => {
    const live = await fetch(`${gw.url}/_fence/v1/health/live`);
    expect(live.status).toBe(200);
    expect(await live.json()).toEqual({
      status: "ok",
      gateway: gw.gatewayId,
      backend: "fs",
      leaseStore: "embedded",
      auditLog: "embedded",
    });
    for (const path of ["/_fence/v1/health/ready", "/_fence/v1/health"]) {
      const res = await fetch(`${gw.url}${path}`);
      expect(res.status, path).toBe(200);
      expect(await res.json(), path).toMatchObject({
        status: "ok",
        gateway: gw.gatewayId,
        backend: "fs",
        leaseStore: "embedded",
        auditLog: "embedded",
        checks: {
          backend: { kind: "fs", status: "ok" },
          leaseStore: { kind: "embedded", status: "ok" },
          auditLog: { kind: "embedded", status: "ok" },
        },
      });
    }
  });
});
