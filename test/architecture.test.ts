import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";
import { tempDir } from "./support/temp.js";

/**
 * The import structure of src/: every relative import of every src/**\/*.ts file (static,
 * type-only, re-exports and dynamic import() alike) is an edge of the file graph, and of the
 * folder graph (a folder is a file's directory: src/leases and src/leases/embedded are two).
 * Neither graph may have a cycle. And the top-level folders of src/ are layered: a file may
 * import from its own top-level folder or from one of lower or equal rank, never upwards.
 */

const ROOT = resolve(import.meta.dirname, "..");

/**
 * The layers, lowest first: read from the layer table of docs/architecture.md (rows
 * `| rank | \`folder/\` | … |`; rows of subfolders such as `leases/redlock/` only describe), so
 * the table is written once, there. A top-level folder of src/ not listed there fails the test.
 */
function layerRanks(): Readonly<Record<string, number>> {
  const doc = readFileSync(join(ROOT, "docs/architecture.md"), "utf8");
  const ranks: Record<string, number> = {};
  for (const [, rank, folder] of doc.matchAll(/^\| (\d+) \| `([a-z0-9-]+)\/` \|/gm)) {
    if (folder! in ranks) throw new Error(`docs/architecture.md ranks ${folder}/ twice`);
    ranks[folder!] = Number(rank);
  }
  if (Object.keys(ranks).length < 10) throw new Error("docs/architecture.md: the layer table was not found");
  return ranks;
}

const RANKS = layerRanks();

/**
 * Folder cycles that src/ has today, to be untangled; each is the set of folders of one tangle.
 * The test fails when one of them is gone, so that this list only shrinks. None are left.
 */
const KNOWN_FOLDER_TANGLES: readonly (readonly string[])[] = [];

type Import = { from: string; to: string; line: number; specifier: string };
type Graph = Map<string, Set<string>>;

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .flatMap((entry) => {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) return sourceFiles(path);
      return entry.isFile() && entry.name.endsWith(".ts") && !entry.name.endsWith(".d.ts") ? [path] : [];
    })
    .sort();
}

/** The file a relative specifier names, as NodeNext resolves it from TypeScript sources. */
function resolveSpecifier(from: string, specifier: string): string | null {
  const target = resolve(dirname(from), specifier);
  const candidates = [target.replace(/\.js$/, ".ts"), target, `${target}.ts`, join(target, "index.ts")];
  // A JSON module (import … with { type: "json" }) is a file too.
  return candidates.find((c) => /\.(ts|json)$/.test(c) && existsSync(c)) ?? null;
}

function addEdge(graph: Graph, from: string, to: string) {
  if (!graph.has(from)) graph.set(from, new Set());
  if (!graph.has(to)) graph.set(to, new Set());
  graph.get(from)!.add(to);
}

/**
 * The cycles a depth-first search closes (one per back edge), each once, starting from its
 * smallest node: at least one in every tangle, which is what a report needs.
 */
function findCycles(graph: Graph): string[][] {
  const cycles = new Map<string, string[]>();
  const state = new Map<string, "open" | "done">();
  const stack: string[] = [];
  const visit = (node: string) => {
    state.set(node, "open");
    stack.push(node);
    for (const next of [...(graph.get(node) ?? [])].sort()) {
      if (state.get(next) === "open") {
        const cycle = stack.slice(stack.indexOf(next));
        const start = cycle.indexOf([...cycle].sort()[0]!);
        const canonical = [...cycle.slice(start), ...cycle.slice(0, start)];
        cycles.set(canonical.join(" "), canonical);
      } else if (!state.has(next)) visit(next);
    }
    stack.pop();
    state.set(node, "done");
  };
  for (const node of [...graph.keys()].sort()) if (!state.has(node)) visit(node);
  return [...cycles.values()];
}

/** The strongly connected components that hold a cycle (Tarjan), each sorted: the tangles. */
function tangles(graph: Graph): string[][] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const onStack = new Set<string>();
  const stack: string[] = [];
  const out: string[][] = [];
  const connect = (v: string) => {
    index.set(v, counter);
    low.set(v, counter);
    counter++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        connect(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || graph.get(v)?.has(v)) out.push(component.sort());
    }
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) connect(v);
  return out.sort((x, y) => (x[0]! < y[0]! ? -1 : 1));
}

/** `a -> b -> c -> a`, one node a line, each step with `why(from, to)` when given. */
function describeCycle(cycle: string[], why?: (from: string, to: string) => string): string {
  return [...cycle, cycle[0]!]
    .map((node, k, all) => (k + 1 < all.length && why ? `${node}  (${why(node, all[k + 1]!)})` : node))
    .join("\n  -> ");
}

/**
 * Reads every src/**\/*.ts file under `root` and reports, as lines fit for a failure message:
 * imports that name no file, cycles between files, cycles between folders (but `knownTangles`),
 * known tangles that no longer exist, unranked top-level folders, and imports against `ranks`.
 */
function analyze(root: string, ranks: Readonly<Record<string, number>>, knownTangles = KNOWN_FOLDER_TANGLES) {
  const src = join(root, "src");
  const rel = (path: string) => relative(root, path).split(sep).join("/");
  const topLevel = (file: string) => {
    const parts = relative(src, file).split(sep);
    return parts.length > 1 ? parts[0]! : "(src itself)";
  };
  const files = sourceFiles(src);
  const imports: Import[] = [];
  const unresolved: string[] = [];
  for (const file of files) {
    const text = readFileSync(file, "utf8");
    for (const ref of ts.preProcessFile(text, true, true).importedFiles) {
      if (!ref.fileName.startsWith(".")) continue;
      const line = text.slice(0, ref.pos).split("\n").length;
      const to = resolveSpecifier(file, ref.fileName);
      if (to === null) unresolved.push(`${rel(file)}:${line} imports "${ref.fileName}", which is not a file`);
      else if (to.startsWith(src + sep)) imports.push({ from: file, to, line, specifier: ref.fileName });
    }
  }

  const fileGraph: Graph = new Map(files.map((f) => [rel(f), new Set<string>()]));
  const folderGraph: Graph = new Map(files.map((f) => [rel(dirname(f)), new Set<string>()]));
  const witness = new Map<string, Import>();
  for (const i of imports) {
    addEdge(fileGraph, rel(i.from), rel(i.to));
    const [a, b] = [rel(dirname(i.from)), rel(dirname(i.to))];
    if (a === b) continue;
    addEdge(folderGraph, a, b);
    if (!witness.has(`${a} ${b}`)) witness.set(`${a} ${b}`, i);
  }
  const why = (a: string, b: string) => {
    const i = witness.get(`${a} ${b}`)!;
    return `${rel(i.from)}:${i.line} imports "${i.specifier}"`;
  };

  const known = new Set(knownTangles.map((t) => [...t].sort().join(" ")));
  const folderTangles = tangles(folderGraph).map((t) => t.join(" "));
  const inKnownTangle = (cycle: string[]) =>
    folderTangles.some((t) => known.has(t) && cycle.every((node) => t.split(" ").includes(node)));

  const upward = imports.filter((i) => {
    const [a, b] = [topLevel(i.from), topLevel(i.to)];
    return a !== b && ranks[a] !== undefined && ranks[b] !== undefined && ranks[b] > ranks[a];
  });
  return {
    files,
    imports,
    unresolved,
    fileCycles: findCycles(fileGraph).map((c) => describeCycle(c)),
    fileTangles: tangles(fileGraph),
    folderCycles: findCycles(folderGraph)
      .filter((c) => !inKnownTangle(c))
      .map((c) => describeCycle(c, why)),
    unknownFolderTangles: folderTangles.filter((t) => !known.has(t)),
    goneKnownTangles: [...known].filter((k) => !folderTangles.includes(k)),
    unranked: [...new Set(files.map(topLevel))].filter((t) => ranks[t] === undefined),
    layering: upward.map(
      (i) =>
        `${rel(i.from)}:${i.line} (${topLevel(i.from)}, rank ${ranks[topLevel(i.from)]}) imports ` +
        `${rel(i.to)} (${topLevel(i.to)}, rank ${ranks[topLevel(i.to)]})`,
    ),
  };
}

describe("the import structure of src/", () => {
  const tree = analyze(ROOT, RANKS);

  it("finds the source files and their imports, every one naming a file", () => {
    expect(tree.files.length).toBeGreaterThan(50);
    expect(tree.imports.length).toBeGreaterThan(tree.files.length);
    expect(tree.unresolved).toEqual([]);
  });

  it("has no cycle between files", () => {
    expect(tree.fileCycles, `import cycles between files:\n\n${tree.fileCycles.join("\n\n")}`).toEqual([]);
    expect(tree.fileTangles).toEqual([]);
  });

  it("has no cycle between folders but the known ones, which are still there", () => {
    expect(tree.folderCycles, `import cycles between folders:\n\n${tree.folderCycles.join("\n\n")}`).toEqual(
      [],
    );
    expect(tree.unknownFolderTangles).toEqual([]);
    expect(tree.goneKnownTangles, "gone: remove them from KNOWN_FOLDER_TANGLES").toEqual([]);
  });

  it("ranks every top-level folder of src/", () => {
    expect(tree.unranked, "top-level folders of src/ (or files directly in it) not in RANKS").toEqual([]);
  });

  it("imports only from its own top-level folder or from one of lower or equal rank", () => {
    expect(tree.layering, `imports against the layering:\n${tree.layering.join("\n")}`).toEqual([]);
  });
});

describe("the structure check itself", () => {
  it("reports file cycles, folder cycles, unranked folders and upward imports in a made-up tree", () => {
    const dir = tempDir("fencegate-architecture-");
    try {
      const files: Record<string, string> = {
        "src/low/a.ts": 'import { b } from "./b.js";\nexport const a = b;\n',
        "src/low/b.ts": 'import type { A } from "./deep/c.js";\nexport const b = 1;\nexport type B = A;\n',
        "src/low/deep/c.ts": 'export type A = number;\nexport const c = () => import("../a.js");\n',
        "src/low/loop.ts": 'export * from "./loop2.js";\n',
        "src/low/loop2.ts": 'export { x } from "./loop.js";\nexport const y = 2;\n',
        "src/high/d.ts": 'import { a } from "../low/a.js";\nexport const d = a;\n',
        "src/low/up.ts": 'import { d } from "../high/d.js";\nimport "node:fs";\nexport const up = d;\n',
        "src/odd/e.ts": 'import "../low/missing.js";\n',
      };
      for (const [path, text] of Object.entries(files)) {
        mkdirSync(dirname(join(dir.path, path)), { recursive: true });
        writeFileSync(join(dir.path, path), text);
      }
      const report = analyze(dir.path, { low: 0, high: 1 }, []);
      expect(report.unresolved).toEqual(['src/odd/e.ts:1 imports "../low/missing.js", which is not a file']);
      expect(report.fileCycles).toEqual([
        "src/low/a.ts\n  -> src/low/b.ts\n  -> src/low/deep/c.ts\n  -> src/low/a.ts",
        "src/low/loop.ts\n  -> src/low/loop2.ts\n  -> src/low/loop.ts",
      ]);
      expect(report.fileTangles).toEqual([
        ["src/low/a.ts", "src/low/b.ts", "src/low/deep/c.ts"],
        ["src/low/loop.ts", "src/low/loop2.ts"],
      ]);
      expect(report.folderCycles).toEqual([
        'src/high  (src/high/d.ts:1 imports "../low/a.js")\n' +
          '  -> src/low  (src/low/up.ts:1 imports "../high/d.js")\n' +
          "  -> src/high",
        'src/low  (src/low/b.ts:1 imports "./deep/c.js")\n' +
          '  -> src/low/deep  (src/low/deep/c.ts:2 imports "../a.js")\n' +
          "  -> src/low",
      ]);
      expect(report.unknownFolderTangles).toEqual(["src/high src/low src/low/deep"]);
      expect(report.unranked).toEqual(["odd"]);
      expect(report.layering).toEqual(["src/low/up.ts:1 (low, rank 0) imports src/high/d.ts (high, rank 1)"]);
      expect(analyze(dir.path, { low: 0, high: 1 }, [["src/low", "src/high", "src/low/deep"]])).toMatchObject(
        {
          folderCycles: [],
          unknownFolderTangles: [],
          goneKnownTangles: [],
        },
      );
    } finally {
      dir.cleanup();
    }
  });
});
