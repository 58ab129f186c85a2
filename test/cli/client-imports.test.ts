import { execFile } from "node:child_process";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROOT } from "../support/gateway.js";

/**
 * A client command starts fast because it loads only what it needs: the command tree, the SDK's
 * lease client with its own SigV4 signer, node:http. Never the server's modules, the AWS SDK,
 * @smithy's signer, zod, Azure, ioredis or SQLite (benchmarks/cli-start.mjs times it).
 */
const run = promisify(execFile);
const FORBIDDEN = [
  /\/node_modules\/@smithy\//,
  /\/node_modules\/@aws-sdk\//,
  /\/node_modules\/@aws-crypto\//,
  /\/node_modules\/@azure\//,
  /\/node_modules\/zod\//,
  /\/node_modules\/ioredis\//,
  /\/node_modules\/better-sqlite3/,
  /\/node_modules\/hono\//,
  /\/node_modules\/pino\//,
  /\/(src|dist)\/(server|leases|s3|backends|api|http|embedded|config|audit|fence|metrics|console)\//,
];

let server: ReturnType<typeof createServer>;
let endpoint: string;
const seen: { method?: string; url?: string; authorization?: string }[] = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    seen.push({ method: req.method, url: req.url, authorization: req.headers.authorization });
    res.setHeader("content-type", "application/json");
    res.end(req.method === "GET" ? '{"leases":[]}' : '{"error":{"code":"LeaseHeld","message":"held"}}');
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

describe("a client command's imports", () => {
  it("lease list loads no server module, AWS SDK, @smithy, zod, Azure, ioredis or SQLite", async () => {
    const { stdout, stderr } = await run(
      process.execPath,
      [
        "--import",
        join(ROOT, "test/cli/fixtures/trace-imports.mjs"),
        join(ROOT, "bin/fencegate.js"),
        "lease",
        "list",
        "--output",
        "json",
      ],
      { cwd: ROOT, env: { ...process.env, FENCEGATE_ENDPOINT: endpoint } },
    );
    expect(JSON.parse(stdout)).toEqual({ leases: [] });
    // The request was signed (SigV4) and sent.
    expect(seen.at(-1)).toMatchObject({ method: "GET", url: "/_fence/v1/leases" });
    expect(seen.at(-1)?.authorization).toMatch(
      /^AWS4-HMAC-SHA256 Credential=fencegate\/\d{8}\/us-east-1\/s3\//,
    );
    const loaded = stderr
      .split("\n")
      .filter((l) => l.startsWith("LOAD "))
      .map((l) => l.slice(5));
    expect(loaded.some((u) => /\/client\/fence-client\.(js|ts)$/.test(u))).toBe(true);
    expect(loaded.some((u) => /\/client\/sigv4-signer\.(js|ts)$/.test(u))).toBe(true);
    const heavy = loaded.filter((u) => FORBIDDEN.some((re) => re.test(u)));
    expect(heavy).toEqual([]);
  });
});
