// Safety scenario 1: a client that is paused (SIGSTOP) past the end of its lease must not be
// able to write once it wakes up. Gateway and client A each run in their own process.
import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { CreateBucketCommand, GetObjectCommand, PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LeaseClient } from "../../src/client/lease-client.js";
import {
  CREDENTIALS,
  type GatewayProcess,
  ROOT,
  s3Client,
  spawnGateway,
  tempDir,
} from "../support/gateway.js";
import {
  allAuditRecords,
  killChild,
  LineReader,
  processState,
  waitForProcessState,
} from "../support/safety-helpers.js";
import { sleep } from "../support/wait.js";

const CLIENT_A = fileURLToPath(new URL("./fixtures/paused-client.ts", import.meta.url));
const BUCKET = "paused";
const KEY = "k";
const PAUSE_MS = 2000;

type Message = {
  event: string;
  token?: number;
  leaseId?: string;
  status?: number;
  code?: string | null;
  highestToken?: number | null;
  requestId?: string;
};

describe("a client paused past its lease (real processes)", () => {
  const dir = tempDir("fencegate-safety-paused-");
  let gateway: GatewayProcess | undefined;
  let clientA: ChildProcess | undefined;
  let s3: S3Client;
  let leases: LeaseClient;

  beforeAll(async () => {
    gateway = await spawnGateway(dir.path);
    s3 = s3Client(gateway.url);
    leases = new LeaseClient({ endpoint: gateway.url, ...CREDENTIALS });
    await s3.send(new CreateBucketCommand({ Bucket: BUCKET }));
  });

  afterAll(async () => {
    await killChild(clientA);
    s3?.destroy();
    await gateway?.kill("SIGKILL");
    dir.cleanup();
  });

  it("refuses A's write after SIGSTOP/SIGCONT with 409 StaleFencingToken; B's data stays", {
    timeout: 90_000,
  }, async () => {
    let stderr = "";
    clientA = spawn(process.execPath, ["--import", "tsx", CLIENT_A, gateway!.url, BUCKET, KEY], {
      cwd: ROOT,
      stdio: ["pipe", "pipe", "pipe"],
    });
    clientA.stderr!.on("data", (d) => {
      stderr += d;
    });
    const a = new LineReader<Message>(clientA.stdout!, () => stderr);

    const leased = await a.next((m) => m.event === "leased");
    const firstWrite = await a.next((m) => m.event === "first-write");
    expect(firstWrite.status, stderr).toBe(200);

    // Freeze A for longer than its 1 s lease lives.
    const pid = clientA.pid!;
    process.kill(pid, "SIGSTOP");
    const stoppedAt = Date.now();
    await waitForProcessState(pid, "T");

    // Meanwhile B takes the lease as soon as A's has expired, and writes.
    const leaseB = await leases.acquire({
      bucket: BUCKET,
      key: KEY,
      ttlMs: 30_000,
      waitMs: 5000,
      owner: "b",
    });
    expect(leaseB.token).toBeGreaterThan(leased.token!);
    const bData = "B's data";
    const bWrite = await s3.send(
      new PutObjectCommand({
        Bucket: BUCKET,
        Key: KEY,
        Body: bData,
        Metadata: { "fence-token": leaseB.fencingToken },
      }),
    );
    expect(bWrite.$metadata.httpStatusCode).toBe(200);
    expect(processState(pid)).toBe("T"); // A really was frozen the whole time

    await sleep(Math.max(0, PAUSE_MS - (Date.now() - stoppedAt)));
    process.kill(pid, "SIGCONT");
    clientA.stdin!.write("go\n");
    const late = await a.next((m) => m.event === "second-write");

    expect(late.status, JSON.stringify(late)).toBe(409);
    expect(late.code).toBe("StaleFencingToken");
    expect(late.highestToken).toBe(leaseB.token);

    const got = await s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: KEY }));
    expect(await got.Body!.transformToString()).toBe(bData);
    expect(got.Metadata ?? {}).not.toHaveProperty("fence-token");

    const writes = (await allAuditRecords(leases, { bucket: BUCKET, key: KEY })).filter(
      (r) => r.op === "PutObject",
    );
    expect(
      writes.map((r) => ({ token: r.token, decision: r.decision, reason: r.reason, requestId: r.requestId })),
    ).toEqual([
      { token: leased.token, decision: "accepted", reason: null, requestId: firstWrite.requestId },
      { token: leaseB.token, decision: "accepted", reason: null, requestId: bWrite.$metadata.requestId },
      { token: leased.token, decision: "rejected", reason: "StaleFencingToken", requestId: late.requestId },
    ]);
    expect(writes[2]!.highestToken).toBe(leaseB.token);
    for (let i = 1; i < writes.length; i++) expect(writes[i]!.seq).toBeGreaterThan(writes[i - 1]!.seq);
  });
});
