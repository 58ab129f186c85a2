import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const exec = promisify(execFile);
const ROOT = join(import.meta.dirname, "../..");

/**
 * The README's quick start, run line by line in a copy of the repository by
 * scripts/newcomer.mjs (this checkout's node_modules linked in; .ci/run also runs it with
 * `npm ci`, as a newcomer does): the gateway starts, B's fenced write is accepted, A's stale
 * write is refused with StaleFencingToken, and the audit log lists both.
 */
describe("the newcomer's path through the README", () => {
  it("runs as written: the stale write is refused and audited", async () => {
    const { stdout } = await exec(
      process.execPath,
      [join(ROOT, "scripts/newcomer.mjs"), "--reuse-node-modules"],
      {
        cwd: ROOT,
        timeout: 300_000,
        maxBuffer: 16 * 1024 * 1024,
      },
    ).catch((e: { stdout?: string; stderr?: string; message: string }) => {
      throw new Error(`scripts/newcomer.mjs failed: ${e.message}\n${e.stdout ?? ""}\n${e.stderr ?? ""}`);
    });
    expect(stdout).toMatch(/# refused: StaleFencingToken[^\n]*\n {2}exit [1-9]/);
    expect(stdout).toContain("newcomer: ok");
  }, 320_000);
});
