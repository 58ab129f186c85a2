import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { openApiDocument } from "../src/api/openapi.js";

/**
 * Writes src/api/openapi.json, the lease API's OpenAPI document, from its schemas
 * (src/api/schemas.ts): run it after changing them (`npx tsx scripts/generate-openapi.ts`);
 * test/api/openapi.test.ts fails while the file and the schemas differ.
 */
const target = fileURLToPath(new URL("../src/api/openapi.json", import.meta.url));
writeFileSync(target, `${JSON.stringify(openApiDocument(), null, 2)}\n`);
console.log(`wrote ${target}`);
