import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { S3Client, type S3ClientConfig } from "@aws-sdk/client-s3";
import { LeaseClient } from "../../src/client/lease-client.js";
import { loadConfig } from "../../src/config/load.js";
import { DEV_ACCESS_KEY_ID, DEV_SECRET_ACCESS_KEY } from "../../src/config/resolve.js";
import type { Clock } from "../../src/core/clock.js";
import { createLogger } from "../../src/log.js";
import { type Gateway, startGateway } from "../../src/server/gateway.js";

export const ROOT = resolve(import.meta.dirname, "../..");
export const CREDENTIALS = { accessKeyId: DEV_ACCESS_KEY_ID, secretAccessKey: DEV_SECRET_ACCESS_KEY };

export function tempDir(prefix = "fencegate-test-"): { path: string; cleanup(): void } {
  const path = mkdtempSync(join(tmpdir(), prefix));
  return { path, cleanup: () => rmSync(path, { recursive: true, force: true }) };
}

export type TestGateway = Gateway & {
  dataDir: string;
  s3(config?: Partial<S3ClientConfig>): S3Client;
  leases: LeaseClient;
  stop(): Promise<void>;
};

/** A gateway in this process on 127.0.0.1:0 with its own data directory. */
export async function startTestGateway(
  opts: {
    env?: Record<string, string>;
    overrides?: Record<string, unknown>;
    clock?: Clock;
    dataDir?: string;
  } = {},
): Promise<TestGateway> {
  const dir = opts.dataDir ? null : tempDir();
  const dataDir = opts.dataDir ?? dir!.path;
  const config = loadConfig(
    { FENCEGATE_PORT: "0", FENCEGATE_DATA_DIR: dataDir, ...opts.env },
    opts.overrides ?? {},
  );
  const gw = await startGateway(config, {
    clock: opts.clock,
    log: createLogger(process.env.TEST_LOG_LEVEL ?? "silent"),
  });
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

export type GatewayProcess = {
  url: string;
  child: ChildProcess;
  output(): string;
  kill(signal?: NodeJS.Signals): Promise<void>;
};

/** A gateway in its own process (for SIGSTOP, kill -9 and restarts). */
export async function spawnGateway(
  dataDir: string,
  env: Record<string, string> = {},
): Promise<GatewayProcess> {
  const child = spawn(process.execPath, ["--import", "tsx", join(ROOT, "src/cli/main.ts"), "serve"], {
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
  let out = "";
  child.stdout!.on("data", (d) => {
    out += d;
  });
  child.stderr!.on("data", (d) => {
    out += d;
  });
  const exited = new Promise<void>((res) => child.once("exit", () => res()));
  const url = await new Promise<string>((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`gateway did not start:\n${out}`)), 30_000);
    const check = () => {
      const m = /fencegate listening on (http:\/\/\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        res(m[1]!);
      }
    };
    child.stdout!.on("data", check);
    child.once("exit", (code) => {
      clearTimeout(timer);
      rej(new Error(`gateway exited with ${code} before listening:\n${out}`));
    });
  });
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
