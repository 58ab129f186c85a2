#!/usr/bin/env node
// Runs the TypeScript sources through tsx in a checkout (so `npm start` needs no build step and
// never runs stale output), and the compiled dist/ where the sources are not shipped (the image).
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const source = join(root, "src", "cli", "main.ts");
if (existsSync(source)) {
  const { register } = await import("tsx/esm/api");
  register();
  await import(pathToFileURL(source).href);
} else {
  await import(pathToFileURL(join(root, "dist", "cli", "main.js")).href);
}
