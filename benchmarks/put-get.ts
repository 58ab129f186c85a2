/**
 * PUT and GET throughput through fencegate (fenced writes, filesystem backend) against the
 * direct baseline (benchmarks/direct-server.ts), with the same S3 client, sizes and
 * concurrency, in the same run. Prints figures and the fencegate/direct ratio.
 *
 *   npx tsx benchmarks/put-get.ts [--seconds 5] [--concurrency 16]
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { CreateBucketCommand, GetObjectCommand, PutObjectCommand, S3Client } from "@aws-sdk/client-s3";
import { LeaseClient } from "../src/client/lease-client.js";
import { startDirectServer } from "./direct-server.js";

const { values } = parseArgs({
  options: { seconds: { type: "string", default: "5" }, concurrency: { type: "string", default: "16" } },
});
const SECONDS = Number(values.seconds);
const CONCURRENCY = Number(values.concurrency);
const CREDS = { accessKeyId: "fencegate", secretAccessKey: "fencegate-secret" };
const ROOT = resolve(import.meta.dirname, "..");

type Target = { name: string; url: string; token?: string };
type Result = { ops: number; bytes: number; seconds: number };

function client(url: string): S3Client {
  return new S3Client({
    endpoint: url,
    region: "us-east-1",
    forcePathStyle: true,
    credentials: CREDS,
    maxAttempts: 1,
    requestChecksumCalculation: "WHEN_REQUIRED",
  });
}

async function run(target: Target, op: "put" | "get", size: number): Promise<Result> {
  const s3 = client(target.url);
  const body = Buffer.alloc(size, 7);
  const keys = Array.from({ length: CONCURRENCY }, (_, i) => `obj-${size}-${i}`);
  const put = (key: string) =>
    s3.send(
      new PutObjectCommand({
        Bucket: "bench",
        Key: key,
        Body: body,
        Metadata: target.token ? { "fence-token": target.token } : undefined,
      }),
    );
  if (op === "get") await Promise.all(keys.map(put));
  let ops = 0;
  const deadline = performance.now() + SECONDS * 1000;
  const start = performance.now();
  await Promise.all(
    keys.map(async (key) => {
      while (performance.now() < deadline) {
        if (op === "put") await put(key);
        else {
          const res = await s3.send(new GetObjectCommand({ Bucket: "bench", Key: key }));
          await res.Body!.transformToByteArray();
        }
        ops++;
      }
    }),
  );
  const seconds = (performance.now() - start) / 1000;
  s3.destroy();
  return { ops, bytes: ops * size, seconds };
}

async function spawnFencegate(dataDir: string): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, ["--import", "tsx", join(ROOT, "src/cli/main.ts"), "serve"], {
    env: { ...process.env, FENCEGATE_PORT: "0", FENCEGATE_DATA_DIR: dataDir, FENCEGATE_LOG_LEVEL: "warn" },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const url = await new Promise<string>((res, rej) => {
    let out = "";
    child.stdout!.on("data", (d) => {
      out += d;
      const m = /fencegate listening on (http:\/\/\S+)/.exec(out);
      if (m) res(m[1]!);
    });
    child.once("exit", (code) => rej(new Error(`fencegate exited with ${code}`)));
  });
  return { url, child };
}

const dir = mkdtempSync(join(tmpdir(), "fencegate-bench-"));
const fg = await spawnFencegate(join(dir, "fencegate"));
const direct = await startDirectServer(join(dir, "direct"));
try {
  const lc = new LeaseClient({ endpoint: fg.url, ...CREDS });
  await client(fg.url).send(new CreateBucketCommand({ Bucket: "bench" }));
  const lease = await lc.acquire({ bucket: "bench", prefix: "", ttlMs: 3_600_000 });
  const targets: Target[] = [
    { name: "fencegate", url: fg.url, token: lease.fencingToken },
    { name: "direct", url: direct.url },
  ];
  const cases: Array<[string, "put" | "get", number]> = [
    ["PUT 4 KiB", "put", 4 * 1024],
    ["PUT 1 MiB", "put", 1024 * 1024],
    ["GET 4 KiB", "get", 4 * 1024],
    ["GET 1 MiB", "get", 1024 * 1024],
  ];
  console.log(`concurrency ${CONCURRENCY}, ${SECONDS} s per case, node ${process.version}`);
  console.log("case        | fencegate ops/s (MiB/s) | direct ops/s (MiB/s) | ratio fencegate/direct");
  for (const [name, op, size] of cases) {
    const [a, b] = [await run(targets[0]!, op, size), await run(targets[1]!, op, size)];
    const rate = (r: Result) => r.ops / r.seconds;
    const mib = (r: Result) => r.bytes / r.seconds / 1024 / 1024;
    console.log(
      `${name.padEnd(11)} | ${rate(a).toFixed(0).padStart(7)} (${mib(a).toFixed(1).padStart(6)})        | ` +
        `${rate(b).toFixed(0).padStart(6)} (${mib(b).toFixed(1).padStart(6)})       | ${(rate(a) / rate(b)).toFixed(2)}`,
    );
  }
} finally {
  fg.child.kill("SIGTERM");
  direct.server.close();
  direct.server.closeAllConnections();
  await new Promise((r) => fg.child.once("exit", r));
  rmSync(dir, { recursive: true, force: true });
}
