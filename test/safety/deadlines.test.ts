/**
 * Deadlines that mean what they say, with real processes: a gateway process on the S3 backend
 * whose store (another gateway process) is SIGSTOPped answers an object request with 503 within
 * requestTimeoutMs (the SDK's retries included), health and readiness with 503 naming the
 * backend within the health deadline, and liveness with 200 at once; a gateway process on Redis
 * exits within its shutdown bound after SIGTERM while Redis is SIGSTOPped or killed, and answers
 * the lease requests still in flight with 503; a second signal ends it at once.
 */
import { type ChildProcess, execFile } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { CreateBucketCommand, GetObjectCommand, PutObjectCommand } from "@aws-sdk/client-s3";
import { afterEach, describe, expect, it } from "vitest";
import { LeaseClient } from "../../src/client/lease-client.js";
import {
  CREDENTIALS,
  type GatewayProcess,
  ROOT,
  s3Client,
  spawnGateway,
  startTestGateway,
  tempDir,
} from "../support/gateway.js";
import { type RedisServer, startRedis } from "../support/redis.js";
import { requireTools } from "../support/tools.js";
import { sleep } from "../support/wait.js";

requireTools("redis-server");

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A gateway process with `config` (JSON is YAML) as its configuration file. */
async function gatewayWith(config: object, env: Record<string, string> = {}): Promise<GatewayProcess> {
  const dir = tempDir();
  cleanups.push(() => dir.cleanup());
  const file = join(dir.path, "fencegate.yaml");
  writeFileSync(file, JSON.stringify(config));
  const gw = await spawnGateway(join(dir.path, "data"), { FENCEGATE_CONFIG: file, ...env });
  cleanups.push(() => gw.kill("SIGKILL"));
  return gw;
}

/** Stops a process as a pause would (SIGSTOP); cleanup lets it go on, so that it can be stopped. */
function pause(child: { pid?: number | undefined }): void {
  process.kill(child.pid!, "SIGSTOP");
  cleanups.push(() => {
    try {
      process.kill(child.pid!, "SIGCONT");
    } catch {
      // already gone
    }
  });
}

const timed = async <T>(work: Promise<T>): Promise<{ value: T; ms: number }> => {
  const started = performance.now();
  const value = await work;
  return { value, ms: performance.now() - started };
};

const settle = (p: Promise<unknown>) =>
  p.then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, error }),
  );

/** Resolves with how the child exited and how long after `since` (performance.now()). */
function exitOf(child: ChildProcess, since: () => number) {
  return new Promise<{ code: number | null; signal: NodeJS.Signals | null; ms: number }>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) {
      resolve({ code: child.exitCode, signal: child.signalCode, ms: 0 });
      return;
    }
    child.once("exit", (code, signal) => resolve({ code, signal, ms: performance.now() - since() }));
  });
}

const answerOf = async (res: Promise<Response>) => {
  const r = await res;
  return { status: r.status, body: (await r.json()) as Record<string, unknown> };
};

/** Room for an abort to reach the socket and the answer to come back, on a busy machine. */
const MARGIN_MS = 1_500;

describe("a gateway on the S3 backend whose store stops answering", () => {
  it("answers object requests with 503 within requestTimeoutMs, health and readiness with 503 naming the backend within the health deadline, liveness at once", async () => {
    const REQUEST_TIMEOUT_MS = 2_000;
    const HEALTH_TIMEOUT_MS = 500;
    // The store: a gateway process of its own (fs backend), stopped with SIGSTOP further down.
    const storeDir = tempDir();
    cleanups.push(() => storeDir.cleanup());
    const store = await spawnGateway(storeDir.path, { FENCEGATE_FENCING: "optional" });
    cleanups.push(() => store.kill("SIGKILL"));
    const gw = await gatewayWith({
      backend: {
        type: "s3",
        endpoint: store.url,
        region: "us-east-1",
        accessKeyId: CREDENTIALS.accessKeyId,
        secretAccessKey: CREDENTIALS.secretAccessKey,
        forcePathStyle: true,
        requestTimeoutMs: REQUEST_TIMEOUT_MS,
      },
      server: { healthTimeoutMs: HEALTH_TIMEOUT_MS },
    });
    const s3 = s3Client(gw.url);
    cleanups.push(() => s3.destroy());
    const leases = new LeaseClient({ endpoint: gw.url, ...CREDENTIALS });
    await s3.send(new CreateBucketCommand({ Bucket: "bkt" }));
    const lease = await leases.acquire({ bucket: "bkt", key: "k", ttlMs: 60_000 });
    const put = (body: string) =>
      s3.send(
        new PutObjectCommand({
          Bucket: "bkt",
          Key: "k",
          Body: body,
          Metadata: { "fence-token": lease.fencingToken },
        }),
      );
    await put("one");
    expect((await fetch(`${gw.url}/_fence/v1/health/ready`)).status).toBe(200);

    pause(store.child);
    // A read, a fenced write and the health endpoints, all at once.
    const [read, write, health, ready] = await Promise.all([
      timed(settle(s3.send(new GetObjectCommand({ Bucket: "bkt", Key: "k" })))),
      timed(settle(put("two"))),
      timed(answerOf(fetch(`${gw.url}/_fence/v1/health`))),
      timed(answerOf(fetch(`${gw.url}/_fence/v1/health/ready`))),
    ]);
    for (const call of [read, write]) {
      expect(call.value.ok).toBe(false);
      const error = (call.value as { error: { name?: string; message?: string; $metadata?: object } }).error;
      expect(error).toMatchObject({ name: "ServiceUnavailable", $metadata: { httpStatusCode: 503 } });
      expect(error.message).toMatch(/no answer in time/);
      expect(call.ms).toBeGreaterThanOrEqual(REQUEST_TIMEOUT_MS - 100);
      expect(call.ms).toBeLessThan(REQUEST_TIMEOUT_MS + MARGIN_MS);
    }
    for (const call of [health, ready]) {
      expect(call.value.status).toBe(503);
      expect(call.value.body).toMatchObject({
        status: "unavailable",
        failing: ["backend"],
        checks: {
          backend: { kind: "s3", status: "timeout" },
          leaseStore: { status: "ok" },
          auditLog: { status: "ok" },
        },
      });
      expect(String(call.value.body.error)).toMatch(/backend \(s3\): no answer within 500 ms/);
      expect(call.ms).toBeLessThan(HEALTH_TIMEOUT_MS + MARGIN_MS);
    }
    // Liveness calls no dependency: at once, while the store is still silent.
    const live: number[] = [];
    for (let i = 0; i < 5; i++) {
      const { value, ms } = await timed(fetch(`${gw.url}/_fence/v1/health/live`));
      expect(value.status).toBe(200);
      expect(await value.json()).toMatchObject({ status: "ok", backend: "s3" });
      live.push(ms);
    }
    live.sort((a, b) => a - b);
    expect(live[2]).toBeLessThan(100);

    // Polls while the store is silent join the check still running instead of piling up calls.
    const again = await timed(fetch(`${gw.url}/_fence/v1/health/ready`));
    expect(again.value.status).toBe(503);
    expect(again.ms).toBeLessThan(HEALTH_TIMEOUT_MS + MARGIN_MS);

    process.kill(store.child.pid!, "SIGCONT");
    const back = await timed(
      (async () => {
        for (;;) {
          const r = await fetch(`${gw.url}/_fence/v1/health/ready`);
          if (r.status === 200) return r.json();
          await sleep(100);
        }
      })(),
    );
    expect(back.value).toMatchObject({ status: "ok", checks: { backend: { status: "ok" } } });
    // The refused write changed nothing: the object is still the one acknowledged.
    const body = await (
      await s3.send(new GetObjectCommand({ Bucket: "bkt", Key: "k" }))
    ).Body!.transformToString();
    expect(body).toBe("one");
  }, 60_000);
});

describe("a gateway on Redis stopping within its bound", () => {
  const BOUND_MS = 2_000;

  async function gatewayOnRedis(): Promise<{ gw: GatewayProcess; redis: RedisServer; leases: LeaseClient }> {
    const redis = await startRedis();
    cleanups.push(() => redis.stop());
    // Commands wait longer than the bound: only the shutdown's own bound can end them in time.
    const gw = await gatewayWith({
      leaseStore: { type: "redis", url: redis.url, commandTimeoutMs: 15_000 },
      server: { shutdownTimeoutMs: BOUND_MS },
    });
    const leases = new LeaseClient({
      endpoint: gw.url,
      ...CREDENTIALS,
      retry: { attempts: 1 },
      timeoutMs: 60_000,
    });
    return { gw, redis, leases };
  }

  it.each([
    ["SIGSTOPped", (redis: RedisServer) => pause({ pid: redis.pid })],
    ["killed", (redis: RedisServer) => redis.kill9()],
  ] as const)(
    "exits 0 within the bound after SIGTERM with Redis %s, answering the lease requests in flight with 503",
    async (_how, silence) => {
      const { gw, redis, leases } = await gatewayOnRedis();
      await leases.acquire({ bucket: "bkt", key: "held", ttlMs: 60_000 });
      // Waits for the held lease: in flight whatever Redis does.
      const waiting = settle(leases.acquire({ bucket: "bkt", key: "held", ttlMs: 60_000, waitMs: 50_000 }));
      await sleep(300);
      await silence(redis);
      // A lease call sent to the silent Redis (refused at once when Redis is gone).
      const sent = settle(leases.acquire({ bucket: "bkt", key: "other", ttlMs: 60_000 }));
      await sleep(300);

      let signalled = 0;
      const exited = exitOf(gw.child, () => signalled);
      signalled = performance.now();
      gw.child.kill("SIGTERM");
      const exit = await exited;
      expect(exit, gw.output()).toMatchObject({ code: 0, signal: null });
      expect(exit.ms).toBeLessThan(BOUND_MS + MARGIN_MS);
      // They were still running at the bound: the shutdown answered them.
      expect(gw.output()).toMatch(/answering the requests still running with 503/);
      const waited = await waiting;
      expect(waited.ok).toBe(false);
      expect((waited as { error: unknown }).error).toMatchObject({
        status: 503,
        code: "ServiceUnavailable",
        message: expect.stringMatching(/shutting down/),
      });
      const answered = await sent;
      expect(answered.ok).toBe(false);
      expect((answered as { error: unknown }).error).toMatchObject({ status: 503 });
    },
    60_000,
  );

  it("exits at once on a second signal", async () => {
    const { gw, redis, leases } = await gatewayOnRedis();
    pause({ pid: redis.pid });
    const sent = settle(leases.acquire({ bucket: "bkt", key: "k", ttlMs: 60_000 }));
    await sleep(300);
    gw.child.kill("SIGTERM");
    await sleep(200);
    let signalled = 0;
    const exited = exitOf(gw.child, () => signalled);
    signalled = performance.now();
    gw.child.kill("SIGINT");
    const exit = await exited;
    expect(exit).toMatchObject({ code: 130, signal: null });
    expect(exit.ms).toBeLessThan(500);
    expect((await sent).ok).toBe(false);
  }, 60_000);
});

describe("the container's health check", () => {
  /**
   * The Dockerfile's HEALTHCHECK command, run as the image runs it (in the checkout: through tsx),
   * in a process of its own: the gateway it asks lives in this one.
   */
  const healthcheck = async (env: Record<string, string>) => {
    const line = readFileSync(join(ROOT, "Dockerfile"), "utf8")
      .split("\n")
      .find((l) => l.startsWith("HEALTHCHECK "));
    const command = JSON.parse(/CMD (\[.*\])\s*$/.exec(line ?? "")?.[1] ?? "null") as string[] | null;
    expect(command, "the Dockerfile's HEALTHCHECK runs an exec-form CMD").not.toBeNull();
    const [program, ...args] = command!;
    return new Promise<{ status: number | null; stderr: string }>((resolve) => {
      execFile(
        program === "node" ? process.execPath : program!,
        args,
        { cwd: ROOT, env: { PATH: process.env.PATH ?? "", ...env }, encoding: "utf8", timeout: 20_000 },
        (error, _stdout, stderr) => {
          const status = error === null ? 0 : typeof error.code === "number" ? error.code : null;
          resolve({ status, stderr });
        },
      );
    });
  };

  it("checks liveness on the port the gateway is configured with, from the environment or the file", async () => {
    const gw = await startTestGateway();
    cleanups.push(() => gw.stop());
    const port = String(gw.port);
    // A gateway listening on every address is asked on the loopback one.
    expect(await healthcheck({ FENCEGATE_HOST: "0.0.0.0", FENCEGATE_PORT: port })).toEqual({
      status: 0,
      stderr: "",
    });
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const file = join(dir.path, "fencegate.yaml");
    writeFileSync(file, `server:\n  port: ${port}\n`);
    expect(await healthcheck({ FENCEGATE_CONFIG: file })).toEqual({ status: 0, stderr: "" });
    // Nothing answers there any more.
    await gw.stop();
    const down = await healthcheck({ FENCEGATE_PORT: port });
    expect(down.status).toBe(1);
    expect(down.stderr).toMatch(/fencegate health check/);
  }, 60_000);
});
