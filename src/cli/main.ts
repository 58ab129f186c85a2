import { CommanderError } from "commander";
import { buildProgram } from "./program.js";
import { CliError, EXIT } from "./shared.js";

function isEpipe(err: unknown): boolean {
  return (err as NodeJS.ErrnoException | undefined)?.code === "EPIPE";
}

async function main(argv: string[]): Promise<void> {
  // A reader that went away (`fencegate audit --all | head`) ends the command quietly.
  process.stdout.on("error", (err) => {
    if (isEpipe(err)) process.exit(process.exitCode ?? 0);
    throw err;
  });
  try {
    await buildProgram().parseAsync(argv, { from: "user" });
  } catch (err) {
    if (err instanceof CommanderError) {
      // --help and --version: exit 0; every parsing error (already printed, one line): 2.
      process.exitCode =
        err.code === "commander.helpDisplayed" || err.code === "commander.version" ? 0 : EXIT.usage;
      return;
    }
    if (isEpipe(err)) return;
    const message = err instanceof CliError ? err.message : ((err as Error)?.message ?? String(err));
    process.stderr.write(`fencegate: ${message}\n`);
    process.exitCode = err instanceof CliError ? err.exitCode : EXIT.failure;
  }
}

// Once the command is done, exit without waiting for idle keep-alive connections and timers of
// the HTTP client (they hold a finished command up to ~150 ms). Output is written out first.
main(process.argv.slice(2)).then(
  () => process.stdout.write("", () => process.exit()),
  () => process.exit(),
);
