/**
 * Who may read the metrics and where: a loopback peer without a token, anyone else only with the
 * configured bearer token (401 with a JSON error that says what is missing otherwise, also when
 * no token is configured); a listener of its own on FENCEGATE_METRICS_PORT (port 0: any free
 * port) serving the same gateway's metrics; bad settings refused with a clear message. And the
 * strict exposition parser the metrics tests rely on refuses what Prometheus would.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config/load.js";
import { createLogger } from "../../src/core/log.js";
import { isLoopback, metricsAnswer, metricsSettingsFromEnv } from "../../src/metrics/endpoint.js";
import { createMetrics } from "../../src/metrics/metrics.js";
import { type Gateway, startGateway } from "../../src/server/gateway.js";
import { startTestGateway, tempDir } from "../support/gateway.js";
import { parsePrometheusText, sampleValue } from "../support/prom-text.js";
import { waitFor } from "../support/wait.js";

const TOKEN = "scrape-token-4f1c9a";

describe("metricsAnswer", () => {
  const metrics = createMetrics({ gatewayId: "gw-access", version: "test" });

  it("serves a loopback peer without a token, over IPv4, IPv6 and IPv4-mapped addresses", async () => {
    for (const remoteAddress of ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"]) {
      const answer = await metricsAnswer(metrics, { remoteAddress, authorization: undefined }, undefined);
      expect(answer.status, remoteAddress).toBe(200);
      expect(answer.headers["content-type"]).toMatch(/^text\/plain; version=0\.0\.4/);
      expect(
        sampleValue(parsePrometheusText(answer.body), "fencegate_build_info", { gateway: "gw-access" }),
      ).toBe(1);
    }
    for (const address of ["10.0.0.7", "192.168.1.2", "::ffff:10.0.0.7", "fe80::1", "128.0.0.1", undefined]) {
      expect(isLoopback(address), String(address)).toBe(false);
    }
  });

  it("refuses another machine without the token with 401 and a JSON error, and serves it with the token", async () => {
    const remoteAddress = "10.1.2.3";
    const none = await metricsAnswer(metrics, { remoteAddress, authorization: undefined }, undefined);
    expect(none.status).toBe(401);
    expect(none.headers["content-type"]).toBe("application/json");
    expect(none.headers["www-authenticate"]).toMatch(/^Bearer/);
    expect(JSON.parse(none.body)).toEqual({
      error: { code: "Unauthorized", message: expect.stringMatching(/FENCEGATE_METRICS_TOKEN/) },
    });
    // With a token configured: a wrong one, another scheme, or none at all are refused.
    for (const authorization of [undefined, "Bearer nope", `Basic ${TOKEN}`, `Bearer ${TOKEN}x`, "Bearer"]) {
      const answer = await metricsAnswer(metrics, { remoteAddress, authorization }, TOKEN);
      expect(answer.status, String(authorization)).toBe(401);
      expect(answer.body).not.toContain(TOKEN);
    }
    const ok = await metricsAnswer(metrics, { remoteAddress, authorization: `Bearer ${TOKEN}` }, TOKEN);
    expect(ok.status).toBe(200);
    expect(ok.body).toContain("fencegate_build_info");
    expect(ok.body).not.toContain(TOKEN);
  });

  it("reads FENCEGATE_METRICS_PORT, _HOST and _TOKEN, refusing a port that is not one", () => {
    expect(metricsSettingsFromEnv({})).toEqual({});
    expect(
      metricsSettingsFromEnv({
        FENCEGATE_METRICS_PORT: "0",
        FENCEGATE_METRICS_HOST: "0.0.0.0",
        FENCEGATE_METRICS_TOKEN: TOKEN,
      }),
    ).toEqual({ port: 0, host: "0.0.0.0", token: TOKEN });
    for (const bad of ["http", "-1", "65536", "9.5", " 9700"]) {
      expect(() => metricsSettingsFromEnv({ FENCEGATE_METRICS_PORT: bad }), bad).toThrow(
        /^FENCEGATE_METRICS_PORT: expected a port number from 0 to 65535, got/,
      );
    }
  });
});

describe("a gateway with FENCEGATE_METRICS_PORT", () => {
  let gw: Gateway;
  let cleanup: () => void;
  beforeAll(async () => {
    const dir = tempDir();
    cleanup = dir.cleanup;
    const config = loadConfig({ FENCEGATE_PORT: "0", FENCEGATE_DATA_DIR: dir.path });
    gw = await startGateway(config, {
      log: createLogger("silent"),
      metrics: metricsSettingsFromEnv({ FENCEGATE_METRICS_PORT: "0", FENCEGATE_METRICS_TOKEN: TOKEN }),
    });
  });
  afterAll(async () => {
    await gw?.close();
    cleanup?.();
  });

  it("serves this gateway's metrics on a port of its own, at /_fence/v1/metrics and /metrics", async () => {
    expect(gw.metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(gw.metricsUrl).not.toBe(gw.url);
    for (const path of ["/_fence/v1/metrics", "/metrics"]) {
      const res = await fetch(`${gw.metricsUrl}${path}`);
      expect(res.status, path).toBe(200);
      const families = parsePrometheusText(await res.text());
      expect(sampleValue(families, "fencegate_build_info", { gateway: gw.gatewayId }), path).toBe(1);
    }
    // The bearer token is accepted there too (a scraper may always send it).
    const withToken = await fetch(`${gw.metricsUrl}/metrics`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(withToken.status).toBe(200);
  });

  it("answers anything else there with a JSON 404 or 405", async () => {
    const other = await fetch(`${gw.metricsUrl}/_fence/v1/leases`);
    expect(other.status).toBe(404);
    expect(await other.json()).toMatchObject({ error: { code: "NotFound" } });
    const post = await fetch(`${gw.metricsUrl}/metrics`, { method: "POST" });
    expect(post.status).toBe(405);
    expect(post.headers.get("allow")).toBe("GET");
  });

  it("still serves them on the gateway's own port, and closes the metrics listener with the gateway", async () => {
    expect((await fetch(`${gw.url}/_fence/v1/metrics`)).status).toBe(200);
    const url = gw.metricsUrl!;
    await gw.close();
    await expect(fetch(`${url}/metrics`)).rejects.toThrow();
  });
});

describe("a gateway whose metrics port is taken", () => {
  it("does not start, and says why", async () => {
    const dir = tempDir();
    const config = loadConfig({ FENCEGATE_PORT: "0", FENCEGATE_DATA_DIR: dir.path });
    const first = await startGateway(config, { log: createLogger("silent"), metrics: { port: 0 } });
    const taken = Number(new URL(first.metricsUrl!).port);
    const dir2 = tempDir();
    const servers = () => process.getActiveResourcesInfo().filter((r) => r === "TCPServerWrap").length;
    const listening = servers();
    try {
      await expect(
        startGateway(loadConfig({ FENCEGATE_PORT: "0", FENCEGATE_DATA_DIR: dir2.path }), {
          log: createLogger("silent"),
          metrics: { port: taken },
        }),
      ).rejects.toThrow(/^the metrics listener could not start: .*EADDRINUSE/);
      // The gateway that could not start closed what it had opened: its S3 port too (handles
      // leave the list once their close has run).
      await waitFor(() => servers() === listening, {
        what: "the failed gateway's listeners to close",
        timeoutMs: 5_000,
      });
    } finally {
      await first.close();
      dir.cleanup();
      dir2.cleanup();
    }
  });
});

describe("the strict exposition parser", () => {
  const good = [
    "# HELP a_total Things.",
    "# TYPE a_total counter",
    'a_total{x="1",y="q\\"uote\\\\"} 3',
    "# TYPE h histogram",
    'h_bucket{le="1"} 1',
    'h_bucket{le="+Inf"} 2',
    "h_sum 3.5",
    "h_count 2",
    "",
  ].join("\n");

  it("reads families, labels with escapes, and histograms", () => {
    const families = parsePrometheusText(good);
    expect(families.get("a_total")).toMatchObject({ type: "counter", help: "Things." });
    expect(sampleValue(families, "a_total", { y: 'q"uote\\' })).toBe(3);
    expect(sampleValue(families, "h_count")).toBe(2);
  });

  it("refuses what Prometheus would refuse", () => {
    const bad: Array<[string, RegExp]> = [
      ["a b", /malformed sample/],
      ['a{x="1"', /malformed sample/],
      ['a{x="\\q"} 1', /malformed sample/],
      ['a{1x="1"} 1', /malformed sample/],
      ['a{x="1",x="2"} 1', /malformed sample/],
      ["a 1\na 2", /twice/],
      ["# TYPE a counter\n# TYPE a gauge", /TYPE after samples or twice/],
      ["# TYPE a counter\na -1", /counter below 0/],
      ["# TYPE a sometype", /unknown type/],
      ["a 1\nb 1\na 2", /two places/],
      ['# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_count 1', /not cumulative/],
      ['# TYPE h histogram\nh_bucket{le="1"} 1\nh_count 1', /no \+Inf bucket/],
      ['# TYPE h histogram\nh_bucket{le="+Inf"} 2\nh_count 1', /\+Inf bucket is not _count/],
    ];
    for (const [text, why] of bad) expect(() => parsePrometheusText(text), text).toThrow(why);
  });
});

describe("metrics settings from the configuration file", () => {
  it("a metrics block starts the listener of its own, and the token never reaches the log", async () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _enc, done) {
        lines.push(String(chunk));
        done();
      },
    });
    const dir = tempDir();
    const file = join(dir.path, "metrics.yaml");
    writeFileSync(file, `metrics:\n  port: 0\n  token: ${TOKEN}\n`);
    const gw = await startTestGateway({
      env: { FENCEGATE_CONFIG: file },
      log: createLogger("debug", {}, sink),
    });
    try {
      expect(gw.metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      expect(gw.metricsUrl).not.toBe(gw.url);
      const res = await fetch(`${gw.metricsUrl}/_fence/v1/metrics`, {
        headers: { authorization: `Bearer ${TOKEN}` },
      });
      expect(res.status).toBe(200);
      expect(await res.text()).toContain("fencegate_");
    } finally {
      await gw.stop();
      dir.cleanup();
    }
    expect(lines.join("")).not.toContain(TOKEN);
  });
});
