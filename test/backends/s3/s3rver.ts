import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";
import { ROOT, tempDir } from "../../support/gateway.js";
import { trackChild } from "../../support/processes.js";
import { waitFor } from "../../support/wait.js";

/** s3rver accepts only its own access key (it does not check signatures). */
export const S3RVER_CREDENTIALS = { accessKeyId: "S3RVER", secretAccessKey: "S3RVER" };

/**
 * s3rver (npm) in a child process on a random port: an S3 emulator that ignores If-Match and
 * If-None-Match on PUT, the example of a store fencegate must refuse to write to. It needs the
 * legacy OpenSSL provider (its continuation tokens use DES).
 */
export async function startS3rver(): Promise<{ url: string; stop(): Promise<void> }> {
  const dir = tempDir("fencegate-s3rver-");
  const child: ChildProcess = spawn(
    process.execPath,
    [join(ROOT, "node_modules/s3rver/bin/s3rver.js"), "-d", dir.path, "-a", "127.0.0.1", "-p", "0", "-s"],
    {
      env: { ...process.env, NODE_OPTIONS: "--openssl-legacy-provider" },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  trackChild(child);
  let out = "";
  child.stdout!.on("data", (d) => {
    out += d;
  });
  child.stderr!.on("data", (d) => {
    out += d;
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const port = await waitFor(
    () => /S3rver listening on [\d.]+:(\d+)/.exec(out)?.[1] ?? (child.exitCode !== null ? "exit" : null),
    {
      what: "s3rver to listen",
      timeoutMs: 20_000,
      details: () => out,
    },
  );
  if (port === "exit") throw new Error(`s3rver exited:\n${out}`);
  return {
    url: `http://127.0.0.1:${port}`,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      await exited;
      dir.cleanup();
    },
  };
}
