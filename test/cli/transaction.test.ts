import { spawn } from "node:child_process";
import { join } from "node:path";
import { CreateBucketCommand, GetObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TransactionCommit, TransactionView } from "../../src/client/types.js";
import { CREDENTIALS, ROOT, startTestGateway, type TestGateway } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";

checkLeaseApiResponses();

/**
 * `fencegate run --transaction` and `fencegate transaction show|commit|abort`: the real CLI in a
 * process against an in-process gateway; the command under run writes with the @aws-sdk/client-s3
 * client, carrying its token and transaction as metadata (fixtures/tx-put.ts).
 */

const MAIN = join(ROOT, "src/cli/main.ts");
const TXPUT = join(ROOT, "test/cli/fixtures/tx-put.ts");
type Result = { code: number | null; stdout: string; stderr: string };

let gw: TestGateway;
let s3: S3Client;
const bucket = "cli-tx";

function cli(args: string[], env: Record<string, string> = {}): Promise<Result> {
  const child = spawn(process.execPath, ["--import", "tsx", MAIN, ...args], {
    cwd: ROOT,
    env: {
      ...process.env,
      FENCEGATE_ENDPOINT: gw.url,
      AWS_ACCESS_KEY_ID: CREDENTIALS.accessKeyId,
      AWS_SECRET_ACCESS_KEY: CREDENTIALS.secretAccessKey,
      NODE: process.execPath,
      MAIN,
      TXPUT,
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => {
    stdout += d;
  });
  child.stderr.on("data", (d) => {
    stderr += d;
  });
  return new Promise<Result>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`fencegate ${args.join(" ")} did not finish:\n${stdout}\n${stderr}`));
    }, 45_000);
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** The command under run: tx-put.ts writing KEY=BODY pairs inside FENCE_TRANSACTION. */
const txPut = (...pairs: string[]) => ["--", process.execPath, "--import", "tsx", TXPUT, bucket, ...pairs];

async function plainRead(key: string): Promise<string | null> {
  try {
    const out = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    return await out.Body!.transformToString();
  } catch (e) {
    if ((e as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode === 404) return null;
    throw e;
  }
}

/** The transaction id run names on stderr. */
function transactionIdOf(r: Result): string {
  const m = /transaction (\S+) (committed|aborted|was not committed)/.exec(r.stderr);
  expect(m, r.stderr).not.toBeNull();
  return m![1]!;
}

beforeAll(async () => {
  gw = await startTestGateway();
  s3 = gw.s3();
  await s3.send(new CreateBucketCommand({ Bucket: bucket }));
});
afterAll(async () => {
  await gw?.stop();
});

describe("fencegate run --transaction", () => {
  it("commits when the command exits 0: its writes are hidden while it runs, all visible after", async () => {
    const r = await cli([
      "run",
      "--transaction",
      "--bucket",
      bucket,
      "--prefix",
      "ok/",
      ...txPut("ok/a=A", "ok/b=B"),
    ]);
    expect({ code: r.code, stderr: r.stderr }).toMatchObject({ code: 0 });
    expect(r.stdout).toBe("hidden ok/a\nhidden ok/b\n");
    expect(r.stderr).toMatch(/transaction \S+ committed \(token \d+, 2 objects visible\)/);
    const id = transactionIdOf(r);
    expect(await plainRead("ok/a")).toBe("A");
    expect(await plainRead("ok/b")).toBe("B");
    // The lease was released afterwards.
    expect((await gw.leases.list({ bucket })).leases).toEqual([]);

    // transaction show / commit (again: the same answer) / abort (refused: it is committed).
    const show = await cli(["transaction", "show", id, "--output", "json"]);
    expect(show.code, show.stderr).toBe(0);
    const view = JSON.parse(show.stdout) as TransactionView;
    expect(view).toMatchObject({ transactionId: id, bucket, state: "committed" });
    expect(view.objects.map((o) => o.key).sort()).toEqual(["ok/a", "ok/b"]);
    const table = await cli(["transaction", "show", id, "--output", "table"]);
    expect(table.stdout).toMatch(/^state: +committed$/m);
    expect(table.stdout).toMatch(/^ok\/a +"?\S+/m);
    const again = await cli(["transaction", "commit", id, "--output", "json"]);
    expect(again.code, again.stderr).toBe(0);
    expect((JSON.parse(again.stdout) as TransactionCommit).objects).toEqual(view.objects);
    // The audit log has the transaction's writes and its commit, found by its id.
    const audit = await cli(["audit", "--transaction-id", id, "--output", "json"]);
    expect(audit.code, audit.stderr).toBe(0);
    const ops = (JSON.parse(audit.stdout) as { records: { op: string; transactionId?: string }[] }).records;
    expect(ops.map((r) => r.op)).toEqual(["PutObject", "PutObject", "TransactionCommitted"]);
    expect(ops.every((r) => r.transactionId === id)).toBe(true);
    const abort = await cli(["transaction", "abort", id]);
    expect(abort.code).toBe(1);
    expect(abort.stderr).toMatch(/TransactionCommitted \(HTTP 409\)/);
  }, 90_000);

  it("aborts when the command fails, and exits with its code: nothing is visible", async () => {
    const r = await cli(
      ["run", "--transaction", "--bucket", bucket, "--key", "fail/a", ...txPut("fail/a=A")],
      {
        TX_EXIT: "1",
      },
    );
    expect(r.code, r.stderr).toBe(1);
    expect(r.stdout).toBe("hidden fail/a\n");
    expect(r.stderr).toMatch(/the command exited 1: transaction \S+ aborted \(nothing of it is visible\)/);
    const id = transactionIdOf(r);
    expect(await plainRead("fail/a")).toBeNull();
    const show = await cli(["transaction", "show", id, "--output", "json"]);
    expect(JSON.parse(show.stdout)).toMatchObject({
      transactionId: id,
      state: "aborted",
      reason: "ClientAbort",
    });
    // Committing it now is a refusal: 83.
    const commit = await cli(["transaction", "commit", id]);
    expect(commit.code).toBe(83);
    expect(commit.stderr).toMatch(/TransactionAborted \(HTTP 409\).*nothing of the transaction is visible/);
    expect((await gw.leases.list({ bucket })).leases).toEqual([]);
  }, 60_000);

  it("exits 83 with the reason when the commit is refused (the command exited 0)", async () => {
    // The command writes, then its transaction is aborted behind run's back.
    const r = await cli([
      "run",
      "--transaction",
      "--bucket",
      bucket,
      "--key",
      "refused/a",
      "--",
      "sh",
      "-c",
      '"$NODE" --import tsx "$TXPUT" cli-tx refused/a=A && "$NODE" --import tsx "$MAIN" transaction abort "$FENCE_TRANSACTION"',
    ]);
    expect(r.code, r.stderr).toBe(83);
    expect(r.stderr).toMatch(
      /transaction \S+ was not committed: TransactionAborted \(HTTP 409\): .*; nothing of it is visible/,
    );
    expect(await plainRead("refused/a")).toBeNull();
    expect((await gw.leases.list({ bucket })).leases).toEqual([]);
  }, 60_000);

  it("gives FENCE_TRANSACTION only with --transaction", async () => {
    const r = await cli([
      "run",
      "--bucket",
      bucket,
      "--key",
      "plain",
      "--",
      "sh",
      "-c",
      "printenv FENCE_TRANSACTION || echo none",
    ]);
    expect({ code: r.code, stdout: r.stdout }).toEqual({ code: 0, stdout: "none\n" });
  });

  it("documents --transaction, FENCE_TRANSACTION and its exit codes in --help", async () => {
    const run = await cli(["run", "--help"]);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain("--transaction");
    expect(run.stdout).toContain("FENCE_TRANSACTION");
    expect(run.stdout).toMatch(/exits 83/);
    expect(run.stdout).toMatch(/84/);
    const top = await cli(["--help"]);
    expect(top.stdout).toMatch(/^ {2}83 /m);
    expect(top.stdout).toMatch(/^ {2}84 /m);
    for (const sub of ["show", "commit", "abort"]) {
      const h = await cli(["transaction", sub, "--help"]);
      expect({ sub, code: h.code }).toEqual({ sub, code: 0 });
      expect(h.stdout).toMatch(new RegExp(`^Usage: fencegate transaction ${sub}`));
    }
  }, 60_000);
});
