import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { DuckDBInstance } from "@duckdb/node-api";
import type { Command } from "commander";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AuditRecord } from "../../src/audit/audit-log.js";
import { outputMode, table } from "../../src/cli/output.js";
import { buildProgram } from "../../src/cli/program.js";
import type { LeaseView } from "../../src/client/types.js";
import { CREDENTIALS, ROOT, startTestGateway, type TestGateway, tempDir } from "../support/gateway.js";
import { waitFor } from "../support/wait.js";

/**
 * The command line as people and scripts use it (the real CLI in a process, against an
 * in-process gateway): --help everywhere, table / JSON / NDJSON output, bad values, a reader that
 * goes away, audit --follow and audit export read back by DuckDB.
 */

const MAIN = join(ROOT, "src/cli/main.ts");
type Result = { code: number | null; stdout: string; stderr: string };

let gw: TestGateway;
const bucket = "cli-out";

function start(args: string[], env: Record<string, string> = {}) {
  const child = spawn(process.execPath, ["--import", "tsx", MAIN, ...args], {
    cwd: ROOT,
    env: {
      ...process.env,
      FENCEGATE_ENDPOINT: gw?.url ?? "http://127.0.0.1:9",
      AWS_ACCESS_KEY_ID: CREDENTIALS.accessKeyId,
      AWS_SECRET_ACCESS_KEY: CREDENTIALS.secretAccessKey,
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
    }, 60_000);
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
  return { child: child as ChildProcess, output: () => ({ stdout, stderr }), done };
}
const cli = (args: string[], env: Record<string, string> = {}) => start(args, env).done;

/** Every command path of the tree, e.g. ["lease", "delegates", "add"]. */
function commandPaths(cmd: Command, prefix: string[] = []): string[][] {
  return cmd.commands.flatMap((c) => [[...prefix, c.name()], ...commandPaths(c, [...prefix, c.name()])]);
}

function commandAt(program: Command, path: string[]): Command {
  return path.reduce((c, name) => c.commands.find((sub) => sub.name() === name)!, program);
}

async function inBatches<T, R>(items: T[], size: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = [];
  for (let i = 0; i < items.length; i += size)
    out.push(...(await Promise.all(items.slice(i, i + size).map(fn))));
  return out;
}

beforeAll(async () => {
  gw = await startTestGateway({
    overrides: { pools: { tiles: { bucket, prefix: "tiles/", groups: 4 } } },
  });
  await gw.s3().send(new (await import("@aws-sdk/client-s3")).CreateBucketCommand({ Bucket: bucket }));
}, 60_000);

afterAll(async () => {
  await gw?.stop();
});

describe("--help", () => {
  it("every command and subcommand prints its usage to stdout and exits 0", async () => {
    const paths = [[], ...commandPaths(buildProgram())];
    // The tree has what the contract names.
    const names = paths.map((p) => p.join(" "));
    for (const expected of [
      "serve",
      "lease list",
      "lease show",
      "lease acquire",
      "lease renew",
      "lease release",
      "lease break",
      "lease delegates add",
      "lease delegates list",
      "lease delegates revoke",
      "pools claim",
      "pools leave",
      "audit",
      "audit export",
      "run",
      "transaction show",
      "transaction commit",
      "transaction abort",
      "backend verify",
    ]) {
      expect(names).toContain(expected);
    }
    const results = await inBatches(paths, 4, async (path) => ({ path, r: await cli([...path, "--help"]) }));
    for (const { path, r } of results) {
      expect({ path, code: r.code, stderr: r.stderr }).toEqual({ path, code: 0, stderr: "" });
      expect(r.stdout).toMatch(new RegExp(`^Usage: fencegate${path.length ? ` ${path.join(" ")}` : ""}`));
    }
    // The exit codes are documented in the top-level help.
    const top = results.find(({ path }) => path.length === 0)!.r.stdout;
    for (const code of ["0 ", "1 ", "2 ", "69", "75", "76", "77", "80", "81", "82", "83", "84"]) {
      expect(top).toMatch(new RegExp(`^ {2}${code}`, "m"));
    }
  }, 240_000);

  it("a group without its subcommand prints its usage on stderr and exits 2", async () => {
    for (const args of [[], ["lease"], ["lease", "delegates"], ["pools"], ["transaction"], ["backend"]]) {
      const r = await cli(args);
      expect({ args, code: r.code, stdout: r.stdout }).toEqual({ args, code: 2, stdout: "" });
      expect(r.stderr).toContain("Usage: fencegate");
    }
  }, 60_000);
});

describe("bad values", () => {
  it("are refused with exit 2 and a one-line message naming the value, before any request", async () => {
    const cases: Array<[string[], RegExp]> = [
      [["audit", "--op", "Bogus"], /'Bogus' is invalid/],
      [["audit", "--decision", "maybe"], /'maybe' is invalid.*accepted, rejected, unknown/],
      [["lease", "list", "--output", "xml"], /'xml' is invalid.*table, json, ndjson/],
      [["audit", "export", "--format", "xlsx"], /'xlsx' is invalid/],
      [["audit", "export"], /--format/],
      [["audit", "--since", "yesterday"], /--since must be an ISO 8601/],
      [["audit", "--limit", "5000"], /--limit must be from 1 to 1000/],
      [["audit", "--limit", "ten"], /--limit must be a whole number/],
      [
        ["lease", "acquire", "--bucket", bucket, "--key", "k", "--ttl-ms", "soon"],
        /--ttl-ms must be a whole number/,
      ],
      [["lease", "acquire", "--bucket", bucket], /--key or --prefix/],
      [["lease", "frobnicate"], /unknown command 'frobnicate'/],
      [["lease", "show"], /missing required argument/],
      [["lease", "list", "--colour"], /unknown option '--colour'/],
    ];
    const results = await inBatches(cases, 4, async ([args, why]) => ({ args, why, r: await cli(args) }));
    for (const { args, why, r } of results) {
      expect({ args, code: r.code, stdout: r.stdout }).toEqual({ args, code: 2, stdout: "" });
      expect(r.stderr.trimEnd().split("\n"), r.stderr).toHaveLength(1);
      expect(r.stderr).toMatch(why);
      expect(r.stderr).not.toMatch(/\n\s+at /);
    }
  }, 120_000);
});

describe("output", () => {
  it("every command that talks to a gateway and prints its answer takes --output table|json|ndjson", () => {
    // Not serve, version and backend verify (no gateway), run (it prints its command's output) and audit
    // export (its --format chooses the file format).
    const own = new Set(["serve", "version", "backend verify", "run", "audit export"]);
    const groups = new Set(["lease", "lease delegates", "pools", "transaction", "backend", "help"]);
    const program = buildProgram();
    const client = commandPaths(program).filter((p) => !own.has(p.join(" ")) && !groups.has(p.join(" ")));
    expect(client.length).toBeGreaterThan(12);
    for (const path of client) {
      const flags = commandAt(program, path).options.map((o) => o.long);
      expect({ path, flags }).toEqual({ path, flags: expect.arrayContaining(["--output"]) });
    }
  });

  it("release, revoke and abort print what they ended in the chosen format", async () => {
    const lease = await gw.leases.acquire({ bucket, key: "out-release", ttlMs: 60_000, owner: "o" });
    const released = await cli(["lease", "release", lease.leaseId, "--output", "ndjson"]);
    expect(released.code, released.stderr).toBe(0);
    expect(JSON.parse(released.stdout)).toEqual({ leaseId: lease.leaseId, released: true });
    const again = await cli(["lease", "release", lease.leaseId, "--output", "table"]);
    expect(again.code).not.toBe(0);
    expect(again.stderr).toContain("LeaseNotFound");

    const held = await gw.leases.acquire({ bucket, key: "out-revoke", ttlMs: 60_000, owner: "o" });
    const { delegateId } = await gw.leases.delegate(held.leaseId);
    const revoked = await cli([
      "lease",
      "delegates",
      "revoke",
      held.leaseId,
      delegateId,
      "--output",
      "table",
    ]);
    expect(revoked.code, revoked.stderr).toBe(0);
    expect(revoked.stdout).toMatch(new RegExp(`^delegateId: +${delegateId}$`, "m"));
    expect(revoked.stdout).toMatch(/^revoked: +true$/m);

    const tx = await gw.leases.openTransaction(held.leaseId);
    const aborted = await cli(["transaction", "abort", tx.transactionId, "--output", "json"]);
    expect(aborted.code, aborted.stderr).toBe(0);
    expect(JSON.parse(aborted.stdout)).toEqual({ transactionId: tx.transactionId, aborted: true });
    await gw.leases.release(held.leaseId);
  });
  it("is a table on a terminal and JSON when piped, unless --output says", () => {
    const tty = process.stdout.isTTY;
    try {
      process.stdout.isTTY = true;
      expect(outputMode(undefined)).toBe("table");
      process.stdout.isTTY = false;
      expect(outputMode(undefined)).toBe("json");
      expect(outputMode("ndjson")).toBe("ndjson");
    } finally {
      process.stdout.isTTY = tty;
    }
    expect(
      table(
        [
          { a: "x", b: 1 },
          { a: "longer", b: null },
        ],
        [
          ["A", (r) => r.a],
          ["B", (r) => r.b],
        ],
      ),
    ).toBe("A       B\nx       1\nlonger  -\n");
  });

  it("lease list prints JSON when piped, one lease per line with ndjson, and a table with table", async () => {
    const a = await gw.leases.acquire({ bucket, key: "out/a", ttlMs: 60_000, owner: "alice" });
    const b = await gw.leases.acquire({ bucket, prefix: "out/p/", ttlMs: 60_000, owner: "bob" });
    try {
      const piped = await cli(["lease", "list", "--bucket", bucket]);
      expect(piped.code, piped.stderr).toBe(0);
      const doc = JSON.parse(piped.stdout) as { leases: LeaseView[] };
      expect(doc.leases.map((l) => l.leaseId).sort()).toEqual([a.leaseId, b.leaseId].sort());

      const nd = await cli(["lease", "list", "--bucket", bucket, "--output", "ndjson"]);
      const lines = nd.stdout.trimEnd().split("\n");
      expect(lines).toHaveLength(2);
      expect(lines.map((l) => (JSON.parse(l) as LeaseView).leaseId).sort()).toEqual(
        [a.leaseId, b.leaseId].sort(),
      );

      const t = await cli(["lease", "list", "--bucket", bucket, "--output", "table"]);
      const rows = t.stdout.trimEnd().split("\n");
      expect(rows[0]).toMatch(/^LEASE ID\s+BUCKET\s+RESOURCE\s+OWNER\s+TOKEN\s+STATE\s+EXPIRES\s+WAITERS$/);
      const rowA = rows.find((r) => r.startsWith(a.leaseId))!;
      expect(rowA.split(/\s{2,}/)).toEqual([
        a.leaseId,
        bucket,
        "out/a",
        "alice",
        String(a.token),
        "active",
        expect.stringMatching(/^in \d+s$/),
        "0",
      ]);
      expect(rows.find((r) => r.startsWith(b.leaseId))).toContain("out/p/*");

      const shown = await cli(["lease", "show", a.leaseId, "--output", "table"]);
      expect(shown.stdout).toMatch(new RegExp(`^leaseId:\\s+${a.leaseId}$`, "m"));
      expect(shown.stdout).toMatch(/^expiresAt:\s+\S+ \(in \d+s\)$/m);
    } finally {
      await gw.leases.release(a.leaseId);
      await gw.leases.release(b.leaseId);
    }
  }, 60_000);

  it("LeaseHeld names the holder, its token and until when (exit 75)", async () => {
    const held = await gw.leases.acquire({ bucket, key: "held", ttlMs: 60_000, owner: "holder-7" });
    try {
      const r = await cli(["lease", "acquire", "--bucket", bucket, "--key", "held"]);
      expect(r.code).toBe(75);
      expect(r.stdout).toBe("");
      expect(r.stderr).toContain(
        `held by holder-7 (lease ${held.leaseId}, token ${held.token}, key held) until ${held.expiresAt}`,
      );
    } finally {
      await gw.leases.release(held.leaseId);
    }
  }, 30_000);
});

describe("lease break, delegates and pools", () => {
  it("break ends a lease; delegates add, list and revoke; pools claim and leave", async () => {
    const lease = await gw.leases.acquire({ bucket, key: "brk", ttlMs: 60_000, owner: "w1" });
    const added = await cli(["lease", "delegates", "add", lease.leaseId, "--output", "json"]);
    expect(added.code, added.stderr).toBe(0);
    const delegate = JSON.parse(added.stdout) as { delegateId: string; secretAccessKey: string };
    expect(delegate.secretAccessKey.length).toBeGreaterThan(10);
    const listed = JSON.parse((await cli(["lease", "delegates", "list", lease.leaseId])).stdout) as {
      delegates: Array<{ delegateId: string }>;
    };
    expect(listed.delegates.map((d) => d.delegateId)).toEqual([delegate.delegateId]);
    const revoked = await cli(["lease", "delegates", "revoke", lease.leaseId, delegate.delegateId]);
    expect(revoked.code, revoked.stderr).toBe(0);
    expect((await gw.leases.listDelegates(lease.leaseId)).delegates).toEqual([]);

    const broken = await cli(["lease", "break", lease.leaseId]);
    expect(broken.code, broken.stderr).toBe(0);
    const body = JSON.parse(broken.stdout) as { floorToken: number; leaseId: string };
    expect(body.leaseId).toBe(lease.leaseId);
    expect(body.floorToken).toBeGreaterThan(lease.token);
    expect((await gw.leases.list({ bucket })).leases.map((l) => l.leaseId)).not.toContain(lease.leaseId);
    const again = await cli(["lease", "break", lease.leaseId]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("LeaseNotFound");

    const claim = await cli(["pools", "claim", "tiles", "--owner", "w1", "--ttl-ms", "60000"]);
    expect(claim.code, claim.stderr).toBe(0);
    const claimed = JSON.parse(claim.stdout) as { groups: Array<{ group: number }>; target: number };
    expect(claimed.target).toBe(4);
    expect(claimed.groups.map((g) => g.group)).toEqual([0, 1, 2, 3]);
    const table = await cli(["pools", "claim", "tiles", "--owner", "w1", "--output", "table"]);
    expect(table.stdout).toMatch(/^pool tiles: w1 holds 4 of its share 4/);
    const left = await cli(["pools", "leave", "tiles", "w1"]);
    expect(JSON.parse(left.stdout)).toEqual({ released: 4 });
    const none = await cli(["pools", "claim", "nosuch", "--owner", "w1"]);
    expect(none.code).toBe(1);
    expect(none.stderr).toContain("no pool nosuch");
  }, 90_000);
});

describe("audit", () => {
  let records: AuditRecord[];

  beforeAll(async () => {
    // Enough records to page through (each grant and release is one).
    for (let i = 0; i < 60; i++) {
      const l = await gw.leases.acquire({ bucket, key: `many/${i % 7},"q"`, ttlMs: 60_000, owner: `o${i}` });
      await gw.leases.release(l.leaseId);
    }
    records = [];
    let cursor: string | undefined;
    do {
      const page = (await gw.leases.audit({ bucket, limit: "1000", cursor })) as {
        records: AuditRecord[];
        nextCursor: string | null;
      };
      records.push(...page.records);
      cursor = page.nextCursor ?? undefined;
    } while (cursor);
  }, 120_000);

  it("--all in JSON is every record; --op and --decision filter", async () => {
    const all = await cli(["audit", "--bucket", bucket, "--all", "--limit", "7"]);
    expect(all.code, all.stderr).toBe(0);
    expect((JSON.parse(all.stdout) as { records: AuditRecord[] }).records.map((r) => r.seq)).toEqual(
      records.map((r) => r.seq),
    );
    const released = await cli([
      "audit",
      "--bucket",
      bucket,
      "--op",
      "LeaseReleased",
      "--decision",
      "accepted",
      "--all",
    ]);
    const got = (JSON.parse(released.stdout) as { records: AuditRecord[] }).records;
    expect(got.length).toBeGreaterThanOrEqual(60);
    expect(got.every((r) => r.op === "LeaseReleased" && r.decision === "accepted")).toBe(true);
  }, 60_000);

  it("a reader that goes away (audit --all | head -1) ends it quietly", async () => {
    const run = start(["audit", "--bucket", bucket, "--all", "--limit", "1", "--output", "ndjson"]);
    await waitFor(() => run.output().stdout.includes("\n"), { what: "the first record" });
    run.child.stdout!.destroy();
    const r = await run.done;
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
  }, 60_000);

  it("--follow prints records as they are recorded", async () => {
    // From this moment on, however long the command takes to start on a loaded machine.
    const since = new Date().toISOString();
    const run = start([
      "audit",
      "--follow",
      "--since",
      since,
      "--bucket",
      bucket,
      "--output",
      "ndjson",
      "--interval-ms",
      "200",
    ]);
    try {
      await new Promise((r) => setTimeout(r, 1500));
      const first = await gw.leases.acquire({ bucket, key: "followed", ttlMs: 60_000 });
      await waitFor(() => run.output().stdout.includes(first.leaseId), {
        what: "the grant to be printed",
        details: () => JSON.stringify(run.output()),
      });
      await gw.leases.release(first.leaseId);
      await waitFor(() => run.output().stdout.includes('"LeaseReleased"'), {
        what: "the release to be printed",
      });
      const lines = run
        .output()
        .stdout.trimEnd()
        .split("\n")
        .map((l) => JSON.parse(l) as AuditRecord);
      // Only what happened after it started, each record once, in order.
      expect(lines.map((r) => [r.op, r.leaseId])).toEqual([
        ["LeaseAcquired", first.leaseId],
        ["LeaseReleased", first.leaseId],
      ]);
    } finally {
      run.child.kill("SIGINT");
      await run.done;
    }
  }, 60_000);

  it("export writes ndjson, csv and parquet that DuckDB reads back record for record", async () => {
    const dir = tempDir("fencegate-cli-export-");
    try {
      const since = records[10]!.time;
      const until = records.at(-5)!.time;
      const expected = records.filter((r) => r.time >= since && r.time < until);
      expect(expected.length).toBeGreaterThan(50);
      const range = ["--bucket", bucket, "--since", since, "--until", until];
      const files: Record<string, string> = {};
      for (const format of ["ndjson", "csv", "parquet"]) {
        files[format] = join(dir.path, `audit.${format}`);
        const r = await cli(["audit", "export", "--format", format, "--out", files[format]!, ...range]);
        expect(r.code, r.stderr).toBe(0);
        expect(r.stderr).toContain(`wrote ${expected.length} records`);
      }
      const nd = readFileSync(files.ndjson!, "utf8")
        .trimEnd()
        .split("\n")
        .map((l) => JSON.parse(l) as AuditRecord);
      expect(nd).toEqual(expected);

      const db = await DuckDBInstance.create(":memory:");
      const conn = await db.connect();
      const want = expected.map((r) => ({
        seq_text: String(r.seq),
        op: r.op,
        key: r.key,
        token: r.token === null ? null : String(r.token),
        owner: r.owner,
        decision: r.decision,
        ms: String(Date.parse(r.time)),
      }));
      for (const reader of [`read_parquet('${files.parquet}')`, `read_csv('${files.csv}', header = true)`]) {
        const rows = await conn.runAndReadAll(
          `select seq::varchar seq_text, op, key, token::varchar token, owner, decision, epoch_ms(time::timestamp)::varchar ms from ${reader} order by seq`,
        );
        expect(rows.getRowObjectsJson()).toEqual(want);
      }
      const types = await conn.runAndReadAll(
        `select typeof(seq) s, typeof(time) t, typeof(token) k from read_parquet('${files.parquet}') limit 1`,
      );
      expect(types.getRowObjectsJson()).toEqual([{ s: "BIGINT", t: "TIMESTAMP", k: "BIGINT" }]);
      conn.closeSync();
    } finally {
      dir.cleanup();
    }
  }, 90_000);
});
