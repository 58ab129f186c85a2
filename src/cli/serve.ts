import { ConfigError, loadConfig } from "../config/load.js";
import { DEV_ACCESS_KEY_ID, DEV_SECRET_ACCESS_KEY } from "../config/resolve.js";
import { startGateway } from "../server/gateway.js";
import { CliError, intOption, parse } from "./shared.js";

/** Requests in flight at SIGTERM/SIGINT get this long to finish. */
const SHUTDOWN_GRACE_MS = 10_000;

export async function serveCommand(args: string[]): Promise<number> {
  const { values } = parse(args, {
    config: { type: "string" },
    host: { type: "string" },
    port: { type: "string" },
    "data-dir": { type: "string" },
  });
  const env = { ...process.env };
  if (values.config) env.FENCEGATE_CONFIG = values.config;
  const overrides: Record<string, unknown> = {};
  const server: Record<string, unknown> = {};
  if (values.host) server.host = values.host;
  if (values.port !== undefined) server.port = intOption("port", values.port);
  if (Object.keys(server).length > 0) overrides.server = server;
  if (values["data-dir"]) overrides.dataDir = values["data-dir"];

  let gateway: Awaited<ReturnType<typeof startGateway>>;
  try {
    const config = loadConfig(env, overrides);
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
    process.stdout.write(`${lines.join("\n")}\n`);
  } catch (e) {
    if (e instanceof ConfigError) throw new CliError(e.message, 78);
    if ((e as NodeJS.ErrnoException).code === "EADDRINUSE") {
      throw new CliError(
        `cannot listen: ${(e as Error).message} (set FENCEGATE_PORT, or 0 for any free port)`,
        1,
      );
    }
    throw new CliError(`cannot start: ${(e as Error).message}`, 1);
  }

  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      process.stderr.write(`fencegate: ${signal}, shutting down\n`);
      gateway.close(SHUTDOWN_GRACE_MS).then(resolve, resolve);
    };
    process.once("SIGINT", () => stop("SIGINT"));
    process.once("SIGTERM", () => stop("SIGTERM"));
  });
  return 0;
}
