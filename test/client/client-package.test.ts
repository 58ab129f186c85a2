import { execFile } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CREDENTIALS, ROOT, startTestGateway, type TestGateway, tempDir } from "../support/gateway.js";

/**
 * @fencegate/client (packages/client) as an application gets it: `npm pack` (which compiles
 * src/client through `prepack`), an empty project that installs the tarball from the registry
 * with install scripts allowed, a plain import in Node against a gateway this test starts, and
 * node_modules checked for the gateway's own dependencies. Install time and size are printed.
 */

const exec = promisify(execFile);
const NPM = process.platform === "win32" ? "npm.cmd" : "npm";
const PACKAGE = join(ROOT, "packages/client");

/** Dependencies of the gateway that an application installing the client must not get. */
const SERVER_ONLY = [
  "better-sqlite3",
  "better-sqlite3-napi",
  "@azure/storage-blob",
  "@azure/core-rest-pipeline",
  "ioredis",
  "hono",
  "@hono/node-server",
  "@aws-sdk/client-s3",
  "pino",
  "prom-client",
  "zod",
  "commander",
  "yaml",
  "fast-xml-parser",
  "hyparquet-writer",
  "tsx",
  "fencegate",
  "node-gyp",
  "prebuild-install",
  "bindings",
];

let gw: TestGateway;
let pack: { path: string; cleanup(): void };
let app: { path: string; cleanup(): void };
let installMs = 0;

async function run(cmd: string, args: string[], cwd: string, timeout = 240_000) {
  try {
    return await exec(cmd, args, {
      cwd,
      timeout,
      maxBuffer: 64 * 1024 * 1024,
      env: { ...process.env, CI: "true" },
    });
  } catch (e) {
    const x = e as { stdout?: string; stderr?: string; message: string };
    throw new Error(`${cmd} ${args.join(" ")} failed: ${x.message}\n${x.stdout ?? ""}\n${x.stderr ?? ""}`);
  }
}

/** Every package directory under node_modules (scoped ones included). */
function installedPackages(nodeModules: string): string[] {
  if (!existsSync(nodeModules)) return [];
  return readdirSync(nodeModules).flatMap((name) => {
    if (name.startsWith(".")) return [];
    if (name.startsWith("@")) return readdirSync(join(nodeModules, name)).map((n) => `${name}/${n}`);
    return [name];
  });
}

function sizeOf(path: string): number {
  const s = statSync(path, { throwIfNoEntry: false });
  if (!s) return 0;
  if (!s.isDirectory()) return s.size;
  return readdirSync(path).reduce((sum, name) => sum + sizeOf(join(path, name)), 0);
}

beforeAll(async () => {
  gw = await startTestGateway();
  pack = tempDir("fencegate-client-pack-");
  app = tempDir("fencegate-client-app-");
  await run(NPM, ["pack", "--pack-destination", pack.path, "--silent"], PACKAGE);
  const tarball = readdirSync(pack.path).find((f) => f.endsWith(".tgz"));
  if (!tarball) throw new Error(`npm pack left no tarball in ${pack.path}`);
  writeFileSync(
    join(app.path, "package.json"),
    JSON.stringify({ name: "an-application", version: "1.0.0", private: true, type: "module" }),
  );
  const started = performance.now();
  // Install scripts are allowed: the client must need none (nothing compiles).
  await run(
    NPM,
    ["install", join(pack.path, tarball), "--no-audit", "--no-fund", "--foreground-scripts"],
    app.path,
  );
  installMs = performance.now() - started;
}, 600_000);

afterAll(async () => {
  await gw?.stop();
  app?.cleanup();
  pack?.cleanup();
});

describe("the client package, installed into an empty project", () => {
  it("ships compiled JavaScript and types only", async () => {
    const tarball = readdirSync(pack.path).find((f) => f.endsWith(".tgz"))!;
    const { stdout } = await run("tar", ["-tzf", join(pack.path, tarball)], pack.path);
    const files = stdout.split("\n").filter(Boolean);
    expect(files).toContain("package/dist/index.js");
    expect(files).toContain("package/dist/index.d.ts");
    expect(
      files.filter((f) => !/^package\/(dist\/[\w-]+\.(js|d\.ts)|package\.json|README\.md)$/.test(f)),
    ).toEqual([]);
  });

  it("pulls no dependency of the gateway and compiles nothing", () => {
    const nodeModules = join(app.path, "node_modules");
    const installed = installedPackages(nodeModules);
    expect(installed).toContain("@fencegate/client");
    expect(installed.filter((p) => SERVER_ONLY.includes(p) || p.startsWith("@azure/"))).toEqual([]);
    const withInstallScripts = installed.filter((p) => {
      const pkg = JSON.parse(readFileSync(join(nodeModules, p, "package.json"), "utf8")) as {
        scripts?: Record<string, string>;
        gypfile?: boolean;
      };
      const s = pkg.scripts ?? {};
      return Boolean(
        s.install ||
          s.preinstall ||
          s.postinstall ||
          pkg.gypfile ||
          existsSync(join(nodeModules, p, "binding.gyp")),
      );
    });
    expect(withInstallScripts).toEqual([]);
    const bytes = sizeOf(nodeModules);
    console.log(
      `@fencegate/client into an empty project: npm install ${(installMs / 1000).toFixed(1)} s, ` +
        `node_modules ${(bytes / 1024 / 1024).toFixed(1)} MiB in ${installed.length} packages`,
    );
    // Far below the gateway's install (174 MB); a bound that catches a server dependency.
    expect(bytes).toBeLessThan(20 * 1024 * 1024);
  });

  it("imports with a plain import and takes, shows and releases a lease on a running gateway", async () => {
    writeFileSync(
      join(app.path, "use.mjs"),
      `
      import { FenceClient, LeaseHeldError, fencingTokenPlugin } from "@fencegate/client";
      const [endpoint, accessKeyId, secretAccessKey] = process.argv.slice(2);
      const fence = new FenceClient({ endpoint, accessKeyId, secretAccessKey });
      const result = await fence.using({ bucket: "app", key: "job", ttlMs: 5000 }, async (lease) => {
        const other = await fence.acquire({ bucket: "app", key: "job", ttlMs: 1000 }).catch((e) => e);
        return { token: lease.token, held: other instanceof LeaseHeldError, plugin: typeof fencingTokenPlugin };
      });
      const { records } = await fence.audit({ bucket: "app", op: "LeaseReleased" });
      console.log(JSON.stringify({ ...result, released: records.length }));
    `,
    );
    const { stdout } = await run(
      process.execPath,
      ["use.mjs", gw.url, CREDENTIALS.accessKeyId, CREDENTIALS.secretAccessKey],
      app.path,
      60_000,
    );
    expect(JSON.parse(stdout.trim())).toEqual({
      token: expect.any(Number),
      held: true,
      plugin: "function",
      released: 1,
    });
  });

  it("gives TypeScript users its types", async () => {
    writeFileSync(
      join(app.path, "typed.ts"),
      [
        'import { FenceClient, type Lease, LeaseLostError } from "@fencegate/client";',
        'const fence = new FenceClient({ endpoint: "http://127.0.0.1:9700", accessKeyId: "a", secretAccessKey: "b" });',
        "export async function work(): Promise<number> {",
        '  return fence.using({ bucket: "b", key: "k" }, async (lease: Lease) => lease.token);',
        "}",
        "export const isLost = (e: unknown): boolean => e instanceof LeaseLostError;",
        "// @ts-expect-error: a number is not a string (the check is on)",
        "export const wrong: string = fence.endpoint.length;",
      ].join("\n"),
    );
    writeFileSync(
      join(app.path, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          module: "nodenext",
          moduleResolution: "nodenext",
          target: "es2022",
          lib: ["es2023", "dom"],
          types: [],
          strict: true,
          noEmit: true,
          skipLibCheck: true,
        },
        files: ["typed.ts"],
      }),
    );
    await run(
      process.execPath,
      [join(ROOT, "node_modules/typescript/bin/tsc"), "-p", "."],
      app.path,
      120_000,
    );
  });
});
