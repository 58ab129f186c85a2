import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { ROOT } from "../support/gateway.js";

/** `fencegate --version` of the real CLI (node --import tsx src/cli/main.ts), as bin/fencegate.js runs it. */

const run = promisify(execFile);
const { version } = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string };

describe("fencegate --version", () => {
  it("prints the version in package.json", async () => {
    const { stdout, stderr } = await run(process.execPath, [join(ROOT, "bin/fencegate.js"), "--version"], {
      cwd: ROOT,
    });
    expect(stdout).toBe(`fencegate ${version}\n`);
    expect(stderr).toBe("");
  });

  it("takes no arguments: an extra one is a usage error (exit 2)", async () => {
    const extra = await run(
      process.execPath,
      ["--import", "tsx", join(ROOT, "src/cli/main.ts"), "version", "--x"],
      {
        cwd: ROOT,
      },
    ).then(
      () => null,
      (e: { code?: number; stdout?: string; stderr?: string }) => e,
    );
    expect(extra).toMatchObject({ code: 2, stdout: "" });
    expect(extra?.stderr).toContain("--x");
  });
});
