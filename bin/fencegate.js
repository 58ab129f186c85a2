#!/usr/bin/env node
// In a checkout, runs the TypeScript sources through tsx (so `npm start` needs no build step and
// never runs stale output); the client commands run the compiled dist/ instead when it is newer
// than every source file (after `npm run build`), since tsx alone costs them ~0.5 s of start-up.
// Where the sources are not shipped (the image, the package), always the compiled dist/.
import { existsSync, readdirSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const source = join(root, "src", "cli", "main.ts");
const compiled = join(root, "dist", "cli", "main.js");

/** dist/ was built after the last change to src/ (the newest file there, by mtime). */
function compiledIsFresh() {
  let built;
  try {
    built = statSync(compiled).mtimeMs;
  } catch {
    return false;
  }
  const src = join(root, "src");
  for (const name of readdirSync(src, { recursive: true })) {
    if (statSync(join(src, name)).mtimeMs > built) return false;
  }
  return true;
}

if (existsSync(source) && (process.argv[2] === "serve" || !compiledIsFresh())) {
  const { register } = await import("tsx/esm/api");
  register();
  await import(pathToFileURL(source).href);
} else {
  await import(pathToFileURL(compiled).href);
}
