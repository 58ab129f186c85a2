import { VERSION } from "../core/version.js";
import { CliError, parse } from "./shared.js";

const USAGE = `fencegate — fenced storage gateway

Usage:
  fencegate serve [--config FILE] [--host H] [--port N] [--data-dir DIR]
  fencegate lease acquire --bucket B (--key K | --prefix P) [--ttl-ms N] [--wait-ms N] [--owner O]
  fencegate lease renew LEASE_ID [--ttl-ms N]
  fencegate lease release LEASE_ID
  fencegate lease show LEASE_ID
  fencegate lease list [--bucket B] [--prefix P]
  fencegate audit [--bucket B] [--key K] [--prefix P] [--lease-id ID] [--decision accepted|rejected|unknown]
                  [--op OP] [--since ISO] [--until ISO] [--limit N] [--cursor C] [--all]
  fencegate backend verify [--config FILE] [--bucket B]...
  fencegate run --bucket B (--key K | --prefix P) [--ttl-ms N] [--wait-ms N] [--owner O] -- CMD [ARGS...]
  fencegate --version

Client commands read FENCEGATE_ENDPOINT (default http://127.0.0.1:9700), AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY (default: the development credentials).
`;

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    // Each command is loaded when it runs: client commands start without the server's modules.
    case "serve":
      return (await import("./serve.js")).serveCommand(rest);
    case "lease":
      return (await import("./lease.js")).leaseCommand(rest);
    case "audit":
      return (await import("./audit.js")).auditCommand(rest);
    case "run":
      return (await import("./run.js")).runCommand(rest);
    case "backend":
      return (await import("./backend.js")).backendCommand(rest);
    case "help":
    case "--help":
    case "-h":
    case undefined:
      process.stdout.write(USAGE);
      return command === undefined ? 2 : 0;
    case "--version":
    case "version": {
      parse(rest, {});
      process.stdout.write(`fencegate ${VERSION}\n`);
      return 0;
    }
    default:
      throw new CliError(`unknown command "${command}"\n\n${USAGE}`, 2);
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code !== -1) process.exitCode = code;
  },
  (err: unknown) => {
    if (err instanceof CliError) {
      process.stderr.write(`fencegate: ${err.message}\n`);
      process.exitCode = err.exitCode;
    } else {
      process.stderr.write(`fencegate: ${(err as Error)?.message ?? String(err)}\n`);
      process.exitCode = 1;
    }
  },
);
