import { spawn } from "node:child_process";
import { join } from "node:path";
import { Writable } from "node:stream";
import { CreateBucketCommand, PutObjectCommand } from "@aws-sdk/client-s3";
import { afterAll, describe, expect, it } from "vitest";
import { LeaseHeldError } from "../../src/client/errors.js";
import { createLogger } from "../../src/core/log.js";
import { ConsoleClient } from "../console/console-support.js";
import { CREDENTIALS, ROOT, startTestGateway, type TestGateway, tempDir } from "../support/gateway.js";
import { trackChild } from "../support/processes.js";
import { waitFor } from "../support/wait.js";

/** Every `"msg":` key of a raw JSON line (a duplicate key is lost by jq and most parsers). */
const msgKeys = (line: string) => line.match(/"msg":/g)?.length ?? 0;

describe("request log", () => {
  const raw: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      raw.push(...String(chunk).split("\n").filter(Boolean));
      done();
    },
  });
  let gw: TestGateway;
  afterAll(async () => {
    await gw?.stop();
  });

  it("has one msg per record, and the request line names principal, operation, object, token, decision and duration", async () => {
    gw = await startTestGateway({ log: createLogger("info", {}, sink) });
    const s3 = gw.s3();
    await s3.send(new CreateBucketCommand({ Bucket: "logs" }));
    const first = await gw.leases.acquire({ bucket: "logs", key: "obj", ttlMs: 500 });
    const put = (token: string) =>
      s3.send(
        new PutObjectCommand({ Bucket: "logs", Key: "obj", Body: "x", Metadata: { "fence-token": token } }),
      );
    await s3.send(new PutObjectCommand({ Bucket: "logs", Key: "other", Body: "x" })).catch(() => undefined);
    const ok = await put(first.fencingToken);
    const second = await gw.leases.acquire({ bucket: "logs", key: "obj", ttlMs: 5_000, waitMs: 10_000 });
    await put(second.fencingToken);
    const stale = await put(first.fencingToken).catch((e: { $metadata: { requestId?: string } }) => e);
    const staleId = (stale as { $metadata: { requestId: string } }).$metadata.requestId;
    await waitFor(() => raw.some((l) => l.includes(staleId) && l.includes('"msg":"request"')), {
      what: "the stale write's request line",
    });
    s3.destroy();

    const lines = raw.map((l) => JSON.parse(l) as Record<string, unknown>);
    for (const l of raw) expect(msgKeys(l), l).toBe(1);

    const refused = lines.find((l) => l.msg === "request refused");
    expect(refused?.reason, "the refusal's message is kept under its own key").toEqual(expect.any(String));

    const byRequest = (id: string | undefined) =>
      lines.find((l) => l.msg === "request" && l.requestId === id);
    const accepted = byRequest(ok.$metadata.requestId);
    expect(accepted).toMatchObject({
      principal: CREDENTIALS.accessKeyId,
      operation: "PutObject",
      bucket: "logs",
      key: "obj",
      token: first.token,
      decision: "accepted",
      status: 200,
    });
    expect(accepted?.durationMs).toEqual(expect.any(Number));

    const rejected = byRequest((stale as { $metadata: { requestId?: string } }).$metadata.requestId);
    expect(rejected).toMatchObject({
      principal: CREDENTIALS.accessKeyId,
      operation: "PutObject",
      bucket: "logs",
      key: "obj",
      token: first.token,
      decision: "rejected",
      code: "StaleFencingToken",
      status: 409,
    });
    expect(rejected?.durationMs).toEqual(expect.any(Number));
    expect(raw.join("\n")).not.toContain(first.fencingToken);
  });
});

describe("request log of the lease API and the console", () => {
  const raw: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      raw.push(...String(chunk).split("\n").filter(Boolean));
      done();
    },
  });
  let gw: TestGateway;
  afterAll(async () => {
    await gw?.stop();
  });

  it("names request id, principal, operation, bucket, key, token, decision and duration, like the S3 lines", async () => {
    gw = await startTestGateway({ log: createLogger("info", {}, sink) });
    await gw.s3().send(new CreateBucketCommand({ Bucket: "logs" }));
    const lease = await gw.leases.acquire({ bucket: "logs", key: "obj", ttlMs: 30_000 });
    const held = await gw.leases.acquire({ bucket: "logs", key: "obj", ttlMs: 30_000 }).catch((e) => e);
    expect(held).toBeInstanceOf(LeaseHeldError);
    await gw.leases.renew(lease.leaseId);
    const prefix = await gw.leases.acquire({ bucket: "logs", prefix: "dir/", ttlMs: 30_000 });
    await gw.leases.release(prefix.leaseId);
    // The console: signed in with the same key, it breaks the lease.
    const browser = new ConsoleClient(gw.url);
    expect((await browser.signIn(CREDENTIALS)).status).toBe(201);
    const broke = await browser.call("POST", `/leases/${lease.leaseId}/break`);
    expect(broke.status, broke.text).toBe(200);
    const consoleId = broke.headers.get("x-amz-request-id");
    await waitFor(
      () => raw.some((l) => l.includes(`"requestId":"${consoleId}"`) && l.includes('"msg":"request"')),
      {
        what: "the console break's request line",
      },
    );

    const lines = raw
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((l) => l.msg === "request" && String(l.path).startsWith("/_fence/"));
    for (const l of lines) {
      expect(l.requestId, JSON.stringify(l)).toEqual(expect.any(String));
      expect(l.durationMs, JSON.stringify(l)).toEqual(expect.any(Number));
    }
    const find = (operation: string, extra: Record<string, unknown> = {}) =>
      lines.filter((l) => l.operation === operation && Object.entries(extra).every(([k, v]) => l[k] === v));
    expect(find("acquireLease", { decision: "accepted", key: "obj" })).toEqual([
      expect.objectContaining({
        principal: CREDENTIALS.accessKeyId,
        bucket: "logs",
        key: "obj",
        leaseId: lease.leaseId,
        token: lease.token,
        status: 201,
      }),
    ]);
    expect(find("acquireLease", { decision: "rejected" })).toEqual([
      expect.objectContaining({
        principal: CREDENTIALS.accessKeyId,
        bucket: "logs",
        key: "obj",
        code: "LeaseHeld",
        status: 409,
      }),
    ]);
    expect(find("renewLease")).toEqual([
      expect.objectContaining({
        principal: CREDENTIALS.accessKeyId,
        bucket: "logs",
        key: "obj",
        leaseId: lease.leaseId,
        token: lease.token,
        decision: "accepted",
      }),
    ]);
    expect(find("acquireLease", { prefix: "dir/" })).toEqual([
      expect.objectContaining({ token: prefix.token, decision: "accepted" }),
    ]);
    expect(find("releaseLease")).toEqual([
      expect.objectContaining({
        principal: CREDENTIALS.accessKeyId,
        leaseId: prefix.leaseId,
        decision: "accepted",
        status: 204,
      }),
    ]);
    const consoleLine = lines.find((l) => l.requestId === consoleId);
    expect(consoleLine).toMatchObject({
      principal: CREDENTIALS.accessKeyId,
      operation: `console:POST /api/leases/${lease.leaseId}/break`,
      bucket: "logs",
      key: "obj",
      leaseId: lease.leaseId,
      token: lease.token,
      decision: "accepted",
      status: 200,
    });
    // Never a signed fencing token, nor a secret, on any line.
    expect(raw.join("\n")).not.toContain(lease.fencingToken);
    expect(raw.join("\n")).not.toContain(CREDENTIALS.secretAccessKey);
  });
});

describe("fencegate serve's output", () => {
  it("keeps stdout for JSON records: the start-up banner goes to stderr", { timeout: 60_000 }, async () => {
    const dir = tempDir();
    const child = spawn(process.execPath, ["--import", "tsx", join(ROOT, "src/cli/main.ts"), "serve"], {
      cwd: ROOT,
      env: { ...process.env, FENCEGATE_PORT: "0", FENCEGATE_DATA_DIR: dir.path, FENCEGATE_LOG_LEVEL: "info" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    trackChild(child);
    let stdout = "";
    let stderr = "";
    child.stdout!.on("data", (d) => {
      stdout += d;
    });
    child.stderr!.on("data", (d) => {
      stderr += d;
    });
    const exited = new Promise<void>((r) => child.once("exit", () => r()));
    try {
      await waitFor(() => /fencegate listening on (http:\/\/\S+)/.test(stdout + stderr), {
        what: "the banner",
        timeoutMs: 45_000,
        details: () => stderr,
      });
      const url = /fencegate listening on (http:\/\/\S+)/.exec(stdout + stderr)![1]!;
      await fetch(`${url}/_fence/v1/health`);
      await waitFor(() => stdout.includes('"msg":"request"'), {
        what: "a request line",
        details: () => stdout,
      });
    } finally {
      child.kill("SIGTERM");
      await exited;
      dir.cleanup();
    }
    const lines = stdout.split("\n").filter(Boolean);
    expect(lines.length).toBeGreaterThan(1);
    for (const line of lines) {
      expect(() => JSON.parse(line), line).not.toThrow();
      expect(msgKeys(line), line).toBe(1);
    }
    expect(stdout).not.toContain("S3 endpoint:");
    expect(stderr).toContain("S3 endpoint:");
  });
});
