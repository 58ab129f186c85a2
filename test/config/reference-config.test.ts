import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config/load.js";
import { configJsonSchema, referenceConfig, type SchemaNode } from "../../src/config/reference.js";

const REFERENCE = join(import.meta.dirname, "../../config/fencegate.yaml");

/**
 * Every field of the schema as a dotted path: the fields of every type of a backend or lease
 * store, `*` for the entries of a record, array items transparent.
 */
function schemaPaths(node: SchemaNode, prefix: string[] = []): string[][] {
  const out: string[][] = [];
  const objects = node.oneOf ?? node.anyOf ?? [node];
  for (const obj of objects) {
    for (const [name, child] of Object.entries(obj.properties ?? {})) {
      out.push([...prefix, name], ...schemaPaths(child, [...prefix, name]));
    }
    if (typeof obj.additionalProperties === "object" && !obj.properties) {
      out.push([...prefix, "*"], ...schemaPaths(obj.additionalProperties, [...prefix, "*"]));
    }
    if (obj.items) out.push(...schemaPaths(obj.items, prefix));
  }
  return out;
}

/**
 * Every field the file names, written or commented out (`# field: value`), with its path from
 * the indentation; prose comments name no field.
 */
function namedPaths(text: string): string[][] {
  const stack: { indent: number; key: string }[] = [];
  const out: string[][] = [];
  for (const line of text.split("\n")) {
    const m = /^( *)(# )?( *)(- )?([A-Za-z_][\w-]*|"[^"]+"):( |$)/.exec(line);
    if (!m) continue;
    const indent = m[1]!.length + m[3]!.length + (m[4] ? 2 : 0);
    while (stack.length > 0 && stack.at(-1)!.indent >= indent) stack.pop();
    const key = m[5]!.replace(/^"|"$/g, "");
    out.push([...stack.map((s) => s.key), key]);
    stack.push({ indent, key });
  }
  return out;
}

const matches = (pattern: string[], path: string[]) =>
  pattern.length === path.length && pattern.every((p, i) => p === "*" || p === path[i]);

describe("the reference configuration config/fencegate.yaml", () => {
  it("is what the schema generates (run `npm run config:reference` after changing the schema)", () => {
    expect(readFileSync(REFERENCE, "utf8")).toBe(referenceConfig());
  });

  it("names every field of the schema", () => {
    const named = namedPaths(readFileSync(REFERENCE, "utf8"));
    const fields = schemaPaths(configJsonSchema());
    expect(fields.length).toBeGreaterThan(80);
    const missing = fields.filter((f) => !named.some((n) => matches(f, n))).map((f) => f.join("."));
    expect(missing).toEqual([]);
  });

  it("loads to the defaults: every value written in it is the default", () => {
    expect(loadConfig({ FENCEGATE_CONFIG: REFERENCE })).toEqual(loadConfig({}));
  });

  it("the field check sees a field the file leaves out", () => {
    const text = referenceConfig().replace(/^ *(# *)?verifyBucket:.*\n/gm, "");
    const named = namedPaths(text);
    expect(named.some((n) => matches(["backend", "verifyBucket"], n))).toBe(false);
    expect(named.some((n) => matches(["backend", "forcePathStyle"], n))).toBe(true);
    expect(named.some((n) => matches(["pools", "*", "groups"], n))).toBe(true);
    expect(named.some((n) => matches(["credentials", "allow", "actions"], n))).toBe(true);
  });
});
