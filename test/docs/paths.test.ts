import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

/**
 * Every repository path the README and docs/*.md name exists: relative links (resolved from the
 * page, with their #anchor checked against the target page's headings) and paths in backticks
 * that start with one of the repository's folders (resolved from the repository's root).
 */

const ROOT = resolve(import.meta.dirname, "../..");
const PAGES = [
  "README.md",
  ...readdirSync(join(ROOT, "docs"), { withFileTypes: true })
    .filter((e) => e.isFile() && e.name.endsWith(".md"))
    .map((e) => `docs/${e.name}`),
].sort();
const FOLDERS = ["src", "test", "benchmarks", "config", "docs", "deploy", "scripts", "bin", ".ci"];
const PATH_IN_CODE = new RegExp(`^(?:${FOLDERS.map((f) => f.replace(".", "\\.")).join("|")})/[\\w./@-]*$`);

/** Headings as GitHub turns them into anchors (lower case, punctuation dropped, spaces to hyphens). */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const [, text] of withoutFences(markdown).matchAll(/^#{1,6}\s+(.+?)\s*#*$/gm)) {
    const base = text!
      .replace(/`/g, "")
      .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, "")
      .replace(/\s/g, "-");
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

function withoutFences(markdown: string): string {
  return markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, "");
}

type Ref = { page: string; ref: string; problem: string };

function brokenReferences(root: string, pages: readonly string[]): Ref[] {
  const broken: Ref[] = [];
  for (const page of pages) {
    const text = withoutFences(readFileSync(join(root, page), "utf8"));
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target!)) continue; // https:, mailto:
      const [file, anchor] = target!.split("#") as [string, string | undefined];
      const path = file === "" ? join(root, page) : resolve(root, dirname(page), file);
      if (!existsSync(path)) {
        broken.push({ page, ref: target!, problem: `${relative(root, path)} does not exist` });
      } else if (anchor && path.endsWith(".md") && !anchors(readFileSync(path, "utf8")).has(anchor)) {
        broken.push({ page, ref: target!, problem: `no heading #${anchor} in ${relative(root, path)}` });
      }
    }
    for (const [, code] of text.matchAll(/`([^`\n]+)`/g)) {
      const path = code!.trim();
      if (!PATH_IN_CODE.test(path)) continue;
      if (!existsSync(join(root, path))) broken.push({ page, ref: path, problem: "does not exist" });
    }
  }
  return broken;
}

describe("the paths the README and docs/ name", () => {
  it("finds the pages and the paths in them", () => {
    expect(PAGES).toContain("README.md");
    expect(PAGES).toContain("docs/architecture.md");
    const named = PAGES.flatMap((p) =>
      [...withoutFences(readFileSync(join(ROOT, p), "utf8")).matchAll(/`([^`\n]+)`/g)]
        .map((m) => m[1]!.trim())
        .filter((c) => PATH_IN_CODE.test(c)),
    );
    // The check is not vacuous: the pages name many repository paths.
    expect(named.length).toBeGreaterThan(30);
  });

  it("all exist, and every link's anchor is a heading of its page", () => {
    expect(brokenReferences(ROOT, PAGES)).toEqual([]);
  });

  it("reports a path, a link and an anchor that do not exist", async () => {
    const { mkdtempSync, mkdirSync, writeFileSync, rmSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const dir = mkdtempSync(join(tmpdir(), "fencegate-docs-"));
    try {
      mkdirSync(join(dir, "docs"));
      mkdirSync(join(dir, "src"));
      writeFileSync(join(dir, "src/here.ts"), "");
      writeFileSync(join(dir, "docs/a.md"), "# A page\n\n## Two words\n");
      writeFileSync(
        join(dir, "README.md"),
        [
          "`src/here.ts` `src/gone.ts` [a](docs/a.md#two-words) [b](docs/b.md) [c](docs/a.md#three)",
          "```",
          "`src/in-a-fence.ts` is code, not a reference",
          "```",
        ].join("\n"),
      );
      expect(brokenReferences(dir, ["README.md", "docs/a.md"]).map((r) => r.ref)).toEqual([
        "docs/b.md",
        "docs/a.md#three",
        "src/gone.ts",
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
