import { constants } from "node:os";
import { ConfigError, loadConfig } from "../config/load.js";
import { DEV_ACCESS_KEY_ID, DEV_SECRET_ACCESS_KEY } from "../config/resolve.js";
import { flushLogger } from "../core/log.js";
import { type Gateway, startGateway } from "../server/gateway.js";
import { CliError, EXIT, intOption } from "./shared.js";

/** Of the shutdown's bound, what is kept for writing out the log before the process exits. */
const LOG_FLUSH_MS = 200;
/** Past the bound by this much, the process exits whatever it is doing (it should never come to it). */
const HARD_STOP_AFTER_MS = 1_000;

export async function serveCommand(values: {
  config?: string;
  host?: string;
  port?: string;
  dataDir?: string;
}): Promise<number> {
  const env = { ...process.env };
  if (values.config) env.FENCEGATE_CONFIG = values.config;
  const overrides: Record<string, unknown> = {};
  const server: Record<string, unknown> = {};
  if (values.host) server.host = values.host;
  if (values.port !== undefined) server.port = intOption("port", values.port);
  if (Object.keys(server).length > 0) overrides.server = server;
  if (values.dataDir) overrides.dataDir = values.dataDir;

  let gateway: Gateway;
  let boundMs: number;
  try {
    const config = loadConfig(env, overrides);
    boundMs = config.server.shutdownTimeoutMs;
    gateway = await startGateway(config);
    const devCreds = !config.rootCredential && !config.credentials;
    const lines = [
      `fencegate listening on ${gateway.url}`,
      `  S3 endpoint:   ${gateway.url}  (path-style${config.server.domain ? `, or <bucket>.${config.server.domain}` : ""})`,
      `  lease API:     ${gateway.url}/_fence/v1`,
      `  data dir:      ${config.dataDir}`,
      `  fencing:       ${config.fencing.default} by default`,
      devCreds
        ? `  credentials:   AWS_ACCESS_KEY_ID=${DEV_ACCESS_KEY_ID} AWS_SECRET_ACCESS_KEY=${DEV_SECRET_ACCESS_KEY} (development defaults, loopback only)`
        : "  credentials:   as configured",
    ];
    // On stderr: stdout carries the JSON log, one record per line, for log shippers and jq.
    process.stderr.write(`${lines.join("\n")}\n`);
  } catch (e) {
    if (e instanceof ConfigError) throw new CliError(e.message, EXIT.config);
    if ((e as NodeJS.ErrnoException).code === "EADDRINUSE") {
      throw new CliError(
        `cannot listen: ${(e as Error).message} (set FENCEGATE_PORT, or 0 for any free port)`,
        1,
      );
    }
    throw new CliError(`cannot start: ${(e as Error).message}`, 1);
  }

  stopOnSignals(gateway, boundMs);
  // The process ends in stopOnSignals.
  return new Promise<number>(() => undefined);
}

/**
 * SIGTERM and SIGINT stop the gateway within `boundMs` whatever its stores do: it stops
 * accepting, lets requests in flight finish, answers those still running with 503 shortly before
 * the bound, closes the stores without waiting on a silent one, writes out the log and exits 0.
 * A second signal exits at once (128 + the signal's number).
 */
function stopOnSignals(gateway: Gateway, boundMs: number): void {
  let stopping = false;
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) {
      process.stderr.write(`fencegate: ${signal} again, exiting now\n`);
      process.exit(128 + constants.signals[signal]);
    }
    stopping = true;
    process.stderr.write(`fencegate: ${signal}, shutting down (within ${boundMs} ms)\n`);
    const started = performance.now();
    setTimeout(() => {
      process.stderr.write("fencegate: the shutdown did not finish in time, exiting now\n");
      process.exit(1);
    }, boundMs + HARD_STOP_AFTER_MS).unref();
    void (async () => {
      await gateway.close(Math.max(0, boundMs - LOG_FLUSH_MS)).catch((err: unknown) => {
        gateway.log.error({ err }, "shutdown failed");
      });
      const left = Math.max(0, boundMs - (performance.now() - started));
      await Promise.race([flushLogger(gateway.log), new Promise((r) => setTimeout(r, left).unref())]);
      process.exit(0);
    })();
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
}
