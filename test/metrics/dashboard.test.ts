/**
 * The Grafana dashboard in deploy/ asks only for metrics a gateway exports: every metric name in
 * every panel's query is a family (or a histogram's _bucket, _sum or _count) of a real gateway's
 * exposition, so that a renamed metric cannot leave a panel silently empty.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROOT, startTestGateway, type TestGateway, tempDir } from "../support/gateway.js";
import { parsePrometheusText } from "../support/prom-text.js";
import { type RedisServer, startRedis } from "../support/redis.js";
import { requireTools } from "../support/tools.js";

requireTools("redis-server");

type Panel = { title: string; type: string; targets?: Array<{ expr: string }> };

// On Redis with an archiving audit log (and the fs backend's embedded store): every family shows.
let redis: RedisServer;
let archive: ReturnType<typeof tempDir>;
let gw: TestGateway;
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

describe("deploy/grafana-dashboard.json", () => {
  const dashboard = JSON.parse(readFileSync(join(ROOT, "deploy", "grafana-dashboard.json"), "utf8")) as {
    panels: Panel[];
    templating: { list: Array<{ name: string }> };
  };

  it("queries only metrics the gateway exports", async () => {
    const families = parsePrometheusText(await (await fetch(`${gw.url}/_fence/v1/metrics`)).text());
    const exported = new Set<string>();
    for (const family of families.values()) {
      exported.add(family.name);
      if (family.type === "histogram") {
        for (const suffix of ["_bucket", "_sum", "_count"]) exported.add(`${family.name}${suffix}`);
      }
    }
    const queried = new Set<string>();
    const panels = dashboard.panels.filter((p) => p.type !== "row");
    expect(panels.length).toBeGreaterThan(15);
    for (const panel of panels) {
      expect(panel.targets?.length, panel.title).toBeGreaterThan(0);
      for (const { expr } of panel.targets!) {
        const names = expr.match(/\b(fencegate|process|nodejs)_[a-z0-9_]+/g) ?? [];
        expect(names.length, `${panel.title}: ${expr}`).toBeGreaterThan(0);
        for (const name of names) {
          expect(exported.has(name), `${panel.title}: ${name}`).toBe(true);
          queried.add(name.replace(/_(bucket|sum|count)$/, ""));
        }
      }
    }
    // Each fencegate family the issue asks for has a panel.
    for (const family of [
      "fencegate_http_requests_total",
      "fencegate_http_request_duration_seconds",
      "fencegate_fencing_decisions_total",
      "fencegate_lease_grants_total",
      "fencegate_lease_renewals_total",
      "fencegate_lease_releases_total",
      "fencegate_lease_expiries_total",
      "fencegate_lease_breaks_total",
      "fencegate_lease_waits_total",
      "fencegate_lease_wait_duration_seconds",
      "fencegate_leases_active",
      "fencegate_lease_waiters",
      "fencegate_store_calls_total",
      "fencegate_store_call_duration_seconds",
      "fencegate_group_commit_batch_size",
      "fencegate_audit_append_duration_seconds",
      "fencegate_audit_archive_lag_records",
      "fencegate_redis_connected",
      "fencegate_redis_token_epoch",
      "fencegate_dependency_up",
    ]) {
      expect(queried.has(family), family).toBe(true);
    }
    expect(dashboard.templating.list.map((v) => v.name)).toEqual(["datasource", "instance"]);
  });
});
