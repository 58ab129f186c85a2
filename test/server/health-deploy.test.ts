/**
 * The Kubernetes example in deploy/ probes what the gateway serves: liveness on
 * /_fence/v1/health/live and readiness on /_fence/v1/health/ready, on the container port that
 * FENCEGATE_PORT sets, readiness given longer than the gateway's health deadline; the metrics
 * scrape on the port FENCEGATE_METRICS_PORT sets. The paths are checked against a real gateway.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { ROOT, startTestGateway, type TestGateway } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";

checkLeaseApiResponses();

type Probe = { httpGet: { path: string; port: string | number }; timeoutSeconds?: number };
type Container = {
  env: Array<{ name: string; value?: string }>;
  ports: Array<{ name: string; containerPort: number }>;
  livenessProbe: Probe;
  readinessProbe: Probe;
  startupProbe?: Probe;
};

const docs = parseAllDocuments(readFileSync(join(ROOT, "deploy", "kubernetes.yaml"), "utf8")).map(
  // biome-ignore lint/suspicious/noExplicitAny: a Kubernetes manifest, checked field by field below
  (d) => d.toJSON() as any,
);
const deployment = docs.find((d) => d.kind === "Deployment");
const service = docs.find((d) => d.kind === "Service");
const container = deployment.spec.template.spec.containers[0] as Container;
const envOf = (name: string) => container.env.find((e) => e.name === name)?.value;
const portNamed = (name: string) => container.ports.find((p) => p.name === name)?.containerPort;

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway({ overrides: {} });
});
afterAll(async () => {
  await gw?.stop();
});

describe("deploy/kubernetes.yaml", () => {
  it("probes liveness and readiness on the port FENCEGATE_PORT sets", () => {
    expect(Number(envOf("FENCEGATE_PORT"))).toBe(portNamed("http"));
    expect(container.livenessProbe.httpGet).toEqual({ path: "/_fence/v1/health/live", port: "http" });
    expect(container.startupProbe?.httpGet).toEqual({ path: "/_fence/v1/health/live", port: "http" });
    expect(container.readinessProbe.httpGet).toEqual({ path: "/_fence/v1/health/ready", port: "http" });
    // Readiness gets longer than the gateway's deadline (2 s): the 503 naming the failing
    // dependency arrives before the probe gives up.
    expect(container.readinessProbe.timeoutSeconds! * 1000).toBeGreaterThan(2_000);
    expect(service.spec.ports).toContainEqual(expect.objectContaining({ name: "http", targetPort: "http" }));
  });

  it("scrapes the metrics on the port FENCEGATE_METRICS_PORT sets", () => {
    const annotations = deployment.spec.template.metadata.annotations;
    expect(Number(envOf("FENCEGATE_METRICS_PORT"))).toBe(portNamed("metrics"));
    expect(Number(annotations["prometheus.io/port"])).toBe(portNamed("metrics"));
    expect(annotations["prometheus.io/path"]).toBe("/_fence/v1/metrics");
    expect(service.spec.ports).toContainEqual(
      expect.objectContaining({ name: "metrics", targetPort: "metrics" }),
    );
  });

  it("names paths a gateway answers", async () => {
    for (const probe of [container.livenessProbe, container.readinessProbe]) {
      expect((await fetch(`${gw.url}${probe.httpGet.path}`)).status, probe.httpGet.path).toBe(200);
    }
    const annotations = deployment.spec.template.metadata.annotations;
    const metrics = await fetch(`${gw.url}${annotations["prometheus.io/path"]}`);
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toContain("# TYPE fencegate_http_requests_total counter");
  });
});
