import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import ts from "typescript";
import { describe, expect, it } from "vitest";
import { fillLua, LuaScript, readLua } from "../../../src/core/lua-source.js";
import { tempDir } from "../../support/temp.js";
import { requireTool, requireTools, TOOLS } from "../../support/tools.js";

requireTools("luac5.1");

/**
 * The Lua that Redis runs lives in .lua files under src/ (src/core/lua-source.ts reads them):
 * each file, and each script as composed from them, is valid Lua 5.1 (the Lua of Redis) for
 * luac5.1, and no .ts file under src/ holds Lua in a string.
 */

const ROOT = resolve(import.meta.dirname, "../../..");
const SRC = join(ROOT, "src");

function filesUnder(dir: string, ext: string): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .flatMap((e) => {
      const path = join(dir, e.name);
      if (e.isDirectory()) return filesUnder(path, ext);
      return e.isFile() && e.name.endsWith(ext) && !e.name.endsWith(".d.ts") ? [path] : [];
    })
    .sort();
}

/** luac5.1 -p on each file: the files it refuses, with its message. Throws when luac5.1 is missing. */
function luacRefuses(paths: readonly string[]): string[] {
  requireTool("luac5.1");
  const refused: string[] = [];
  for (const path of paths) {
    const r = spawnSync(TOOLS["luac5.1"].path, ["-p", path], { encoding: "utf8", timeout: 30_000 });
    if (r.status !== 0)
      refused.push(`${relative(ROOT, path)}: ${(r.stderr || r.error?.message || "").trim()}`);
  }
  return refused;
}

/** Every script (string or LuaScript) exported by the modules that read .lua files. */
async function composedScripts(): Promise<Map<string, string>> {
  const scripts = new Map<string, string>();
  for (const file of filesUnder(SRC, ".ts")) {
    if (!readFileSync(file, "utf8").includes("luaFiles(import.meta.url)")) continue;
    const mod = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
    for (const [name, value] of Object.entries(mod)) {
      const where = `${relative(ROOT, file)}:${name}`;
      if (value instanceof LuaScript) scripts.set(where, value.source);
      else if (typeof value === "string" && /\bredis\.p?call\(|\bKEYS\[|\bARGV\[|\bend\b/.test(value)) {
        scripts.set(where, value);
      }
    }
  }
  return scripts;
}

/** A string or template literal of `source` that reads as Lua, as `line: text`; none when clean. */
function luaInTypeScript(fileName: string, source: string): string[] {
  const sf = ts.createSourceFile(fileName, source, ts.ScriptTarget.Latest, true);
  const LUA =
    /\bredis\.p?call\(|\bredis\.error_reply\(|\blocal\s+function\b|\bKEYS\[\d|\bARGV\[\d|\bcjson\.|\btonumber\(/;
  const found: string[] = [];
  const check = (node: ts.Node, text: string) => {
    if (LUA.test(text)) {
      const line = sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1;
      found.push(`${fileName}:${line}: ${text.trim().split("\n")[0]!.slice(0, 80)}`);
    }
  };
  const visit = (node: ts.Node) => {
    if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) check(node, node.text);
    else if (ts.isTemplateExpression(node)) {
      check(node, [node.head.text, ...node.templateSpans.map((s) => s.literal.text)].join(" … "));
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return found;
}

describe("the Lua under src/", () => {
  const luaFiles = filesUnder(SRC, ".lua");

  it("is in .lua files next to the modules that load them", () => {
    const folders = new Set(luaFiles.map((f) => relative(SRC, f).split("/").slice(0, -1).join("/")));
    expect([...folders].sort()).toEqual([
      "audit/redis/lua",
      "core/redis",
      "leases/redis-shared/lua",
      "leases/redis/lua",
      "leases/redlock/lua",
    ]);
    expect(luaFiles.length).toBeGreaterThanOrEqual(45);
  });

  it("passes luac5.1 -p, file by file", () => {
    expect(luacRefuses(luaFiles)).toEqual([]);
  });

  it("passes luac5.1 -p as every script is composed from the files (prelude and pieces put in)", async () => {
    const scripts = await composedScripts();
    // Every lease, wait queue, delegate, intent, Redlock and audit script.
    expect(scripts.size).toBeGreaterThanOrEqual(46);
    for (const name of [
      "lease-scripts.ts:ACQUIRE",
      "wait-scripts.ts:ACQUIRE_AS_HEAD",
      "audit-scripts.ts:APPEND",
    ]) {
      expect([...scripts.keys()].some((k) => k.endsWith(name))).toBe(true);
    }
    const dir = tempDir("fencegate-lua-");
    try {
      const paths = [...scripts].map(([name, source], i) => {
        const path = join(dir.path, `${i}-${name.replace(/[^\w.-]+/g, "_")}.lua`);
        writeFileSync(path, source);
        return path;
      });
      expect(luacRefuses(paths)).toEqual([]);
      // And every placeholder was filled.
      for (const [name, source] of scripts)
        expect({ name, placeholder: /\{\{[A-Z]/.test(source) }).toEqual({ name, placeholder: false });
    } finally {
      dir.cleanup();
    }
  });

  it("is refused by luac5.1 when broken (the check is not vacuous)", () => {
    const dir = tempDir("fencegate-lua-");
    try {
      const path = join(dir.path, "broken.lua");
      writeFileSync(path, "local function f()\n  return redis.call('GET', KEYS[1])\n");
      expect(luacRefuses([path])).toEqual([expect.stringMatching(/broken\.lua: .*'end' expected/)]);
    } finally {
      dir.cleanup();
    }
  });

  it("is in no .ts file under src/ (no string or template literal holds Lua)", () => {
    const found = filesUnder(SRC, ".ts").flatMap((f) =>
      luaInTypeScript(relative(ROOT, f), readFileSync(f, "utf8")),
    );
    expect(found).toEqual([]);
  });

  it("would be found in a .ts file (the scan is not vacuous)", () => {
    const source = [
      "const A = \"return redis.call('GET', KEYS[1])\";",
      `const B = \`local n = tonumber(ARGV[1])\\n\${x}\\nreturn n\`;`,
      "const C = 'plain text, no Lua';",
      'redis.call("CONFIG", "GET", "*");',
    ].join("\n");
    expect(luaInTypeScript("sample.ts", source)).toEqual([
      "sample.ts:1: return redis.call('GET', KEYS[1])",
      "sample.ts:2: local n = tonumber(ARGV[1])",
    ]);
  });
});

describe("the Lua loader", () => {
  it("reads a file relative to a module, placeholders filled", () => {
    const dir = tempDir("fencegate-lua-");
    try {
      writeFileSync(join(dir.path, "s.lua"), "local F = {{{FIELDS}}}\n--{{PIECE}}\nreturn F\n");
      const url = pathToFileURL(join(dir.path, "s.lua"));
      expect(readLua(url, { FIELDS: "'a', 'b'", PIECE: "local x = 1\n" })).toBe(
        "local F = {'a', 'b'}\nlocal x = 1\nreturn F\n",
      );
      // Put in as nothing: the line goes, its line end with it.
      expect(readLua(url, { FIELDS: "", PIECE: "" })).toBe("local F = {}\nreturn F\n");
    } finally {
      dir.cleanup();
    }
  });

  it("refuses a placeholder without a value, a value without a placeholder, a piece without a line end", () => {
    expect(() => fillLua("--{{PRELUDE}}\nreturn 1\n", {}, "x.lua")).toThrow(
      /x\.lua: no value for the placeholder \{\{PRELUDE\}\}/,
    );
    expect(() => fillLua("return {{N}}\n", { N: "1", PRELUDE: "" }, "x.lua")).toThrow(
      /no placeholder takes \{\{PRELUDE\}\}/,
    );
    expect(() => fillLua("--{{PIECE}}\nreturn 1\n", { PIECE: "local x = 1" })).toThrow(
      /must end with a line end/,
    );
    // Lua's own braces and comments are left alone.
    expect(fillLua("local t = {{a = 1}} -- {x}\n", {})).toBe("local t = {{a = 1}} -- {x}\n");
  });

  it("fails when a file is missing (at start: the modules read their files when they load)", () => {
    expect(() => readLua(new URL("./no-such-script.lua", pathToFileURL(join(SRC, "core/")).href))).toThrow(
      /ENOENT/,
    );
  });
});
