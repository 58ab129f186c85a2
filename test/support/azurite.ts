import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { hasExited, trackChild } from "./processes.js";
import { freePort } from "./redis.js";
import { tempDir } from "./temp.js";
import { sleep } from "./wait.js";

/**
 * A private Azurite blob service for a test suite: its own free port on 127.0.0.1 and its own
 * temporary --location. Started with --skipApiVersionCheck (the SDK speaks a newer service
 * version than Azurite knows) and --loose (it ignores headers it does not emulate).
 */
export type AzuriteServer = {
  /** A connection string for the well-known development account on this server. */
  connectionString: string;
  /** The blob endpoint: http://127.0.0.1:PORT/devstoreaccount1 */
  url: string;
  port: number;
  /** What Azurite printed so far. */
  output(): string;
  /** SIGTERM, then SIGKILL after a short grace (Azurite takes seconds to exit); removes its directory. */
  stop(): Promise<void>;
};

export const AZURITE_ACCOUNT = "devstoreaccount1";
export const AZURITE_KEY =
  "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

export function azuriteConnectionString(port: number): string {
  return [
    "DefaultEndpointsProtocol=http",
    `AccountName=${AZURITE_ACCOUNT}`,
    `AccountKey=${AZURITE_KEY}`,
    `BlobEndpoint=http://127.0.0.1:${port}/${AZURITE_ACCOUNT}`,
  ].join(";");
}

const STOP_GRACE_MS = 1_500;

function azuriteMain(): string {
  const require = createRequire(import.meta.url);
  try {
    return join(dirname(require.resolve("azurite/package.json")), "dist/src/blob/main.js");
  } catch {
    throw new Error("Azurite is not installed: run npm ci (azurite is a devDependency)");
  }
}

/**
 * Starts Azurite; rejects with one line (and its output) when it cannot start within `timeoutMs`.
 * `inMemory` runs it with --inMemoryPersistence instead of --location (faster, nothing on disk).
 */
export async function startAzurite(
  opts: { timeoutMs?: number; inMemory?: boolean } = {},
): Promise<AzuriteServer> {
  const main = azuriteMain();
  const timeoutMs = opts.timeoutMs ?? 30_000;
  // A free port can be taken before Azurite binds it: then try another one.
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const dir = tempDir("fencegate-azurite-");
    try {
      return await launch(main, port, dir, timeoutMs, opts.inMemory ?? false);
    } catch (e) {
      dir.cleanup();
      if (!(e instanceof PortTaken) || attempt >= 5) {
        throw new Error(`Azurite could not start: ${(e as Error).message}`);
      }
    }
  }
}

class PortTaken extends Error {}

async function launch(
  main: string,
  port: number,
  dir: { path: string; cleanup(): void },
  timeoutMs: number,
  inMemory: boolean,
): Promise<AzuriteServer> {
  const args = [
    main,
    "--blobHost",
    "127.0.0.1",
    "--blobPort",
    String(port),
    // Azurite refuses --location with --inMemoryPersistence; it then runs in the temp dir as cwd.
    ...(inMemory ? ["--inMemoryPersistence"] : ["--location", dir.path]),
    "--silent",
    "--skipApiVersionCheck",
    "--loose",
    "--disableTelemetry",
  ];
  const child = spawn(process.execPath, args, { cwd: dir.path, stdio: ["ignore", "pipe", "pipe"] });
  trackChild(child);
  let out = "";
  child.stdout.on("data", (d) => {
    out += d;
  });
  child.stderr.on("data", (d) => {
    out += d;
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  let spawnError: Error | undefined;
  child.once("error", (e) => {
    spawnError = e;
  });
  const kill = async () => {
    if (!hasExited(child)) child.kill("SIGTERM");
    const graceful = await Promise.race([exited.then(() => true), sleep(STOP_GRACE_MS).then(() => false)]);
    if (!graceful && !hasExited(child)) {
      child.kill("SIGKILL");
      await exited;
    }
  };

  const url = `http://127.0.0.1:${port}/${AZURITE_ACCOUNT}`;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (spawnError) throw new Error(`cannot run ${process.execPath} ${main}: ${spawnError.message}`);
    if (hasExited(child)) {
      const message = `exited (${child.signalCode ?? `code ${child.exitCode}`}) before answering on port ${port}: ${out.trim()}`;
      throw /EADDRINUSE|address already in use/i.test(out) ? new PortTaken(message) : new Error(message);
    }
    if (await answers(port)) break;
    if (Date.now() > deadline) {
      await kill();
      throw new Error(`did not answer on port ${port} within ${timeoutMs} ms: ${out.trim()}`);
    }
    await sleep(50);
  }

  let stopped: Promise<void> | undefined;
  return {
    connectionString: azuriteConnectionString(port),
    url,
    port,
    output: () => out,
    stop() {
      stopped ??= kill().finally(() => dir.cleanup());
      return stopped;
    },
  };
}

/** Any HTTP answer from the blob service (an unauthenticated List Containers gets a 403). */
async function answers(port: number): Promise<boolean> {
  try {
    const response = await fetch(`http://127.0.0.1:${port}/${AZURITE_ACCOUNT}?comp=list`, {
      signal: AbortSignal.timeout(1_000),
    });
    await response.arrayBuffer();
    return response.status > 0;
  } catch {
    return false;
  }
}
