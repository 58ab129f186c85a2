import { spawnSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { Md5Thread } from "../../src/core/md5-thread.js";

describe("Md5Thread", () => {
  it("gives the MD5 of every byte, whatever the chunk sizes, for bodies hashed side by side", async () => {
    const bodies = [0, 1, 300_000, 3_000_001].map((n) => randomBytes(n));
    const digests = await Promise.all(
      bodies.map(async (body) => {
        const md5 = new Md5Thread();
        for (let at = 0; at < body.length; ) {
          const n = 1 + Math.floor(Math.random() * 100_000);
          if (!md5.update(body.subarray(at, at + n))) await md5.drained();
          at += n;
        }
        return md5.digest();
      }),
    );
    expect(digests).toEqual(bodies.map((b) => createHash("md5").update(b).digest("hex")));
  });

  it("copies what it is given: a buffer reused by the caller after update does not change the digest", async () => {
    const md5 = new Md5Thread();
    const chunk = Buffer.alloc(300_000, 1);
    md5.update(chunk);
    chunk.fill(2);
    md5.update(chunk);
    const expected = createHash("md5").update(Buffer.alloc(300_000, 1)).update(Buffer.alloc(300_000, 2));
    expect(await md5.digest()).toBe(expected.digest("hex"));
  });

  it("asks the caller to wait once a megabyte is in flight, and lets it go on once hashed", async () => {
    const md5 = new Md5Thread();
    const chunk = randomBytes(256 * 1024);
    let pushed = 0;
    while (pushed < 100 && md5.update(chunk)) pushed++;
    // Batches are sent at 256 KiB: the fourth one reaches the bound.
    expect(pushed).toBe(3);
    await md5.drained();
    expect(md5.update(Buffer.alloc(0))).toBe(true);
    const expected = createHash("md5");
    for (let i = 0; i <= pushed; i++) expected.update(chunk);
    expect(await md5.digest()).toBe(expected.digest("hex"));
  });

  it("forgets a cancelled body, and an idle worker does not keep the process alive", () => {
    // A child process that hashes one body, cancels another and returns: it must exit by itself.
    const script = `
      import { Md5Thread } from ${JSON.stringify(new URL("../../src/core/md5-thread.ts", import.meta.url).href)};
      const a = new Md5Thread(); a.update(Buffer.alloc(500000, 3)); a.cancel();
      const b = new Md5Thread(); b.update(Buffer.from("abc"));
      console.log(await b.digest());
    `;
    const dir = mkdtempSync(join(tmpdir(), "fencegate-md5-"));
    const file = join(dir, "hash.mjs");
    writeFileSync(file, script);
    const run = spawnSync(process.execPath, ["--import", "tsx", file], { encoding: "utf8", timeout: 15_000 });
    rmSync(dir, { recursive: true, force: true });
    expect(run.error).toBeUndefined();
    expect(run.status).toBe(0);
    expect(run.stdout.trim()).toBe("900150983cd24fb0d6963f7d28e17f72");
  });
});
