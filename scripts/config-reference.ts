// Writes config/fencegate.yaml, the reference configuration, from the schema (src/config/reference.ts).
// Run with `npm run config:reference` after changing src/config/schema.ts.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { referenceConfig } from "../src/config/reference.js";

const file = join(import.meta.dirname, "../config/fencegate.yaml");
writeFileSync(file, referenceConfig());
process.stdout.write(`wrote ${file}\n`);
