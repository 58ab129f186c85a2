#!/usr/bin/env node
// The container's health check (Dockerfile HEALTHCHECK): GET /_fence/v1/health/live of the
// gateway at the address its configuration gives, read as `fencegate serve` reads it
// (FENCEGATE_CONFIG, FENCEGATE_HOST, FENCEGATE_PORT), so that it follows a port changed by either.
// Exits 0 when the gateway answers 200 within 2 s, 1 otherwise. `--ready` asks
// /_fence/v1/health/ready instead (every dependency answers).
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const TIMEOUT_MS = 2_000;

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const source = join(root, "src", "config", "load.ts");
let load;
if (existsSync(source)) {
  const { register } = await import("tsx/esm/api");
  register();
  load = await import(pathToFileURL(source).href);
} else {
  load = await import(pathToFileURL(join(root, "dist", "config", "load.js")).href);
}

const which = process.argv.includes("--ready") ? "ready" : "live";
try {
  const { host, port } = load.loadConfig(process.env).server;
  if (port === 0) throw new Error("the configured port is 0 (any free port): there is no address to check");
  // A wildcard address is reached on the loopback interface.
  const target = host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host;
  const url = `http://${target.includes(":") ? `[${target}]` : target}:${port}/_fence/v1/health/${which}`;
  const res = await fetch(url, { signal: AbortSignal.timeout(TIMEOUT_MS) });
  const body = await res.text();
  if (res.status !== 200) {
    process.stderr.write(`fencegate health check: ${url} answered ${res.status}: ${body.slice(0, 500)}\n`);
    process.exit(1);
  }
  process.exit(0);
} catch (e) {
  process.stderr.write(`fencegate health check: ${e?.cause?.message ?? e?.message ?? String(e)}\n`);
  process.exit(1);
}
