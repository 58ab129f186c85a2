import { spawnSync } from "node:child_process";
import { accessSync, constants } from "node:fs";
import { beforeAll } from "vitest";

/**
 * The programs outside Node.js that some suites run, each with the Debian package that provides
 * it. scripts/install-test-deps.sh installs them all (.ci/run calls it). Absolute paths: another
 * `aws` or `python3` (pyenv, pip) may come first on PATH, and it is Debian's that the suites test.
 */
export const TOOLS = {
  aws: { path: "/usr/bin/aws", debianPackage: "awscli" },
  s3cmd: { path: "/usr/bin/s3cmd", debianPackage: "s3cmd" },
  rclone: { path: "/usr/bin/rclone", debianPackage: "rclone" },
  /** Debian's python3 with Debian's boto3 (a python3 from pyenv does not see Debian's packages). */
  boto3: { path: "/usr/bin/python3", debianPackage: "python3-boto3", probe: ["-c", "import boto3"] },
  "redis-server": { path: "/usr/bin/redis-server", debianPackage: "redis-server" },
  curl: { path: "/usr/bin/curl", debianPackage: "curl" },
  /** Headless, for the console's end-to-end test (driven by playwright-core). */
  chromium: { path: "/usr/bin/chromium", debianPackage: "chromium", probe: ["--version"] },
  /** Lua 5.1 (the Lua of Redis) syntax check of the scripts under src/ (luac5.1 -p). */
  "luac5.1": { path: "/usr/bin/luac5.1", debianPackage: "lua5.1", probe: ["-v"] },
} as const satisfies Record<string, Tool>;

export type ToolName = keyof typeof TOOLS;

export type Tool = { path: string; debianPackage: string; probe?: readonly string[] };

/** The one-line reason a tool cannot be used, or null when it can. */
export function toolProblem(name: ToolName): string | null {
  return problemOf(TOOLS[name]);
}

/**
 * The one-line reason a program cannot be used (not executable at its path, or its probe, run
 * in a clean environment, exits non-zero), naming its Debian package; null when it can.
 */
export function problemOf(tool: Tool): string | null {
  const install = `install the Debian package ${tool.debianPackage} (scripts/install-test-deps.sh does)`;
  try {
    accessSync(tool.path, constants.X_OK);
  } catch {
    return `${tool.path} is missing: ${install}`;
  }
  if (tool.probe) {
    // In a clean environment, as the suites run their clients.
    const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", LANG: "C.UTF-8" };
    const probe = spawnSync(tool.path, tool.probe, { env, stdio: "ignore", timeout: 30_000 });
    const command = [tool.path, ...tool.probe].map((a) => (/^[\w./=-]+$/.test(a) ? a : `'${a}'`)).join(" ");
    if (probe.status !== 0) return `${command} fails: ${install}`;
  }
  return null;
}

/** Throws (one line naming the Debian package) when a tool is missing; never skips. */
export function requireTool(name: ToolName): void {
  const problem = toolProblem(name);
  if (problem !== null) throw new Error(problem);
}

/**
 * Registers a beforeAll that fails the suite at once, with one line naming the Debian package,
 * when one of the tools is missing: the suite's tests are then not run at all. Call it at the
 * top of the file (or of the describe), before the hooks that start anything.
 */
export function requireTools(...names: ToolName[]): void {
  beforeAll(() => {
    for (const name of names) requireTool(name);
  });
}
