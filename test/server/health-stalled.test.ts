/**
 * Liveness and readiness with a stalled lease store: a gateway whose Redis (lease store and
 * audit log) is SIGSTOPped answers /health/live at once (no dependency is called), /health/ready
 * and /health with 503 naming the lease store within the health deadline, and a metrics scrape
 * in bounded time reporting Redis as not connected; readiness comes back once Redis does.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";
import { parsePrometheusText, sampleValue } from "../support/prom-text.js";
import { type RedisServer, startRedis } from "../support/redis.js";
import { requireTools } from "../support/tools.js";
import { waitFor } from "../support/wait.js";

checkLeaseApiResponses();

requireTools("redis-server");

const HEALTH_TIMEOUT_MS = 500;
/** Room for the answer to come back on a busy machine; far below the Redis command timeout. */
const MARGIN_MS = 1_500;

let redis: RedisServer;
let gw: TestGateway;
let stopped = false;

const resume = () => {
  if (!stopped) return;
  stopped = false;
  process.kill(redis.pid, "SIGCONT");
};

beforeAll(async () => {
  redis = await startRedis();
  gw = await startTestGateway({
    overrides: {
      // Commands wait far longer than the health deadline: only the deadline can end the checks.
      leaseStore: { type: "redis", url: redis.url, commandTimeoutMs: 20_000 },
      server: { healthTimeoutMs: HEALTH_TIMEOUT_MS },
    },
  });
}, 30_000);

afterAll(async () => {
  resume();
  await gw?.stop();
  await redis?.stop();
});

const timed = async <T>(work: () => Promise<T>): Promise<{ value: T; ms: number }> => {
  const started = performance.now();
  const value = await work();
  return { value, ms: performance.now() - started };
};

const answer = async (path: string) => {
  const res = await fetch(`${gw.url}${path}`);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
};

describe("a gateway whose Redis lease store is stalled", () => {
  it("answers liveness at once, readiness and /health with 503 naming the lease store within the deadline", async () => {
    expect((await answer("/_fence/v1/health/ready")).status).toBe(200);
    const before = parsePrometheusText(await (await fetch(`${gw.url}/_fence/v1/metrics`)).text());
    expect(sampleValue(before, "fencegate_redis_connected")).toBe(1);
    process.kill(redis.pid, "SIGSTOP");
    stopped = true;

    const live: number[] = [];
    for (let i = 0; i < 5; i++) {
      const { value, ms } = await timed(() => answer("/_fence/v1/health/live"));
      expect(value.status).toBe(200);
      expect(value.body).toMatchObject({ status: "ok", leaseStore: "redis", gateway: gw.gatewayId });
      live.push(ms);
    }
    live.sort((a, b) => a - b);
    expect(live[2]).toBeLessThan(100);

    for (const path of ["/_fence/v1/health/ready", "/_fence/v1/health"]) {
      const { value, ms } = await timed(() => answer(path));
      expect(value.status, path).toBe(503);
      expect(value.body, path).toMatchObject({
        status: "unavailable",
        checks: { leaseStore: { kind: "redis", status: "timeout" }, backend: { status: "ok" } },
      });
      expect(value.body.failing, path).toContain("leaseStore");
      expect(String(value.body.error), path).toMatch(
        new RegExp(`leaseStore \\(redis\\): no answer within ${HEALTH_TIMEOUT_MS} ms`),
      );
      expect(ms, path).toBeGreaterThanOrEqual(HEALTH_TIMEOUT_MS - 50);
      expect(ms, path).toBeLessThan(HEALTH_TIMEOUT_MS + MARGIN_MS);
    }

    // A scrape does not hang on the silent store either: Redis and the lease store are down.
    const scrape = await timed(async () => {
      const res = await fetch(`${gw.url}/_fence/v1/metrics`);
      expect(res.status).toBe(200);
      return parsePrometheusText(await res.text());
    });
    expect(scrape.ms).toBeLessThan(1_000 + MARGIN_MS);
    expect(sampleValue(scrape.value, "fencegate_redis_connected")).toBe(0);
    expect(sampleValue(scrape.value, "fencegate_dependency_up", { dependency: "leaseStore" })).toBe(0);
    expect(sampleValue(scrape.value, "fencegate_dependency_up", { dependency: "backend" })).toBe(1);
    expect(
      sampleValue(scrape.value, "fencegate_metrics_collect_errors_total", { collector: "leases" }),
    ).toBeGreaterThan(0);

    resume();
    await waitFor(async () => (await answer("/_fence/v1/health/ready")).status === 200, {
      what: "readiness once Redis answers again",
      timeoutMs: 20_000,
      intervalMs: 100,
    });
    const back = parsePrometheusText(await (await fetch(`${gw.url}/_fence/v1/metrics`)).text());
    expect(sampleValue(back, "fencegate_redis_connected")).toBe(1);
    expect(sampleValue(back, "fencegate_dependency_up", { dependency: "leaseStore" })).toBe(1);
  }, 60_000);
});
