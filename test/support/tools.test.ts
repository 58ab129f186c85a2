import { describe, expect, it } from "vitest";
import { problemOf, TOOLS } from "./tools.js";

describe("the guard of suites that run external programs", () => {
  it("names the Debian package, in one line, when the program is missing", () => {
    const problem = problemOf({ path: "/usr/bin/no-such-program-here", debianPackage: "no-such-package" });
    expect(problem).toBe(
      "/usr/bin/no-such-program-here is missing: install the Debian package no-such-package (scripts/install-test-deps.sh does)",
    );
  });

  it("runs the probe and names the package when it fails (python3 without boto3, say)", () => {
    const failing = problemOf({ path: "/bin/sh", debianPackage: "dash", probe: ["-c", "exit 3"] });
    expect(failing).toBe(
      "/bin/sh -c 'exit 3' fails: install the Debian package dash (scripts/install-test-deps.sh does)",
    );
    expect(problemOf({ path: "/bin/sh", debianPackage: "dash", probe: ["-c", "exit 0"] })).toBeNull();
  });

  it("knows the Debian package of every program a suite runs", () => {
    expect(Object.fromEntries(Object.entries(TOOLS).map(([name, t]) => [name, t.debianPackage]))).toEqual({
      aws: "awscli",
      s3cmd: "s3cmd",
      rclone: "rclone",
      boto3: "python3-boto3",
      "redis-server": "redis-server",
      curl: "curl",
      chromium: "chromium",
      "luac5.1": "lua5.1",
    });
  });
});
