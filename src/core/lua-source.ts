import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { Redis } from "ioredis";

/**
 * The one loader of the Lua that Redis runs (the Redis and Redlock lease stores, the Redis audit
 * log). Every script lives in a `.lua` file next to the module that exports it, read once when
 * that module loads (a missing or broken file stops the start, never a request later), and
 * copied into dist/ next to the compiled module by `npm run build`.
 *
 * A file is used byte for byte, but for its placeholders, which the module that loads it fills:
 * - `--{{NAME}}` alone on a line: that line, its line end included, is replaced by a shared
 *   piece of Lua (the prelude, the audit append function, …), given as text that ends with a
 *   line end. Being a Lua comment, the line leaves the file a valid chunk for `luac -p`.
 * - `{{NAME}}` anywhere else: replaced by the value as it is (a list of field names, …).
 * NAME is upper case (A-Z, 0-9, _). A placeholder without a value, or a value that no
 * placeholder takes, is an error: nothing runs half-composed.
 */
type LuaValues = Readonly<Record<string, string>>;

const PLACEHOLDER = /^--\{\{([A-Z][A-Z0-9_]*)\}\}\n|\{\{([A-Z][A-Z0-9_]*)\}\}/gm;

const files = new Map<string, string>();

function readOnce(file: URL): string {
  let text = files.get(file.href);
  if (text === undefined) {
    text = readFileSync(fileURLToPath(file), "utf8");
    files.set(file.href, text);
  }
  return text;
}

/** The Lua of `file` with its placeholders filled from `values` (see LuaValues). */
export function readLua(file: URL, values: LuaValues = {}): string {
  return fillLua(readOnce(file), values, file.pathname.split("/").pop() ?? file.href);
}

/**
 * `readLua` for the files of one folder: `luaFiles(import.meta.url)` reads names relative to the
 * calling module (`lua("acquire.lua", { PRELUDE })`).
 */
export function luaFiles(base: string | URL): (name: string, values?: LuaValues) => string {
  return (name, values) => readLua(new URL(name, base), values);
}

/** Fills the placeholders of Lua text `text` (named `what` in errors). */
export function fillLua(text: string, values: LuaValues, what = "Lua"): string {
  const used = new Set<string>();
  const out = text.replace(PLACEHOLDER, (_all, line: string | undefined, inline: string | undefined) => {
    const name = (line ?? inline)!;
    const value = values[name];
    if (value === undefined) throw new Error(`${what}: no value for the placeholder {{${name}}}`);
    if (line !== undefined && value !== "" && !value.endsWith("\n")) {
      throw new Error(`${what}: the piece put in for --{{${name}}} must end with a line end`);
    }
    used.add(name);
    return value;
  });
  const unused = Object.keys(values).filter((name) => !used.has(name));
  if (unused.length > 0)
    throw new Error(`${what}: no placeholder takes ${unused.map((n) => `{{${n}}}`).join(", ")}`);
  return out;
}

/**
 * A named Lua script, loaded once and called by its SHA1 (EVALSHA). A server that does not know
 * it (restarted, failed over, SCRIPT FLUSH) answers NOSCRIPT: the script is loaded again and the
 * call repeated, once. Nothing ran on the NOSCRIPT answer, so repeating it is safe.
 */
export class LuaScript {
  readonly sha: string;

  constructor(
    readonly name: string,
    readonly source: string,
  ) {
    this.sha = createHash("sha1").update(source).digest("hex");
  }

  /** SCRIPT LOAD; answers the SHA1 (checked against the one computed here). */
  async load(redis: Redis): Promise<string> {
    const sha = await redis.script("LOAD", this.source);
    if (sha !== this.sha) throw new Error(`script ${this.name}: Redis answered SHA ${String(sha)}`);
    return this.sha;
  }

  async run(redis: Redis, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    try {
      return await redis.evalsha(this.sha, keys.length, ...keys, ...args);
    } catch (e) {
      if (!(e instanceof Error) || !e.message.startsWith("NOSCRIPT")) throw e;
      await this.load(redis);
      return await redis.evalsha(this.sha, keys.length, ...keys, ...args);
    }
  }
}
