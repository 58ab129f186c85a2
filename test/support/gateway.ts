import { type ChildProcess, spawn } from "node:child_process";
import { join, resolve } from "node:path";
import { S3Client, type S3ClientConfig } from "@aws-sdk/client-s3";
import { LeaseClient } from "../../src/client/lease-client.js";
import { loadConfig } from "../../src/config/load.js";
import { DEV_ACCESS_KEY_ID, DEV_SECRET_ACCESS_KEY } from "../../src/config/resolve.js";
import type { Clock } from "../../src/core/clock.js";
import { createLogger, type Logger } from "../../src/core/log.js";
import { type Gateway, startGateway } from "../../src/server/gateway.js";
import { trackChild } from "./processes.js";
import { tempDir } from "./temp.js";
import { sleep } from "./wait.js";

export const ROOT = resolve(import.meta.dirname, "../..");
/** The health endpoint (no authentication): 200 once the gateway serves. */
export const HEALTH_PATH = "/_fence/v1/health";
export { tempDir };

export const CREDENTIALS = { accessKeyId: DEV_ACCESS_KEY_ID, secretAccessKey: DEV_SECRET_ACCESS_KEY };

export type TestGateway = Gateway & {
  dataDir: string;
  s3(config?: Partial<S3ClientConfig>): S3Client;
  leases: LeaseClient;
  stop(): Promise<void>;
};

/**
 * A gateway in this process on 127.0.0.1:0 with its own data directory (or `dataDir`), ready
 * once its health endpoint answers 200. stop() closes it and removes the data directory it made.
 */
export async function startTestGateway(
  opts: {
    env?: Record<string, string>;
    overrides?: Record<string, unknown>;
    clock?: Clock;
    dataDir?: string;
    /** Default: a silent logger (TEST_LOG_LEVEL=debug shows the gateway's log). */
    log?: Logger;
  } = {},
): Promise<TestGateway> {
  const dir = opts.dataDir ? null : tempDir();
  const dataDir = opts.dataDir ?? dir!.path;
  const config = loadConfig(
    { FENCEGATE_PORT: "0", FENCEGATE_DATA_DIR: dataDir, ...opts.env },
    withoutSdkMarks(opts.overrides ?? {}),
  );
  const gw = await startGateway(config, {
    clock: opts.clock,
    log: opts.log ?? createLogger(process.env.TEST_LOG_LEVEL ?? "silent"),
  });
  try {
    await waitForHealth(gw.url, { timeoutMs: 10_000 });
  } catch (e) {
    await gw.close();
    dir?.cleanup();
    throw e;
  }
  return Object.assign(gw, {
    dataDir,
    s3: (extra: Partial<S3ClientConfig> = {}) => s3Client(gw.url, extra),
    leases: new LeaseClient({ endpoint: gw.url, ...CREDENTIALS }),
    async stop() {
      await gw.close();
      dir?.cleanup();
    },
  });
}

export function s3Client(endpoint: string, extra: Partial<S3ClientConfig> = {}): S3Client {
  return new S3Client({
    endpoint,
    region: "us-east-1",
    forcePathStyle: true,
    credentials: CREDENTIALS,
    maxAttempts: 1,
    ...extra,
  });
}

/**
 * Resolves once `GET <url>/_fence/v1/health` answers 200; polls until then. Rejects after
 * `timeoutMs` (or as soon as `exited()` says the gateway's process is gone) with the last answer
 * or error and `output()`, the process's output so far, when given.
 */
export async function waitForHealth(
  url: string,
  opts: { timeoutMs?: number; output?: () => string; exited?: () => string | null } = {},
): Promise<void> {
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const deadline = Date.now() + timeoutMs;
  let last = "no answer yet";
  for (;;) {
    const gone = opts.exited?.() ?? null;
    if (gone !== null) last = gone;
    else {
      try {
        const res = await fetch(`${url}${HEALTH_PATH}`, { signal: AbortSignal.timeout(5_000) });
        const body = await res.text();
        if (res.status === 200) return;
        last = `${res.status} ${body.slice(0, 300)}`;
      } catch (e) {
        last = String((e as Error).cause ?? e);
      }
    }
    if (gone !== null || Date.now() > deadline) {
      const why = gone ?? `not healthy within ${timeoutMs} ms (last: ${last})`;
      const output = opts.output?.();
      throw new Error(`gateway at ${url}: ${why}${output !== undefined ? `\noutput:\n${output}` : ""}`);
    }
    await sleep(25);
  }
}

export type GatewayProcess = {
  url: string;
  child: ChildProcess;
  output(): string;
  kill(signal?: NodeJS.Signals): Promise<void>;
};

/**
 * A gateway in its own process (for SIGSTOP, kill -9 and restarts), on port 0 of 127.0.0.1.
 * The URL is read from the "fencegate listening on URL" line it prints; it is ready when its
 * health endpoint answers 200. Rejects, with the process's output, when it exits first or is
 * not healthy within `timeoutMs`. `entry`: the script to run instead of the sources (it is given
 * `serve`), e.g. the bin/fencegate.js of a packed copy that runs the compiled dist/.
 */
export async function spawnGateway(
  dataDir: string,
  env: Record<string, string> = {},
  opts: { timeoutMs?: number; entry?: string } = {},
): Promise<GatewayProcess> {
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const started = Date.now();
  const script = opts.entry ? [opts.entry] : ["--import", "tsx", join(ROOT, "src/cli/main.ts")];
  const child = spawn(process.execPath, [...script, "serve"], {
    cwd: ROOT,
    env: {
      ...process.env,
      FENCEGATE_PORT: "0",
      FENCEGATE_DATA_DIR: dataDir,
      FENCEGATE_LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? "warn",
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  trackChild(child);
  let out = "";
  child.stdout!.on("data", (d) => {
    out += d;
  });
  child.stderr!.on("data", (d) => {
    out += d;
  });
  let exit: string | null = null;
  const exited = new Promise<void>((res) => {
    child.once("exit", (code, signal) => {
      exit = `exited (${signal ?? `code ${code}`}) before it was healthy`;
      res();
    });
  });
  const fail = async (why: string) => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    await exited;
    return new Error(`gateway process ${child.pid} ${why}\noutput:\n${out}`);
  };
  // The URL (the port is the kernel's choice) from the line the gateway prints once it listens.
  let url: string | undefined;
  while (url === undefined) {
    url = /fencegate listening on (http:\/\/\S+)/.exec(out)?.[1];
    if (url !== undefined) break;
    if (exit !== null) throw await fail(exit);
    if (Date.now() - started > timeoutMs) throw await fail(`printed no URL within ${timeoutMs} ms`);
    await sleep(10);
  }
  try {
    await waitForHealth(url, {
      timeoutMs: Math.max(1_000, timeoutMs - (Date.now() - started)),
      exited: () => exit,
    });
  } catch (e) {
    throw await fail((e as Error).message);
  }
  return {
    url,
    child,
    output: () => out,
    async kill(signal: NodeJS.Signals = "SIGTERM") {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      await exited;
    },
  };
}

/**
 * The AWS SDK marks a credentials object it was given with a `$source` property; a test that
 * passed CREDENTIALS to an S3Client and then to a gateway's `credentials:` would be refused by
 * the configuration's strict schema (with --no-isolate, even across test files).
 */
function withoutSdkMarks(overrides: Record<string, unknown>): Record<string, unknown> {
  const credentials = overrides.credentials;
  if (!Array.isArray(credentials)) return overrides;
  return {
    ...overrides,
    credentials: credentials.map((c: Record<string, unknown>) =>
      Object.fromEntries(Object.entries(c).filter(([k]) => !k.startsWith("$"))),
    ),
  };
}
