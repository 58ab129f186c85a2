import { execFile, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { GetObjectCommand, HeadObjectCommand, PutObjectCommand } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, expect } from "vitest";
import type { Lease } from "../../src/client/lease-client.js";
import { CREDENTIALS, startTestGateway, type TestGateway, tempDir } from "../support/gateway.js";
import { requireTools, TOOLS, type ToolName } from "../support/tools.js";
import { sleep } from "../support/wait.js";

/**
 * Shared pieces of the client compatibility suites: each suite drives one real S3 client (a
 * separate program) against its own in-process gateway, with an environment built from
 * scratch so that nothing from the developer's shell or home directory leaks in.
 */

export const FIXTURES = resolve(import.meta.dirname, "fixtures");
export const MiB = 1024 * 1024;

/** What a suite's beforeAll sets up: its own gateway and, with `tempPrefix`, its own temp dir. */
export type ClientSuite = {
  readonly gw: TestGateway;
  /** The temp dir: the clients' cwd, holding their config files, their data and `home`. */
  readonly dir: string;
  /** The clients' private HOME, inside `dir`. */
  readonly home: string;
  /** A path in `dir`. */
  local(name: string): string;
};

/**
 * Registers the beforeAll/afterAll of a client suite: first the check that its `tools` are
 * installed (a missing one fails the suite at once with one line naming the Debian package, see
 * requireTools), then a temp dir (with `tempPrefix`), an in-process gateway (started with
 * `gateway`), then `setup` (the client's config files, which may name the gateway's URL);
 * afterwards the gateway is stopped and the temp dir removed.
 */
export function clientSuite(
  opts: {
    tools?: ToolName[];
    tempPrefix?: string;
    gateway?: Parameters<typeof startTestGateway>[0];
    setup?: (suite: ClientSuite) => void;
  } = {},
): ClientSuite {
  if (opts.tools !== undefined) requireTools(...opts.tools);
  let gw: TestGateway | undefined;
  let tmp: { path: string; cleanup(): void } | undefined;
  const suite: ClientSuite = {
    get gw() {
      if (gw === undefined) throw new Error("the suite's gateway is not running (it starts in beforeAll)");
      return gw;
    },
    get dir() {
      if (tmp === undefined) throw new Error("the suite has no temp dir (clientSuite without tempPrefix)");
      return tmp.path;
    },
    get home() {
      return join(suite.dir, "home");
    },
    local: (name) => join(suite.dir, name),
  };
  beforeAll(async () => {
    if (opts.tempPrefix !== undefined) tmp = tempDir(opts.tempPrefix);
    gw = await startTestGateway(opts.gateway);
    opts.setup?.(suite);
  });
  afterAll(async () => {
    await gw?.stop();
    tmp?.cleanup();
  });
  return suite;
}

/**
 * Writes a client's INI config file (aws cli, s3cmd, rclone): each section as `[name]` then
 * its `key = value` lines, with a final newline.
 */
export function writeIni(path: string, sections: Record<string, Record<string, string>>): string {
  const lines = Object.entries(sections).flatMap(([name, entries]) => [
    `[${name}]`,
    ...Object.entries(entries).map(([key, value]) => `${key} = ${value}`),
  ]);
  return writeFile(path, [...lines, ""].join("\n"));
}

/**
 * The environment a client runs with: credentials, region and a private HOME, and nothing
 * else from this process but PATH. AWS_CA_BUNDLE in particular is left out (it makes rclone
 * fail on these machines), which is what `env -u AWS_CA_BUNDLE` would do.
 */
export function clientEnv(home: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: home,
    LANG: "C.UTF-8",
    LC_ALL: "C.UTF-8",
    TZ: "UTC",
    AWS_ACCESS_KEY_ID: CREDENTIALS.accessKeyId,
    AWS_SECRET_ACCESS_KEY: CREDENTIALS.secretAccessKey,
    AWS_DEFAULT_REGION: "us-east-1",
    AWS_EC2_METADATA_DISABLED: "true",
    AWS_CONFIG_FILE: join(home, ".aws", "config"),
    AWS_SHARED_CREDENTIALS_FILE: join(home, ".aws", "credentials"),
    PYTHONDONTWRITEBYTECODE: "1",
    ...extra,
  };
}

export type RunResult = { code: number | null; signal: string | null; stdout: string; stderr: string };

/** Runs a program to completion; resolves with its exit status and output whatever the status. */
export function run(
  file: string,
  args: string[],
  opts: { env: Record<string, string>; cwd?: string; timeoutMs?: number },
): Promise<RunResult> {
  return new Promise((res, rej) => {
    execFile(
      file,
      args,
      {
        env: opts.env,
        cwd: opts.cwd,
        timeout: opts.timeoutMs ?? 60_000,
        maxBuffer: 16 * MiB,
        encoding: "utf8",
      },
      (err, stdout, stderr) => {
        if (err && typeof (err as { code?: unknown }).code === "string") {
          // ENOENT, EACCES: the program could not be started at all.
          rej(new Error(`cannot run ${file}: ${err.message}`));
          return;
        }
        const e = err as (Error & { code?: number; signal?: string; killed?: boolean }) | null;
        res({ code: e ? (e.code ?? null) : 0, signal: e?.signal ?? null, stdout, stderr });
      },
    );
  });
}

/** Asserts a zero exit status, showing the command's output when it is not. */
export function expectSuccess(r: RunResult, what: string): RunResult {
  expect(
    { what, code: r.code, signal: r.signal, stderr: r.stderr.slice(-2000) },
    `${what} failed:\n${r.stdout.slice(-2000)}\n${r.stderr.slice(-2000)}`,
  ).toMatchObject({ code: 0, signal: null });
  return r;
}

/** Asserts a non-zero exit status whose error output names the S3 error code. */
export function expectRefused(r: RunResult, code: string, what: string): RunResult {
  expect(r.code, `${what} should have failed:\n${r.stdout}\n${r.stderr}`).not.toBe(0);
  expect(r.signal).toBeNull();
  expect(`${r.stdout}\n${r.stderr}`).toContain(code);
  return r;
}

/** A client program as a suite runs it, to completion (`run`) or fed through its stdin (`start`). */
export type ClientProgram = {
  run(args: string[], env?: Record<string, string>): Promise<RunResult>;
  start(args: string[], env?: Record<string, string>): StartedClient;
};

/**
 * A client program of a suite, one of the TOOLS (the suite lists it in clientSuite's `tools`, so
 * that a missing program fails the suite at once): every command puts `leading()` (its config
 * file, its retry settings) before the command's arguments, and runs with clientEnv (the suite's
 * private HOME, plus `env`), the suite's temp dir as cwd and 90 s to finish.
 */
export function clientProgram(
  suite: ClientSuite,
  program: { tool: ToolName; leading?: () => string[] },
): ClientProgram {
  const { path } = TOOLS[program.tool];
  const { leading = () => [] } = program;
  const options = (env: Record<string, string>) => ({
    env: clientEnv(suite.home, env),
    cwd: suite.dir,
    timeoutMs: 90_000,
  });
  return {
    run: (args, env = {}) => run(path, [...leading(), ...args], options(env)),
    start: (args, env = {}) => start(path, [...leading(), ...args], options(env)),
  };
}

/** A client started by `start`: the test feeds its stdin. */
export type StartedClient = {
  /** Writes to the client's stdin (with backpressure); a no-op once the client has exited. */
  feed(data: Buffer): Promise<void>;
  /** Closes the client's stdin: end of the upload's data. */
  end(): Promise<void>;
  running(): boolean;
  /** Stops the client (SIGKILL) if it is still running; for a test that failed half-way. */
  kill(): void;
  done: Promise<RunResult>;
};

/**
 * Starts a program whose stdin the test writes (`aws s3 cp -`, `s3cmd put -`, `rclone rcat`,
 * boto3 `upload_fileobj(stdin)`): the test decides when each byte reaches the client, so it can
 * change the lease between two parts of one multipart upload. `done` rejects (the test fails,
 * never skips) when the program cannot be started, else resolves with the exit status.
 */
export function start(
  file: string,
  args: string[],
  opts: { env: Record<string, string>; cwd?: string; timeoutMs?: number },
): StartedClient {
  const child = spawn(file, args, { env: opts.env, cwd: opts.cwd, stdio: ["pipe", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  let exited = false;
  child.stdout.setEncoding("utf8").on("data", (d: string) => {
    stdout += d;
  });
  child.stderr.setEncoding("utf8").on("data", (d: string) => {
    stderr += d;
  });
  // A client that gave up (a refused part) closes its stdin: later writes fail with EPIPE,
  // which is not the test's failure; the exit status and output tell what happened.
  child.stdin.on("error", () => {});
  const timer = setTimeout(() => child.kill("SIGKILL"), opts.timeoutMs ?? 90_000);
  const done = new Promise<RunResult>((res, rej) => {
    child.once("error", (err) => {
      exited = true;
      clearTimeout(timer);
      rej(new Error(`cannot run ${file}: ${err.message}`));
    });
    child.once("close", (code, signal) => {
      exited = true;
      clearTimeout(timer);
      res({ code, signal, stdout, stderr });
    });
  });
  const closed = done.then(
    () => undefined,
    () => undefined,
  );
  const gone = () => exited || child.stdin.destroyed || child.stdin.writableEnded;
  const CHUNK = 256 * 1024;
  return {
    async feed(data) {
      for (let i = 0; i < data.length && !gone(); i += CHUNK) {
        if (!child.stdin.write(data.subarray(i, i + CHUNK))) {
          await Promise.race([new Promise((r) => child.stdin.once("drain", r)), closed]);
        }
      }
    },
    async end() {
      if (!gone()) await Promise.race([new Promise<void>((r) => child.stdin.end(() => r())), closed]);
    },
    running: () => !exited,
    kill: () => {
      if (!exited) child.kill("SIGKILL");
    },
    done,
  };
}

export function writeFile(path: string, data: Buffer | string): string {
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, data);
  return path;
}

export function randomData(size: number): Buffer {
  return randomBytes(size);
}

/** A prefix lease over the whole bucket: covers every key a sync or a recursive copy touches. */
export function bucketLease(gw: TestGateway, bucket: string, ttlMs = 600_000): Promise<Lease> {
  return gw.leases.acquire({ bucket, prefix: "", ttlMs, owner: "client-suite" });
}

/**
 * Two tokens for the same bucket: `stale` belongs to a lease that was released and then
 * superseded by `fresh`'s lease, so every write with `stale` must be refused (409).
 */
export async function supersededLeases(
  gw: TestGateway,
  bucket: string,
  resource: { key: string } | { prefix: string } = { prefix: "" },
): Promise<{ stale: Lease; fresh: Lease }> {
  const stale = await gw.leases.acquire({ bucket, ...resource, ttlMs: 60_000, owner: "client-suite-old" });
  await gw.leases.release(stale.leaseId);
  const fresh = await gw.leases.acquire({ bucket, ...resource, ttlMs: 600_000, owner: "client-suite-new" });
  expect(fresh.token).toBeGreaterThan(stale.token);
  return { stale, fresh };
}

/**
 * A new bucket, made by the client under test (`create`), with a stale and a fresh token for it
 * (supersededLeases): the opening of every client's stale-token test.
 */
export async function bucketWithStaleToken(
  gw: TestGateway,
  bucket: string,
  create: (bucket: string) => Promise<unknown>,
): Promise<{ stale: Lease; fresh: Lease }> {
  await create(bucket);
  return supersededLeases(gw, bucket);
}

export type AuditEntry = {
  op: string;
  bucket: string | null;
  key: string | null;
  token: number | null;
  decision: "accepted" | "rejected";
  reason: string | null;
};

/** Audit records matching the query (one page of up to 1000). */
export async function auditRecords(
  gw: TestGateway,
  query: Record<string, string | undefined>,
): Promise<AuditEntry[]> {
  const page = await gw.leases.audit({ limit: "1000", ...query });
  return page.records as AuditEntry[];
}

/** Asserts that exactly `count` records match the query, each accepted under `token`. */
export async function expectAccepted(
  gw: TestGateway,
  query: Record<string, string | undefined>,
  token: number,
  count = 1,
): Promise<void> {
  const records = await auditRecords(gw, query);
  expect(records.map((r) => [r.decision, r.token])).toEqual(
    Array.from({ length: count }, () => ["accepted", token]),
  );
}

/**
 * Asserts that the multipart upload of `key` was committed under `token`: its audit trail is
 * CreateMultipartUpload, `parts` UploadParts and CompleteMultipartUpload, all accepted with it.
 */
export async function expectCommittedUnderLease(
  gw: TestGateway,
  bucket: string,
  key: string,
  token: number,
  parts: number,
): Promise<void> {
  const records = await auditRecords(gw, { bucket, key });
  expect(records.map((r) => [r.op, r.decision, r.token])).toEqual([
    ["CreateMultipartUpload", "accepted", token],
    ...Array.from({ length: parts }, () => ["UploadPart", "accepted", token]),
    ["CompleteMultipartUpload", "accepted", token],
  ]);
  await expectAccepted(gw, { bucket, key, op: "CompleteMultipartUpload" }, token);
}

/** Asserts that the only audit record of `key` is its CreateMultipartUpload, refused for want of a token. */
export async function expectRefusedAtCreate(gw: TestGateway, bucket: string, key: string): Promise<void> {
  const records = await auditRecords(gw, { bucket, key });
  expect(records.map((r) => [r.op, r.decision, r.reason])).toEqual([
    ["CreateMultipartUpload", "rejected", "FencingTokenRequired"],
  ]);
}

/** Asserts that the writes refused in `bucket` are `ops`, in order, each StaleFencingToken with `token`. */
export async function expectStaleRejections(
  gw: TestGateway,
  bucket: string,
  token: number,
  ops: string[],
): Promise<void> {
  const rejected = await auditRecords(gw, { bucket, decision: "rejected" });
  expect(rejected.map((r) => [r.op, r.reason, r.token])).toEqual(
    ops.map((op) => [op, "StaleFencingToken", token]),
  );
}

/**
 * Asserts, with an S3 HEAD, that `key` is a multipart object of `parts` parts and `size` bytes
 * whose metadata kept no token.
 */
export async function expectMultipartObject(
  gw: TestGateway,
  bucket: string,
  key: string,
  parts: number,
  size: number,
): Promise<void> {
  const head = await gw.s3().send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
  expect(head.ETag).toMatch(new RegExp(`^"[0-9a-f]{32}-${parts}"$`));
  expect(head.ContentLength).toBe(size);
  expect(head.Metadata).not.toHaveProperty("fence-token");
}

/**
 * Waits until the audit log holds records matching the query and `test` (e.g. the first part
 * of an upload accepted); fails after `timeoutMs`, or as soon as `client` has exited, showing
 * what the log holds.
 */
export async function waitForAudit(
  gw: TestGateway,
  query: Record<string, string | undefined>,
  test: (records: AuditEntry[]) => boolean,
  opts: { client?: StartedClient; timeoutMs?: number } = {},
): Promise<AuditEntry[]> {
  const deadline = Date.now() + (opts.timeoutMs ?? 30_000);
  for (;;) {
    const records = await auditRecords(gw, query);
    if (test(records)) return records;
    const why =
      opts.client && !opts.client.running()
        ? "the client exited first"
        : Date.now() > deadline
          ? "timed out"
          : null;
    if (why !== null) {
      const r = opts.client && !opts.client.running() ? await opts.client.done : null;
      throw new Error(
        `no audit record matched ${JSON.stringify(query)} (${why}): ${JSON.stringify(records)}` +
          (r ? `\nclient exit ${r.code}:\n${r.stdout}\n${r.stderr}` : ""),
      );
    }
    await sleep(50);
  }
}

/**
 * Makes `lease` lose its resource while a client is in the middle of an upload under it: the
 * lease is released, a newer lease takes the same resource and writes the key with its token
 * (raising the key's HCT), as a worker that took over would. Returns the newer lease.
 */
export async function takeOver(
  gw: TestGateway,
  lease: Lease,
  key: string,
  body = "written by the new lease holder\n",
): Promise<Lease> {
  await gw.leases.release(lease.leaseId);
  const resource = lease.prefix !== undefined ? { prefix: lease.prefix } : { key: lease.key ?? key };
  const fresh = await gw.leases.acquire({
    bucket: lease.bucket,
    ...resource,
    ttlMs: 600_000,
    owner: "client-suite-new",
  });
  expect(fresh.token).toBeGreaterThan(lease.token);
  const s3 = gw.s3();
  try {
    await s3.send(
      new PutObjectCommand({
        Bucket: lease.bucket,
        Key: key,
        Body: body,
        Metadata: { "fence-token": fresh.fencingToken },
      }),
    );
  } finally {
    s3.destroy();
  }
  return fresh;
}

/**
 * The lease is lost in the middle of a multipart upload that carries its token only the way
 * the tool can (metadata on CreateMultipartUpload, or a header on every request): the client
 * reads the data from stdin; once its first part has been accepted under `lease`, a newer
 * lease takes the key over and writes it; then the rest of the data arrives. The next part
 * (fenced with the upload's lease) must be refused with 409 StaleFencingToken, the client must
 * fail, and the key must keep the newer write. Returns the client's result for
 * client-specific checks.
 */
export async function uploadAcrossTakeOver(
  gw: TestGateway,
  opts: { lease: Lease; key: string; partSize: number; launch: () => StartedClient },
): Promise<{ result: RunResult; fresh: Lease; records: AuditEntry[] }> {
  const { lease, key, partSize } = opts;
  const bucket = lease.bucket;
  const body = `taken over from token ${lease.token}\n`;
  const client = opts.launch();
  let fresh: Lease;
  let result: RunResult;
  try {
    await client.feed(randomData(partSize + MiB));
    await waitForAudit(
      gw,
      { bucket, key, op: "UploadPart" },
      (r) => r.some((p) => p.decision === "accepted" && p.token === lease.token),
      { client },
    );
    fresh = await takeOver(gw, lease, key, body);
    await client.feed(randomData(2 * partSize));
    await client.end();
    result = await client.done;
  } finally {
    client.kill();
  }
  expectRefused(result, "StaleFencingToken", `upload of ${key} across a lease take-over`);

  const s3 = gw.s3();
  try {
    const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    expect(await got.Body!.transformToString()).toBe(body);
  } finally {
    s3.destroy();
  }
  const records = (await auditRecords(gw, { bucket, key })).filter((r) => !r.op.startsWith("Lease"));
  const summary = records.map((r) => [r.op, r.decision, r.reason, r.token]);
  expect(summary.slice(0, 2)).toEqual([
    ["CreateMultipartUpload", "accepted", null, lease.token],
    ["UploadPart", "accepted", null, lease.token],
  ]);
  expect(summary).toContainEqual(["PutObject", "accepted", null, fresh.token]);
  expect(summary).toContainEqual(["UploadPart", "rejected", "StaleFencingToken", lease.token]);
  expect(
    summary.filter(([op, decision]) => op === "CompleteMultipartUpload" && decision === "accepted"),
  ).toEqual([]);
  return { result, fresh, records };
}

/**
 * The lease-lost-mid-upload scenario as every program-driven client runs it: `create` makes
 * `bucket` with the client, a bucket lease is taken, and uploadAcrossTakeOver runs the client
 * (`launch`, given that lease) on `key`.
 */
export async function leaseLostMidUpload(
  gw: TestGateway,
  opts: {
    bucket: string;
    key: string;
    partSize: number;
    create: (bucket: string) => Promise<unknown>;
    launch: (lease: Lease) => StartedClient;
  },
): Promise<{ result: RunResult; fresh: Lease; records: AuditEntry[] }> {
  await opts.create(opts.bucket);
  const lease = await bucketLease(gw, opts.bucket);
  return uploadAcrossTakeOver(gw, {
    lease,
    key: opts.key,
    partSize: opts.partSize,
    launch: () => opts.launch(lease),
  });
}

/**
 * A directory tree for sync tests: nested folders, and names whose SigV4 canonical form
 * differs from their raw form (space, +, =, ~, %, *, !, ', ;, comma, non-ASCII).
 */
export const SYNC_TREE: Readonly<Record<string, string>> = {
  "index.html": "<h1>hello</h1>\n",
  "a.txt": "alpha\n",
  "b.txt": "bravo\n",
  "nested/c.json": '{"c": 3}\n',
  "nested/deeper/d with space.txt": "delta\n",
  "odd/plus+and=equals.txt": "plus\n",
  "odd/tilde~percent%20.txt": "tilde and percent\n",
  "odd/star*bang!quote'.txt": "star\n",
  "odd/semi;colon,comma.txt": "semicolon\n",
  "ünï cödé/ƒ (1).txt": "unicode\n",
};

export function writeTree(dir: string, files: Readonly<Record<string, string>>): void {
  for (const [name, body] of Object.entries(files)) writeFile(join(dir, name), body);
}

/** name -> size, as a listing should show the tree. */
export function sizes(files: Readonly<Record<string, string>>, prefix = ""): Record<string, number> {
  return Object.fromEntries(
    Object.entries(files).map(([name, body]) => [prefix + name, Buffer.byteLength(body)]),
  );
}
