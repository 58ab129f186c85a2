import { execFile } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { readdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import {
  CreateBucketCommand,
  GetObjectCommand,
  PutObjectCommand,
  type S3ServiceException,
} from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FenceClient } from "../../src/client/index.js";
import {
  CREDENTIALS,
  ROOT,
  s3Client,
  spawnGateway,
  startTestGateway,
  type TestGateway,
  tempDir,
} from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";

checkLeaseApiResponses();

/**
 * fencegate/client as a user's project gets it: `npm pack` (which builds through `prepack`),
 * a new project that installs the tarball, and a plain `import("fencegate/client")` in Node,
 * used against a gateway this test starts. And the gateway as the Docker image runs it: the
 * packed files (bin/, config/, the compiled dist/) with the project's dependencies.
 */

const exec = promisify(execFile);
const NPM = process.platform === "win32" ? "npm.cmd" : "npm";
let gw: TestGateway;
let project: { path: string; cleanup(): void };
let packDir: { path: string; cleanup(): void };

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

beforeAll(async () => {
  gw = await startTestGateway();
  packDir = tempDir("fencegate-pack-");
  project = tempDir("fencegate-user-");
  await run(NPM, ["pack", "--pack-destination", packDir.path, "--silent"], ROOT);
  const tarball = readdirSync(packDir.path).find((f) => f.endsWith(".tgz"));
  if (!tarball) throw new Error(`npm pack left no tarball in ${packDir.path}`);
  writeFileSync(
    join(project.path, "package.json"),
    JSON.stringify({ name: "uses-fencegate", version: "1.0.0", private: true, type: "module" }),
  );
  // The client needs no native module, so install scripts (better-sqlite3's build) are skipped.
  await run(
    NPM,
    [
      "install",
      join(packDir.path, tarball),
      "--no-audit",
      "--no-fund",
      "--prefer-offline",
      "--ignore-scripts",
    ],
    project.path,
  );
}, 600_000);

afterAll(async () => {
  await gw?.stop();
  project?.cleanup();
  packDir?.cleanup();
});

describe("the packed package", () => {
  it("ships compiled JavaScript and types for fencegate/client, and no TypeScript sources", async () => {
    const { stdout } = await run(
      "tar",
      ["-tzf", join(packDir.path, readdirSync(packDir.path)[0]!)],
      packDir.path,
    );
    const files = stdout.split("\n");
    expect(files).toContain("package/dist/client/index.js");
    expect(files).toContain("package/dist/client/index.d.ts");
    expect(files).toContain("package/bin/fencegate.js");
    expect(files.filter((f) => f.startsWith("package/src/") || f.startsWith("package/test/"))).toEqual([]);
  });

  it("imports with a plain import() in Node and works against a running gateway", async () => {
    const script = `
      import { FenceClient, LeaseHeldError } from "fencegate/client";
      import { PutObjectCommand, CreateBucketCommand, S3Client } from "@aws-sdk/client-s3";
      const [endpoint, accessKeyId, secretAccessKey] = process.argv.slice(2);
      const credentials = { accessKeyId, secretAccessKey };
      const fence = new FenceClient({ endpoint, ...credentials });
      const s3 = new S3Client({ endpoint, region: "us-east-1", forcePathStyle: true, credentials });
      await s3.send(new CreateBucketCommand({ Bucket: "packed" }));
      const result = await fence.using({ bucket: "packed", key: "hello.txt", ttlMs: 5000 }, async (lease) => {
        const other = await fence.acquire({ bucket: "packed", key: "hello.txt", ttlMs: 1000 }).catch((e) => e);
        const put = await lease.s3(s3).send(new PutObjectCommand({ Bucket: "packed", Key: "hello.txt", Body: "hi" }));
        return { token: lease.token, held: other instanceof LeaseHeldError, status: put.$metadata.httpStatusCode };
      });
      console.log(JSON.stringify(result));
    `;
    writeFileSync(join(project.path, "use.mjs"), script);
    const { stdout } = await run(
      process.execPath,
      ["use.mjs", gw.url, CREDENTIALS.accessKeyId, CREDENTIALS.secretAccessKey],
      project.path,
      60_000,
    );
    const result = JSON.parse(stdout.trim()) as { token: number; held: boolean; status: number };
    expect(result).toEqual({ token: expect.any(Number), held: true, status: 200 });
    const { records } = await gw.leases.audit({ bucket: "packed", op: "PutObject" });
    expect(records.map((r) => [r.decision, r.token])).toEqual([["accepted", result.token]]);

    const { stdout: names } = await run(
      process.execPath,
      ["-e", 'import("fencegate/client").then((m) => console.log(Object.keys(m).sort().join(" ")))'],
      project.path,
      60_000,
    );
    expect(names.trim().split(" ")).toEqual(
      expect.arrayContaining([
        "FenceClient",
        "Lease",
        "bindFencingToken",
        "fencingTokenClient",
        "fencingTokenPlugin",
        "FencingTokenConflictError",
      ]),
    );
  });

  it("installs the fencegate command, whose lease commands run on the compiled client", async () => {
    const { stdout } = await exec(
      process.execPath,
      [
        join(project.path, "node_modules/fencegate/bin/fencegate.js"),
        "lease",
        "acquire",
        "--bucket",
        "packed",
        "--key",
        "cli",
        "--ttl-ms",
        "5000",
      ],
      {
        cwd: project.path,
        timeout: 60_000,
        env: {
          ...process.env,
          FENCEGATE_ENDPOINT: gw.url,
          AWS_ACCESS_KEY_ID: CREDENTIALS.accessKeyId,
          AWS_SECRET_ACCESS_KEY: CREDENTIALS.secretAccessKey,
        },
      },
    );
    const lease = JSON.parse(stdout) as { leaseId: string; key: string; token: number };
    expect(lease).toMatchObject({ key: "cli", token: expect.any(Number) });
    expect((await gw.leases.show(lease.leaseId)).state).toBe("active");
  });

  it("gives TypeScript users the client's types", async () => {
    writeFileSync(
      join(project.path, "typed.ts"),
      [
        'import { FenceClient, type Lease, LeaseLostError } from "fencegate/client";',
        'const fence = new FenceClient({ endpoint: "http://127.0.0.1:9700", accessKeyId: "a", secretAccessKey: "b" });',
        "export async function work(): Promise<number> {",
        '  return fence.using({ bucket: "b", key: "k" }, async (lease: Lease) => lease.token);',
        "}",
        "export const isLost = (e: unknown): boolean => e instanceof LeaseLostError;",
        "// @ts-expect-error: a number is not a string (the check is on)",
        "export const wrong: string = new FenceClient({ endpoint: '', accessKeyId: '', secretAccessKey: '' }).endpoint.length;",
      ].join("\n"),
    );
    writeFileSync(
      join(project.path, "tsconfig.json"),
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
      project.path,
      120_000,
    );
  });
});

describe("the packed gateway, run from its compiled dist/ as the image runs it", () => {
  it("serves leases, fenced writes with their MD5 ETags, reads and the audit log", async () => {
    const unpacked = tempDir("fencegate-unpacked-");
    const data = tempDir("fencegate-unpacked-data-");
    let gateway: Awaited<ReturnType<typeof spawnGateway>> | undefined;
    try {
      const tarball = readdirSync(packDir.path).find((f) => f.endsWith(".tgz"))!;
      await run("tar", ["-xzf", join(packDir.path, tarball), "-C", unpacked.path], unpacked.path);
      const pkg = join(unpacked.path, "package");
      // The image installs the production dependencies next to the files; these are a superset.
      symlinkSync(join(ROOT, "node_modules"), join(pkg, "node_modules"), "dir");
      gateway = await spawnGateway(data.path, {}, { entry: join(pkg, "bin/fencegate.js") });

      const fence = new FenceClient({ endpoint: gateway.url, ...CREDENTIALS });
      const s3 = s3Client(gateway.url);
      await s3.send(new CreateBucketCommand({ Bucket: "image" }));
      // Large enough to go through the MD5 worker thread and the file store, not the inline path.
      const body = randomBytes(3 * 1024 * 1024 + 5);
      const first = await fence.acquire({ bucket: "image", key: "big.bin", ttlMs: 10_000 });
      await fence.release(first.leaseId);
      const second = await fence.acquire({ bucket: "image", key: "big.bin", ttlMs: 10_000 });
      const put = await s3.send(
        new PutObjectCommand({
          Bucket: "image",
          Key: "big.bin",
          Body: body,
          Metadata: { "fence-token": second.fencingToken },
        }),
      );
      expect(put.ETag).toBe(`"${createHash("md5").update(body).digest("hex")}"`);
      const stale = await s3
        .send(
          new PutObjectCommand({
            Bucket: "image",
            Key: "big.bin",
            Body: "late",
            Metadata: { "fence-token": first.fencingToken },
          }),
        )
        .catch((e: S3ServiceException) => e);
      expect((stale as S3ServiceException).name).toBe("StaleFencingToken");
      const got = await s3.send(new GetObjectCommand({ Bucket: "image", Key: "big.bin" }));
      expect(Buffer.from(await got.Body!.transformToByteArray()).equals(body)).toBe(true);
      const { records } = await fence.audit({ bucket: "image", op: "PutObject" });
      expect(records.map((r) => [r.decision, r.token, r.reason])).toEqual([
        ["accepted", second.token, null],
        ["rejected", first.token, "StaleFencingToken"],
      ]);
    } finally {
      await gateway?.kill();
      data.cleanup();
      unpacked.cleanup();
    }
  }, 120_000);
});
