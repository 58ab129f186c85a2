import { type ChildProcess, spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";

/**
 * The servers a benchmark compares, each in its own process (so that none shares the load
 * generator's event loop): fencegate, the direct fsync+rename server, s3rver, and a Hono
 * hello-world.
 */

export const ROOT = resolve(import.meta.dirname, "../..");
export const FENCEGATE_CREDS = { accessKeyId: "fencegate", secretAccessKey: "fencegate-secret" };
/** s3rver's built-in credentials. */
export const S3RVER_CREDS = { accessKeyId: "S3RVER", secretAccessKey: "S3RVER" };

export type Server = { name: string; url: string; pid: number; stop(): Promise<void> };

function waitForLine(
  child: ChildProcess,
  pattern: RegExp,
  what: string,
  timeoutMs = 30_000,
): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    let out = "";
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${what} did not start within ${timeoutMs} ms:\n${out}`));
    }, timeoutMs);
    const onData = (d: Buffer) => {
      out += d;
      const m = pattern.exec(out);
      if (m) {
        clearTimeout(timer);
        child.stdout?.off("data", onData);
        child.stderr?.off("data", onData);
        // Keep draining: a full pipe would block the child.
        child.stdout?.resume();
        child.stderr?.resume();
        resolvePromise(m[1] ?? m[0]);
      }
    };
    child.stdout!.on("data", onData);
    // The gateway prints its banner on stderr (stdout is its JSON log).
    child.stderr!.on("data", onData);
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited (${signal ?? code}) before it started:\n${out}`));
    });
  });
}

function stopper(child: ChildProcess): () => Promise<void> {
  return async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((r) => child.once("exit", () => r()));
    child.kill("SIGTERM");
    const force = setTimeout(() => child.kill("SIGKILL"), 15_000);
    await exited;
    clearTimeout(force);
  };
}

/** Extra node flags for the servers, e.g. `--cpu-prof` (FENCEGATE_BENCH_NODE_ARGS, space-separated). */
const nodeArgs = (process.env.FENCEGATE_BENCH_NODE_ARGS ?? "").split(" ").filter(Boolean);

const tsx = (script: string, args: string[], env: NodeJS.ProcessEnv = {}, flags: string[] = []) =>
  spawn(process.execPath, [...flags, "--import", "tsx", script, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });

export async function startFencegate(
  dataDir: string,
  env: Record<string, string> = {},
  name = "fencegate",
): Promise<Server> {
  const child = tsx(
    join(ROOT, "src/cli/main.ts"),
    ["serve"],
    { FENCEGATE_PORT: "0", FENCEGATE_DATA_DIR: dataDir, FENCEGATE_LOG_LEVEL: "warn", ...env },
    nodeArgs,
  );
  const url = await waitForLine(child, /fencegate listening on (http:\/\/\S+)/, name);
  return { name, url, pid: child.pid!, stop: stopper(child) };
}

export async function startDirect(root: string): Promise<Server> {
  const child = tsx(join(ROOT, "benchmarks/direct-server.ts"), [root]);
  const url = await waitForLine(child, /listening on (http:\/\/\S+)/, "direct server");
  return { name: "direct", url, pid: child.pid!, stop: stopper(child) };
}

export async function startHonoHello(): Promise<Server> {
  const child = tsx(join(ROOT, "benchmarks/hono-hello.ts"), []);
  const url = await waitForLine(child, /listening on (http:\/\/\S+)/, "hono hello-world");
  return { name: "hono", url, pid: child.pid!, stop: stopper(child) };
}

export async function startS3rver(dir: string): Promise<Server> {
  const child = spawn(
    process.execPath,
    [join(ROOT, "node_modules/s3rver/bin/s3rver.js"), "-d", dir, "-a", "127.0.0.1", "-p", "0", "--silent"],
    {
      cwd: ROOT,
      // s3rver's dependencies still use MD4/legacy OpenSSL algorithms.
      env: { ...process.env, NODE_OPTIONS: "--openssl-legacy-provider" },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  const port = await waitForLine(child, /S3rver listening on [^:]+:(\d+)/, "s3rver");
  return { name: "s3rver", url: `http://127.0.0.1:${port}`, pid: child.pid!, stop: stopper(child) };
}

/** Resident set size of a process, in bytes (Linux /proc). */
export function rssOf(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = /VmRSS:\s+(\d+) kB/.exec(status);
  if (!kb) throw new Error(`no VmRSS for ${pid}`);
  return Number(kb[1]) * 1024;
}

/**
 * CPU time (user + system) a process has used so far, in milliseconds (Linux /proc). Less
 * sensitive than a rate to other load on the machine: what an operation costs the gateway.
 */
export function cpuMsOf(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  // utime and stime: fields 14 and 15 of stat, in clock ticks (100 a second on Linux).
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/**
 * CPU time (user + system, milliseconds) used so far by a server process and every process
 * below it (children, their children), read from /proc/<pid>/stat: a server that forks helpers
 * is charged for them too.
 */
export function cpuMsOfTree(pid: number): number {
  const stats = new Map<number, { ppid: number; ms: number }>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let text: string;
    try {
      text = readFileSync(`/proc/${entry}/stat`, "utf8");
    } catch {
      continue; // exited meanwhile
    }
    const fields = text.slice(text.lastIndexOf(") ") + 2).split(" ");
    stats.set(Number(entry), { ppid: Number(fields[1]), ms: (Number(fields[11]) + Number(fields[12])) * 10 });
  }
  if (!stats.has(pid)) throw new Error(`no process ${pid}`);
  let total = 0;
  const tree = new Set([pid]);
  // Parents have lower pids than their children only until pids wrap: iterate until stable.
  for (let grew = true; grew; ) {
    grew = false;
    for (const [p, s] of stats) {
      if (!tree.has(p) && tree.has(s.ppid)) {
        tree.add(p);
        grew = true;
      }
    }
  }
  for (const p of tree) total += stats.get(p)!.ms;
  return total;
}
