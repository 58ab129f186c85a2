import { type ChildProcess, spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { CreateBucketCommand, GetObjectCommand, PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AuditRecord } from "../../src/audit/audit-log.js";
import type { Lease } from "../../src/client/lease-client.js";
import { CREDENTIALS, ROOT, startTestGateway, type TestGateway, tempDir } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";
import { waitFor } from "../support/wait.js";

checkLeaseApiResponses();

/** The real CLI (node --import tsx src/cli/main.ts) against an in-process gateway. */

type Result = { code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string };
type Running = { child: ChildProcess; output(): { stdout: string; stderr: string }; done: Promise<Result> };

const MAIN = join(ROOT, "src/cli/main.ts");
const PUT = join(ROOT, "test/cli/fixtures/put-with-token.ts");

let gw: TestGateway;
let s3: S3Client;
const bucket = "cli";

function start(args: string[], env: Record<string, string> = {}): Running {
  const child = spawn(process.execPath, ["--import", "tsx", MAIN, ...args], {
    cwd: ROOT,
    env: {
      ...process.env,
      FENCEGATE_ENDPOINT: gw.url,
      AWS_ACCESS_KEY_ID: CREDENTIALS.accessKeyId,
      AWS_SECRET_ACCESS_KEY: CREDENTIALS.secretAccessKey,
      NODE: process.execPath,
      PUT,
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (d) => {
    stdout += d;
  });
  child.stderr!.on("data", (d) => {
    stderr += d;
  });
  const done = new Promise<Result>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`fencegate ${args.join(" ")} did not finish:\n${stdout}\n${stderr}`));
    }, 45_000);
    child.once("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
  return { child, output: () => ({ stdout, stderr }), done };
}

const cli = (args: string[], env: Record<string, string> = {}) => start(args, env).done;

function json<T>(r: Result): T {
  expect({ code: r.code, stderr: r.code === 0 ? "" : r.stderr }).toEqual({ code: 0, stderr: "" });
  return JSON.parse(r.stdout) as T;
}

async function read(key: string): Promise<string> {
  const out = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
  return Buffer.from(await out.Body!.transformToByteArray()).toString();
}

beforeAll(async () => {
  gw = await startTestGateway();
  s3 = gw.s3();
  await s3.send(new CreateBucketCommand({ Bucket: bucket }));
});

afterAll(async () => {
  await gw?.stop();
});

describe("fencegate lease and audit", () => {
  let lease: Lease;

  it("lease acquire prints a Lease", async () => {
    lease = json<Lease>(
      await cli([
        "lease",
        "acquire",
        "--bucket",
        bucket,
        "--key",
        "leased",
        "--ttl-ms",
        "60000",
        "--owner",
        "cli-test",
      ]),
    );
    expect(lease).toMatchObject({ bucket, key: "leased", owner: "cli-test", ttlMs: 60000 });
    expect(Number.isSafeInteger(lease.token)).toBe(true);
    expect(typeof lease.fencingToken).toBe("string");
    expect(typeof lease.leaseId).toBe("string");
    expect(Date.parse(lease.expiresAt) - Date.parse(lease.acquiredAt)).toBe(60000);
    expect(await gw.leases.show(lease.leaseId)).toMatchObject({ leaseId: lease.leaseId, token: lease.token });
  });

  it("lease acquire on a held key exits 75 (LeaseHeld)", async () => {
    const r = await cli(["lease", "acquire", "--bucket", bucket, "--key", "leased", "--ttl-ms", "5000"]);
    expect(r.code).toBe(75);
    expect(r.stderr).toContain("LeaseHeld");
    expect(r.stdout).toBe("");
  });

  it("lease show prints the lease", async () => {
    const shown = json<Lease>(await cli(["lease", "show", lease.leaseId]));
    expect(shown).toMatchObject({
      leaseId: lease.leaseId,
      token: lease.token,
      bucket,
      key: "leased",
      fencingToken: lease.fencingToken,
    });
  });

  it("lease renew extends the lease and keeps its token", async () => {
    const renewed = json<Lease>(await cli(["lease", "renew", lease.leaseId, "--ttl-ms", "90000"]));
    expect(renewed.leaseId).toBe(lease.leaseId);
    expect(renewed.token).toBe(lease.token);
    expect(renewed.ttlMs).toBe(90000);
    expect(Date.parse(renewed.expiresAt)).toBeGreaterThan(Date.parse(lease.expiresAt));
  });

  it("lease list shows it", async () => {
    const listed = json<{ leases: Lease[] }>(await cli(["lease", "list", "--bucket", bucket]));
    expect(listed.leases.map((l) => l.leaseId)).toContain(lease.leaseId);
  });

  it("lease release ends it; show then fails", async () => {
    const r = await cli(["lease", "release", lease.leaseId]);
    expect(r.code).toBe(0);
    expect(r.stderr).toContain(`released ${lease.leaseId}`);
    expect((await gw.leases.list({ bucket })).leases.map((l) => l.leaseId)).not.toContain(lease.leaseId);
    const shown = await cli(["lease", "show", lease.leaseId]);
    expect(shown.code).not.toBe(0);
    expect(shown.stderr).toContain("LeaseNotFound");
    const again = await cli(["lease", "release", lease.leaseId]);
    expect(again.code).not.toBe(0);
  });

  it("audit prints the records", async () => {
    const page = json<{ records: AuditRecord[]; nextCursor: string | null }>(
      await cli(["audit", "--lease-id", lease.leaseId]),
    );
    expect(page.records.map((r) => r.op)).toEqual(["LeaseAcquired", "LeaseRenewed", "LeaseReleased"]);
    for (const r of page.records) {
      expect(r).toMatchObject({
        leaseId: lease.leaseId,
        bucket,
        key: "leased",
        token: lease.token,
        decision: "accepted",
        principal: CREDENTIALS.accessKeyId,
        gateway: gw.gatewayId,
      });
    }
    const rejected = json<{ records: AuditRecord[] }>(
      await cli(["audit", "--bucket", bucket, "--decision", "rejected"]),
    );
    expect(rejected.records.some((r) => r.op === "LeaseAcquired" && r.reason === "LeaseHeld")).toBe(true);
    const all = await cli(["audit", "--bucket", bucket, "--all", "--limit", "1", "--output", "ndjson"]);
    expect(all.code).toBe(0);
    const lines = all.stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as AuditRecord);
    expect(lines.length).toBeGreaterThanOrEqual(4);
    const seqs = lines.map((r) => r.seq);
    expect([...seqs].sort((a, b) => a - b)).toEqual(seqs);
  });

  it("reports usage errors with exit code 2", async () => {
    const r = await cli(["lease", "acquire", "--bucket", bucket]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--key or --prefix/);
  });
});

describe("fencegate run", () => {
  it("gives the command FENCE_TOKEN and FENCE_TOKEN_NUMBER, renews past the TTL, then releases", async () => {
    const script = [
      'echo "number=$FENCE_TOKEN_NUMBER"',
      'echo "token=$FENCE_TOKEN"',
      '"$NODE" --import tsx "$PUT" cli run-obj first || exit 11',
      "sleep 4",
      '"$NODE" --import tsx "$PUT" cli run-obj second || exit 12',
    ].join("; ");
    const started = Date.now();
    const r = await cli([
      "run",
      "--bucket",
      bucket,
      "--key",
      "run-obj",
      "--ttl-ms",
      "1500",
      "--",
      "sh",
      "-c",
      script,
    ]);
    expect({ code: r.code, stdout: r.stdout }).toMatchObject({ code: 0 });
    expect(Date.now() - started).toBeGreaterThan(4000);
    const number = Number(/number=(\d+)/.exec(r.stdout)?.[1]);
    expect(Number.isSafeInteger(number) && number > 0).toBe(true);
    const token = /token=(\S+)/.exec(r.stdout)?.[1];
    expect(token).toMatch(/^fg1\./);
    expect(r.stdout).toContain("put run-obj ");
    expect(r.stdout).not.toContain("refused");
    expect(await read("run-obj")).toBe("second");

    // Both writes carried that token; the lease was renewed while the command slept.
    const { records } = (await gw.leases.audit({ bucket, key: "run-obj", limit: "1000" })) as {
      records: AuditRecord[];
    };
    const puts = records.filter((x) => x.op === "PutObject");
    expect(puts.map((x) => [x.decision, x.token])).toEqual([
      ["accepted", number],
      ["accepted", number],
    ]);
    const leaseId = puts[0]!.leaseId!;
    const ops = records.filter((x) => x.leaseId === leaseId).map((x) => x.op);
    expect(ops.filter((o) => o === "LeaseRenewed").length).toBeGreaterThanOrEqual(3);
    expect(ops.at(-1)).toBe("LeaseReleased");
    expect((await gw.leases.list({ bucket })).leases).toEqual([]);
  });

  it("passes the command's exit code through and releases the lease", async () => {
    const r = await cli(["run", "--bucket", bucket, "--key", "exit-code", "--", "sh", "-c", "exit 7"]);
    expect(r.code).toBe(7);
    expect((await gw.leases.list({ bucket })).leases).toEqual([]);
    const ok = await cli(["run", "--bucket", bucket, "--prefix", "p/", "--", "true"]);
    expect(ok.code).toBe(0);
    expect((await gw.leases.list({ bucket })).leases).toEqual([]);
    // A command that died of signal N: 128 + N, whatever the signal (SIGALRM is 14, SIGTERM 15).
    for (const [signal, code] of [
      ["ALRM", 142],
      ["TERM", 143],
    ] as const) {
      const killed = await cli([
        "run",
        "--bucket",
        bucket,
        "--key",
        "signal",
        "--",
        "sh",
        "-c",
        `kill -${signal} $$`,
      ]);
      expect(killed.code, signal).toBe(code);
    }
    expect((await gw.leases.list({ bucket })).leases).toEqual([]);
  });

  it("refuses to start when the lease is held (exit 75) without running the command", async () => {
    const held = await gw.leases.acquire({ bucket, key: "held", ttlMs: 20_000 });
    const r = await cli(["run", "--bucket", bucket, "--key", "held", "--", "sh", "-c", "echo ran"]);
    expect(r.code).toBe(75);
    expect(r.stdout).not.toContain("ran");
    await gw.leases.release(held.leaseId);
  });

  it("stops the command with SIGTERM and exits 81 when the lease is released by someone else", async () => {
    const script = [
      "trap 'echo got-term; kill \"$pid\" 2>/dev/null; exit 143' TERM",
      'echo "started $FENCE_LEASE_ID $FENCE_TOKEN"',
      "sleep 30 & pid=$!",
      'wait "$pid"',
      "echo finished-normally",
    ].join("; ");
    const run = start([
      "run",
      "--bucket",
      bucket,
      "--key",
      "lost",
      "--ttl-ms",
      "1500",
      "--",
      "sh",
      "-c",
      script,
    ]);
    await waitFor(() => /started \S+ \S+/.test(run.output().stdout), {
      what: "the command to start",
      details: () => JSON.stringify(run.output()),
    });
    const [, leaseId = "", fencingToken = ""] = /started (\S+) (\S+)/.exec(run.output().stdout)!;
    const shown = await gw.leases.show(leaseId);
    expect(shown.key).toBe("lost");
    const t0 = Date.now();
    await gw.leases.release(leaseId);
    const r = await run.done;
    expect(r.code).toBe(81);
    expect(r.stdout).toContain("got-term");
    expect(r.stdout).not.toContain("finished-normally");
    expect(r.stderr).toMatch(
      new RegExp(`lease lost: lease ${leaseId} \\(token \\d+\\) was released by ${CREDENTIALS.accessKeyId}`),
    );
    expect(r.stderr).not.toMatch(/broken|superseded|expired/);
    // Noticed at the next renewal (a third of the TTL), not after the command's 30 s.
    expect(Date.now() - t0).toBeLessThan(15_000);
    // run does not release a lease it lost; the release the test made is the last event.
    const { records } = (await gw.leases.audit({ leaseId, limit: "1000" })) as { records: AuditRecord[] };
    expect(records.map((x) => x.op).filter((o) => o === "LeaseReleased")).toEqual(["LeaseReleased"]);
    // A write with the lost lease's token is refused.
    const refused = await s3
      .send(
        new PutObjectCommand({
          Bucket: bucket,
          Key: "lost",
          Body: "late",
          Metadata: { "fence-token": fencingToken },
        }),
      )
      .then(
        () => null,
        (e: Error & { $metadata?: { httpStatusCode?: number } }) => e,
      );
    expect(refused?.name).toBe("LeaseExpired");
    expect(refused?.$metadata?.httpStatusCode).toBe(409);
  });

  /** `run` holding KEY with a 1.5 s TTL, running a command that waits to be stopped. */
  async function running(key: string) {
    const script = [
      "trap 'exit 143' TERM",
      'echo "started $FENCE_LEASE_ID"',
      "while :; do sleep 0.2; done",
    ].join("; ");
    const run = start([
      "run",
      "--bucket",
      bucket,
      "--key",
      key,
      "--ttl-ms",
      "1500",
      "--",
      "sh",
      "-c",
      script,
    ]);
    await waitFor(() => /started \S+/.test(run.output().stdout), {
      what: "the command to start",
      details: () => JSON.stringify(run.output()),
    });
    const leaseId = /started (\S+)/.exec(run.output().stdout)![1]!;
    return { run, leaseId };
  }

  it("says the lease was broken by an administrator, and exits 80", async () => {
    const { run, leaseId } = await running("broken");
    await gw.leases.breakLease(leaseId);
    const r = await run.done;
    expect(r.code).toBe(80);
    expect(r.stderr).toMatch(
      new RegExp(
        `lease ${leaseId} \\(token \\d+\\) was broken by an administrator \\(${CREDENTIALS.accessKeyId} at `,
      ),
    );
    expect(r.stderr).not.toMatch(/released|superseded|expired/);
  });

  it("says the lease expired (76), or was superseded by token N (82), when it could not renew in time", async () => {
    // SIGSTOP keeps run from renewing past the TTL; it notices when it runs again.
    const expired = await running("expires");
    expired.run.child.kill("SIGSTOP");
    await new Promise((r) => setTimeout(r, 2500));
    expired.run.child.kill("SIGCONT");
    const r1 = await expired.run.done;
    expect(r1.code, r1.stderr).toBe(76);
    expect(r1.stderr).toMatch(
      new RegExp(`lease ${expired.leaseId} \\(token \\d+\\) expired: it was not renewed in time`),
    );

    const superseded = await running("superseded");
    superseded.run.child.kill("SIGSTOP");
    await new Promise((r) => setTimeout(r, 2500));
    const newer = await gw.leases.acquire({ bucket, key: "superseded", ttlMs: 20_000, owner: "newcomer" });
    superseded.run.child.kill("SIGCONT");
    const r2 = await superseded.run.done;
    expect(r2.code, r2.stderr).toBe(82);
    expect(r2.stderr).toContain(
      `expired and was superseded by token ${newer.token} (lease ${newer.leaseId}, owner newcomer)`,
    );
    await gw.leases.release(newer.leaseId);
  });
});

describe("fencegate serve", () => {
  it("exits non-zero naming the bad field of an invalid configuration", async () => {
    const dir = tempDir("fencegate-cli-serve-");
    try {
      const file = join(dir.path, "bad.yaml");
      writeFileSync(file, "server:\n  port: not-a-port\n");
      const r = await cli(["serve", "--config", file], { FENCEGATE_DATA_DIR: join(dir.path, "data") });
      expect(r.code).not.toBe(0);
      expect(r.code).not.toBeNull();
      expect(r.stderr).toContain("server.port");
      expect(r.stdout).not.toContain("listening");

      writeFileSync(file, "fencing:\n  default: sometimes\n");
      const r2 = await cli(["serve"], { FENCEGATE_CONFIG: file, FENCEGATE_DATA_DIR: join(dir.path, "data") });
      expect(r2.code).not.toBe(0);
      expect(r2.stderr).toContain("fencing.default");
    } finally {
      dir.cleanup();
    }
  });

  it("exits non-zero when the data directory is already in use", async () => {
    const r = await cli(["serve"], { FENCEGATE_DATA_DIR: gw.dataDir, FENCEGATE_PORT: "0" });
    expect(r.code).not.toBe(0);
    expect(r.code).not.toBeNull();
    expect(r.stderr).toMatch(/in use/);
    expect(r.stderr).toContain(gw.dataDir);
    expect(r.stdout).not.toContain("listening");
    // The running gateway is unaffected.
    expect((await gw.leases.list({})).leases).toBeDefined();
    expect(await fetch(`${gw.url}/_fence/v1/health`).then((res) => res.status)).toBe(200);
  });

  it("refuses a non-loopback address with the development credentials", async () => {
    const dir = tempDir("fencegate-cli-serve-");
    try {
      const r = await cli(["serve"], {
        FENCEGATE_DATA_DIR: dir.path,
        FENCEGATE_HOST: "0.0.0.0",
        FENCEGATE_PORT: "0",
        FENCEGATE_TOKEN_SIGNING_KEY: "a-shared-signing-secret-of-32-bytes",
      });
      expect(r.code).not.toBe(0);
      expect(r.stderr).toMatch(/credentials/);
      expect(r.stdout).not.toContain("listening");
    } finally {
      dir.cleanup();
    }
  });
});
