import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const PACKAGE_NAME = "fencegate";

/**
 * The version in fencegate's package.json, found by walking up from `fromDir`: the same from
 * src/core (a checkout run through tsx) and from dist/core (the compiled output, as the
 * container image ships it beside package.json). "unknown" when no such package.json is found.
 */
export function readVersion(fromDir: string): string {
  for (let dir = fromDir; ; dir = dirname(dir)) {
    const version = packageVersion(join(dir, "package.json"));
    if (version !== null) return version;
    if (dirname(dir) === dir) return "unknown";
  }
}

function packageVersion(path: string): string | null {
  let pkg: unknown;
  try {
    pkg = JSON.parse(readFileSync(path, "utf8"));
  } catch {
    return null;
  }
  const { name, version } = (pkg ?? {}) as { name?: unknown; version?: unknown };
  return name === PACKAGE_NAME && typeof version === "string" ? version : null;
}

/** fencegate's version, read from its package.json when this module loads. */
export const VERSION: string = readVersion(dirname(fileURLToPath(import.meta.url)));
