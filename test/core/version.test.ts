import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { readVersion, VERSION } from "../../src/core/version.js";
import { ROOT, tempDir } from "../support/gateway.js";

const packageVersion = (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string })
  .version;

describe("VERSION", () => {
  const dirs: { cleanup(): void }[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) d.cleanup();
  });

  /** A directory tree with these package.json files (path -> contents) and the given folders. */
  function tree(files: Record<string, unknown>, folders: string[]): string {
    const dir = tempDir("fencegate-version-");
    dirs.push(dir);
    for (const folder of folders) mkdirSync(join(dir.path, folder), { recursive: true });
    for (const [path, pkg] of Object.entries(files)) writeFileSync(join(dir.path, path), JSON.stringify(pkg));
    return dir.path;
  }

  it("is the version in package.json", () => {
    expect(VERSION).toBe(packageVersion);
    expect(readVersion(join(ROOT, "src", "core"))).toBe(packageVersion);
  });

  it("is found from src/core and from dist/core alike, walking up to fencegate's package.json", () => {
    const root = tree({ "package.json": { name: "fencegate", version: "9.8.7" } }, ["src/core", "dist/core"]);
    expect(readVersion(join(root, "src", "core"))).toBe("9.8.7");
    expect(readVersion(join(root, "dist", "core"))).toBe("9.8.7");
  });

  it("passes over another package's package.json and unreadable ones", () => {
    const root = tree(
      {
        "package.json": { name: "fencegate", version: "1.2.3" },
        "dist/package.json": { name: "other", version: "0.0.1" },
      },
      ["dist/core"],
    );
    writeFileSync(join(root, "dist", "core", "package.json"), "{ not json");
    expect(readVersion(join(root, "dist", "core"))).toBe("1.2.3");
  });

  it("is 'unknown' when there is no fencegate package.json above", () => {
    const root = tree({ "package.json": { name: "something-else", version: "4.0.0" } }, ["dist/core"]);
    expect(readVersion(join(root, "dist", "core"))).toBe("unknown");
  });
});
