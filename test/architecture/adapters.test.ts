import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";
import { tempDir } from "../support/temp.js";

/**
 * The lease adapters stand side by side: no file of one adapter folder under src/leases imports a
 * file of another, and no file under src/leases imports the Redis audit log (src/audit/redis).
 * What two adapters share lives in a folder of its own (src/leases/redis-shared, or src/core),
 * which imports no adapter either. The audit log adapters (src/audit) likewise. Every relative
 * import counts (static, type-only, re-exports, dynamic import(), across lines), resolved to the
 * file it names.
 */

const ROOT = resolve(import.meta.dirname, "../..");

/**
 * Per contract folder under src/: its adapter folders (each an implementation of its own), the
 * folders its adapters share (imported by any adapter, importing none), and what none of its
 * files may import.
 */
type Family = { adapters: readonly string[]; shared: readonly string[]; forbidden: readonly string[] };
const LEASES: Family = {
  adapters: ["embedded", "redis", "redlock"],
  shared: ["redis-shared"],
  forbidden: ["audit/redis/"],
};
const AUDIT: Family = { adapters: ["embedded", "redis"], shared: [], forbidden: [] };

/**
 * Imports between adapters tolerated for now (`from -> to` folders): none. The test fails when
 * one listed here is gone, so that this list only shrinks.
 */
const KNOWN_CROSSINGS: readonly string[] = [];

function sourceFiles(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(path);
    return e.isFile() && e.name.endsWith(".ts") && !e.name.endsWith(".d.ts") ? [path] : [];
  });
}

/**
 * The imports of the files under `root`/src/`family` that break the rule, as `file:line imports
 * target (why)`; its subfolders that are neither adapters nor shared; and the folder pairs
 * (`leases/a -> leases/b`) that cross, KNOWN_CROSSINGS included.
 */
function adapterImportProblems(
  root: string,
  family: "leases" | "audit",
  { adapters, shared, forbidden }: Family,
) {
  const src = join(root, "src");
  const leases = join(src, family);
  const rel = (p: string) => relative(src, p).split(sep).join("/");
  /** The subfolder of src/leases a file is in (`redis`, `redis-shared`, …), or null (src/leases itself). */
  const folderOf = (file: string) => {
    const parts = relative(leases, file).split(sep);
    return parts.length > 1 && !parts[0]!.startsWith("..") ? parts[0]! : null;
  };
  const isAdapter = (f: string | null) => f !== null && adapters.includes(f);
  const problems: string[] = [];
  const crossings = new Set<string>();
  const unclassified = existsSync(leases)
    ? readdirSync(leases, { withFileTypes: true })
        .filter((e) => e.isDirectory())
        .map((e) => e.name)
        .filter((n) => !isAdapter(n) && !shared.includes(n))
    : [];
  for (const file of sourceFiles(leases)) {
    const from = folderOf(file);
    if (from === null) continue;
    const text = readFileSync(file, "utf8");
    for (const ref of ts.preProcessFile(text, true, true).importedFiles) {
      if (!ref.fileName.startsWith(".")) continue;
      const line = text.slice(0, ref.pos).split("\n").length;
      const target = resolve(dirname(file), ref.fileName).replace(/\.js$/, ".ts");
      const where = `${rel(file)}:${line} imports ${rel(target)}`;
      const banned = forbidden.find((f) => rel(target).startsWith(f));
      if (banned) {
        problems.push(`${where} (${banned} is not for ${family}/; share through src/core)`);
        continue;
      }
      const to = folderOf(target);
      if (to === null || to === from || !isAdapter(to)) continue;
      const crossing = `${family}/${from} -> ${family}/${to}`;
      crossings.add(crossing);
      if (!KNOWN_CROSSINGS.includes(crossing)) {
        problems.push(
          `${where} (${isAdapter(from) ? "another adapter" : "an adapter, from a shared folder"})`,
        );
      }
    }
  }
  return { problems, unclassified, crossings: [...crossings].sort() };
}

describe("the lease adapters", () => {
  const report = adapterImportProblems(ROOT, "leases", LEASES);

  it("import neither each other nor the Redis audit log", () => {
    expect(report.problems, `imports across lease adapters:\n${report.problems.join("\n")}`).toEqual([]);
  });

  it("are every subfolder of src/leases but the shared ones", () => {
    expect(report.unclassified, "add each to LEASES.adapters or LEASES.shared").toEqual([]);
  });

  it("still cross where KNOWN_CROSSINGS says (the list only shrinks)", () => {
    const gone = KNOWN_CROSSINGS.filter((k) => !report.crossings.includes(k));
    expect(gone, "gone: remove them from KNOWN_CROSSINGS").toEqual([]);
  });

  it("Redis and Redlock share only through src/leases/redis-shared", () => {
    // Not vacuous: both import the shared folder.
    const importsShared = (adapter: string) =>
      sourceFiles(join(ROOT, "src/leases", adapter)).some((f) =>
        /from "\.\.\/(\.\.\/)?redis-shared\//.test(readFileSync(f, "utf8")),
      );
    expect([importsShared("redis"), importsShared("redlock")]).toEqual([true, true]);
  });
});

describe("the audit log adapters", () => {
  it("import neither each other nor anything of another adapter, and are every subfolder of src/audit", () => {
    const report = adapterImportProblems(ROOT, "audit", AUDIT);
    expect(report.problems, `imports across audit adapters:\n${report.problems.join("\n")}`).toEqual([]);
    expect(report.unclassified).toEqual([]);
    expect(report.crossings).toEqual([]);
  });
});

describe("the adapter check itself", () => {
  it("reports an adapter importing another, a shared folder importing an adapter, and the Redis audit log", () => {
    const dir = tempDir("fencegate-lease-adapters-");
    try {
      const files: Record<string, string> = {
        "src/leases/lease-store.ts": "export type X = number;\n",
        "src/leases/redis/a.ts":
          'import type { X } from "../lease-store.js";\nimport { s } from "../redis-shared/s.js";\n' +
          'import {\n  q,\n} from "../redlock/q.js";\nexport const a: X = s + q;\n',
        "src/leases/redlock/q.ts":
          'export const q = 1;\nexport const later = () => import("../embedded/e.js");\n',
        "src/leases/redlock/lua/deep.ts": 'export { a } from "../../redis/a.js";\n',
        "src/leases/redis-shared/s.ts":
          'import type { Y } from "../../audit/redis/log.js";\nexport const s = 1;\n',
        "src/leases/redis-shared/t.ts": 'import { a } from "../redis/a.js";\nexport const t = a;\n',
        "src/leases/embedded/e.ts": "export const e = 1;\n",
        "src/leases/mystery/z.ts": "export const z = 1;\n",
        "src/audit/redis/log.ts": "export type Y = string;\n",
      };
      for (const [path, text] of Object.entries(files)) {
        mkdirSync(dirname(join(dir.path, path)), { recursive: true });
        writeFileSync(join(dir.path, path), text);
      }
      const report = adapterImportProblems(dir.path, "leases", LEASES);
      expect(report.problems.sort()).toEqual([
        "leases/redis-shared/s.ts:1 imports audit/redis/log.ts (audit/redis/ is not for leases/; share through src/core)",
        "leases/redis-shared/t.ts:1 imports leases/redis/a.ts (an adapter, from a shared folder)",
        "leases/redis/a.ts:5 imports leases/redlock/q.ts (another adapter)",
        "leases/redlock/lua/deep.ts:1 imports leases/redis/a.ts (another adapter)",
        "leases/redlock/q.ts:2 imports leases/embedded/e.ts (another adapter)",
      ]);
      expect(report.unclassified).toEqual(["mystery"]);
    } finally {
      dir.cleanup();
    }
  });
});
