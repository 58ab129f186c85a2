import {
  CopyObjectCommand,
  CreateBucketCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from "@aws-sdk/client-s3";
import { Upload } from "@aws-sdk/lib-storage";
import type { FinalizeHandlerArguments } from "@smithy/types";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  type AuditRecord,
  FENCE_TOKEN_HEADER,
  FenceClient,
  FencingTokenConflictError,
  fencingTokenPlugin,
  type Lease,
  LeaseLostError,
} from "../../src/client/index.js";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";

checkLeaseApiResponses();

/**
 * A lease's token is bound to a command or to the lease's own view of a client, never to a
 * client that several leases share: two using() jobs on one S3Client each write with their own
 * token, checked in the gateway's audit log.
 */

let gw: TestGateway;
let fence: FenceClient;
let buckets = 0;

beforeAll(async () => {
  gw = await startTestGateway();
  fence = new FenceClient({ endpoint: gw.url, ...CREDENTIALS });
});
afterAll(async () => {
  await gw?.stop();
});

async function newBucket(): Promise<string> {
  const bucket = `binding-${++buckets}`;
  await gw.s3().send(new CreateBucketCommand({ Bucket: bucket }));
  return bucket;
}

/**
 * A barrier for `parties` jobs: each call waits until every job has called it as often. A job
 * that fails breaks it, so that the other one does not wait for it forever.
 */
function lockstep(parties: number): { step(): Promise<void>; break(): void } {
  let waiting: (() => void)[] = [];
  let broken = false;
  return {
    step: () =>
      new Promise<void>((resolve) => {
        if (broken) return resolve();
        waiting.push(resolve);
        if (waiting.length === parties) {
          const all = waiting;
          waiting = [];
          for (const go of all) go();
        }
      }),
    break() {
      broken = true;
      for (const go of waiting) go();
      waiting = [];
    },
  };
}

/** The audit records of writes (not lease events) to keys under `prefix` of `bucket`. */
async function writeRecords(bucket: string, prefix: string): Promise<AuditRecord[]> {
  const { records } = await fence.audit({ bucket, limit: 1000 });
  return records.filter((r) => !r.op.startsWith("Lease") && r.key?.startsWith(prefix));
}

type Write = PutObjectCommand | CopyObjectCommand | DeleteObjectCommand | DeleteObjectsCommand;
type SendAny = (lease: Lease, s3: S3Client, command: Write) => Promise<unknown>;
/** client.send for any of the writes (its overloads take one command type at a time). */
const sender = (client: S3Client) => client.send.bind(client) as (command: Write) => Promise<unknown>;

const WAYS: [string, SendAny][] = [
  ["lease.s3(client)", (lease, s3, command) => sender(lease.s3(s3))(command)],
  ["lease.bind(command)", (lease, s3, command) => sender(s3)(lease.bind(command))],
];

/**
 * Two using() jobs on one S3Client, in lockstep: both hold their lease before either writes, and
 * each of their writes is sent while the other job is sending its own. Each job writes under its
 * own prefix: three PutObjects, a CopyObject, a DeleteObject and a DeleteObjects.
 */
async function twoJobs(
  s3: S3Client,
  bucket: string,
  send: SendAny,
): Promise<{ name: string; lease: Lease; outcomes: string[] }[]> {
  const barrier = lockstep(2);
  const job = (name: string) =>
    fence.using({ bucket, prefix: `${name}/`, ttlMs: 30_000 }, async (lease) => {
      const outcomes: string[] = [];
      try {
        await barrier.step();
        const writes = [
          new PutObjectCommand({ Bucket: bucket, Key: `${name}/0`, Body: `${name} zero` }),
          new PutObjectCommand({ Bucket: bucket, Key: `${name}/1`, Body: `${name} one` }),
          new PutObjectCommand({ Bucket: bucket, Key: `${name}/2`, Body: `${name} two` }),
          new CopyObjectCommand({ Bucket: bucket, Key: `${name}/copy`, CopySource: `${bucket}/${name}/0` }),
          new DeleteObjectCommand({ Bucket: bucket, Key: `${name}/1` }),
          new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: [{ Key: `${name}/2` }] } }),
        ];
        for (const command of writes) {
          outcomes.push(
            await send(lease, s3, command).then(
              (out) => {
                const errors = (out as { Errors?: { Code?: string }[] }).Errors ?? [];
                return errors.length === 0 ? "ok" : errors.map((e) => e.Code).join(",");
              },
              (e: Error) => e.name,
            ),
          );
          await barrier.step();
        }
      } catch (e) {
        barrier.break();
        throw e;
      }
      barrier.break();
      return { name, lease, outcomes };
    });
  return Promise.all([job("a"), job("b")]);
}

const EXPECTED_WRITES = (name: string) =>
  [
    ["PutObject", `${name}/0`],
    ["PutObject", `${name}/1`],
    ["PutObject", `${name}/2`],
    ["CopyObject", `${name}/copy`],
    ["DeleteObject", `${name}/1`],
    ["DeleteObjects", `${name}/2`],
  ].sort();

describe("two concurrent using() jobs on one S3Client", () => {
  it.each(WAYS)("each write carries its own job's token, with %s", async (_, send) => {
    const bucket = await newBucket();
    const s3 = gw.s3();
    const stackBefore = s3.middlewareStack.identify();
    const jobs = await twoJobs(s3, bucket, send);

    for (const { name, lease, outcomes } of jobs) {
      expect(outcomes, name).toEqual(["ok", "ok", "ok", "ok", "ok", "ok"]);
      const records = await writeRecords(bucket, `${name}/`);
      expect(records.map((r) => [r.op, r.key]).sort(), name).toEqual(EXPECTED_WRITES(name));
      for (const r of records) {
        expect({ op: r.op, key: r.key, decision: r.decision, token: r.token, leaseId: r.leaseId }).toEqual({
          op: r.op,
          key: r.key,
          decision: "accepted",
          token: lease.token,
          leaseId: lease.leaseId,
        });
      }
    }
    expect(jobs[0]!.lease.token).not.toBe(jobs[1]!.lease.token);
    // The shared client is as it was: nothing was added to its stack.
    expect(s3.middlewareStack.identify()).toEqual(stackBefore);
    const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: "a/copy" }));
    expect(await got.Body?.transformToString()).toBe("a zero");
  });

  it("with a client that caches its middleware (cacheMiddleware: true), through lease.s3(client)", async () => {
    const bucket = await newBucket();
    const s3 = gw.s3({ cacheMiddleware: true });
    const jobs = await twoJobs(s3, bucket, WAYS[0]![1]);
    for (const { name, lease, outcomes } of jobs) {
      expect(outcomes, name).toEqual(["ok", "ok", "ok", "ok", "ok", "ok"]);
      const records = await writeRecords(bucket, `${name}/`);
      expect(records.map((r) => [r.op, r.key]).sort(), name).toEqual(EXPECTED_WRITES(name));
      for (const r of records)
        expect([r.decision, r.token], `${r.op} ${r.key}`).toEqual(["accepted", lease.token]);
    }
  });

  it("the plugin on the shared client fails the second job loudly; the first writes with its own token", async () => {
    const bucket = await newBucket();
    const s3 = gw.s3();
    const barrier = lockstep(2);
    const job = (name: string) =>
      fence.using({ bucket, prefix: `${name}/`, ttlMs: 30_000 }, async (lease) => {
        try {
          s3.middlewareStack.use(fencingTokenPlugin(lease)); // the mistake: one stack, two leases
          await barrier.step(); // both have tried before either writes
          await s3.send(new PutObjectCommand({ Bucket: bucket, Key: `${name}/0`, Body: name }));
          return lease.token;
        } finally {
          barrier.break();
        }
      });
    const [a, b] = await Promise.allSettled([job("a"), job("b")]);
    expect(a.status).toBe("fulfilled");
    expect(b.status).toBe("rejected");
    const refusal = (b as PromiseRejectedResult).reason as Error;
    expect(refusal).toBeInstanceOf(FencingTokenConflictError);
    expect(refusal.message).toMatch(/already carries the fencing token of lease \S+ \(token \d+\)/);
    expect(refusal.message).toContain("lease.s3(client)");

    const records = await writeRecords(bucket, "");
    expect(records.map((r) => [r.op, r.key, r.decision, r.token])).toEqual([
      ["PutObject", "a/0", "accepted", (a as PromiseFulfilledResult<number>).value],
    ]);
  });
});

describe("fencingTokenPlugin on one stack", () => {
  it("refuses another source, keeps the first, accepts the same source again, and another after removal", async () => {
    const bucket = await newBucket();
    const first = await fence.lease({ bucket, key: "k", ttlMs: 30_000 });
    const second = await fence.lease({ bucket, key: "other", ttlMs: 30_000 });
    try {
      const s3 = gw.s3();
      s3.middlewareStack.use(fencingTokenPlugin(first));
      s3.middlewareStack.use(fencingTokenPlugin(first)); // the same lease again: nothing changes
      for (const other of [
        fencingTokenPlugin(second),
        fencingTokenPlugin("a-string"),
        fencingTokenPlugin(() => "x"),
      ]) {
        expect(() => s3.middlewareStack.use(other)).toThrow(FencingTokenConflictError);
      }
      expect(() => s3.middlewareStack.use(fencingTokenPlugin(second))).toThrow(
        `already carries the fencing token of lease ${first.leaseId} (token ${first.token}); adding lease ${second.leaseId} (token ${second.token})`,
      );
      const put = await s3.send(new PutObjectCommand({ Bucket: bucket, Key: "k", Body: "first" }));
      expect(put.$metadata.httpStatusCode).toBe(200);

      // Handing the client over: remove the plugin, then add the other lease's.
      expect(s3.middlewareStack.remove("fencegateFencingToken")).toBe(true);
      s3.middlewareStack.use(fencingTokenPlugin(second));
      await s3.send(new PutObjectCommand({ Bucket: bucket, Key: "other", Body: "second" }));

      const records = await writeRecords(bucket, "");
      expect(records.map((r) => [r.key, r.decision, r.token])).toEqual([
        ["k", "accepted", first.token],
        ["other", "accepted", second.token],
      ]);
    } finally {
      await first.release();
      await second.release();
    }
  });
});

describe("lease.bind(command)", () => {
  it("refuses a command bound to another lease; the same lease again is fine", async () => {
    const bucket = await newBucket();
    const first = await fence.lease({ bucket, key: "k", ttlMs: 30_000 });
    const second = await fence.lease({ bucket, key: "j", ttlMs: 30_000 });
    try {
      const command = first.bind(new PutObjectCommand({ Bucket: bucket, Key: "k", Body: "x" }));
      expect(first.bind(command)).toBe(command);
      expect(() => second.bind(command)).toThrow(FencingTokenConflictError);
      expect(() => second.s3(gw.s3()).send(command)).toThrow(
        /this command is bound to the fencing token of lease/,
      );
      await gw.s3().send(command);
      expect((await writeRecords(bucket, "")).map((r) => [r.key, r.decision, r.token])).toEqual([
        ["k", "accepted", first.token],
      ]);
    } finally {
      await first.release();
      await second.release();
    }
  });

  it("on a client with cacheMiddleware: true, a cached handler never sends another command with its token", async () => {
    const bucket = await newBucket();
    const a = await fence.lease({ bucket, key: "a", ttlMs: 30_000 });
    const b = await fence.lease({ bucket, key: "b", ttlMs: 30_000 });
    try {
      const s3 = gw.s3({ cacheMiddleware: true });
      const first = a.bind(new PutObjectCommand({ Bucket: bucket, Key: "a", Body: "a" }));
      await s3.send(first); // resolves and caches the handler of PutObjectCommand, with a's token
      await s3.send(first); // the same command again: still a's
      // Another command through the cached handler would carry a's token: refused before sending.
      const other = b.bind(new PutObjectCommand({ Bucket: bucket, Key: "b", Body: "b" }));
      await expect(s3.send(other)).rejects.toThrow(FencingTokenConflictError);
      await expect(s3.send(new PutObjectCommand({ Bucket: bucket, Key: "b", Body: "b" }))).rejects.toThrow(
        /cacheMiddleware: true/,
      );
      // With an options argument the client resolves a handler for the command itself.
      await s3.send(b.bind(new PutObjectCommand({ Bucket: bucket, Key: "b", Body: "b" })), {});
      expect((await writeRecords(bucket, "")).map((r) => [r.key, r.decision, r.token])).toEqual([
        ["a", "accepted", a.token],
        ["a", "accepted", a.token],
        ["b", "accepted", b.token],
      ]);
    } finally {
      await a.release();
      await b.release();
    }
  });

  it("a bound command keeps its token on a client that carries another lease's plugin", async () => {
    const bucket = await newBucket();
    const mine = await fence.lease({ bucket, key: "mine", ttlMs: 30_000 });
    const theirs = await fence.lease({ bucket, key: "theirs", ttlMs: 30_000 });
    try {
      const s3 = gw.s3();
      s3.middlewareStack.use(fencingTokenPlugin(theirs));
      await s3.send(mine.bind(new PutObjectCommand({ Bucket: bucket, Key: "mine", Body: "m" })));
      await s3.send(new PutObjectCommand({ Bucket: bucket, Key: "theirs", Body: "t" }));
      expect((await writeRecords(bucket, "")).map((r) => [r.key, r.decision, r.token])).toEqual([
        ["mine", "accepted", mine.token],
        ["theirs", "accepted", theirs.token],
      ]);
    } finally {
      await mine.release();
      await theirs.release();
    }
  });
});

describe("lease.s3(client)", () => {
  /** Records, per command sent by `s3`, the fencing token header as signed and sent. */
  function recordTokens(s3: S3Client): { command: string; token: string | undefined }[] {
    const sent: { command: string; token: string | undefined }[] = [];
    s3.middlewareStack.add(
      (next, context) => async (args) => {
        const request = (args as FinalizeHandlerArguments<object>).request as {
          headers: Record<string, string>;
        };
        sent.push({
          command: String(context.commandName).replace(/Command$/, ""),
          token: request.headers[FENCE_TOKEN_HEADER],
        });
        return next(args);
      },
      { step: "deserialize", name: "recordSentToken" },
    );
    return sent;
  }

  it("is an S3Client that lib-storage's Upload can use: a multipart upload with the lease's token", async () => {
    const bucket = await newBucket();
    const lease = await fence.lease({ bucket, key: "big", ttlMs: 30_000 });
    try {
      const s3 = gw.s3();
      const sent = recordTokens(s3);
      const fenced = lease.s3(s3);
      expect(fenced).toBeInstanceOf(S3Client);
      const body = Buffer.alloc(5 * 1024 * 1024 + 1, 7);
      await new Upload({
        client: fenced,
        params: { Bucket: bucket, Key: "big", Body: body },
        partSize: 5 * 1024 * 1024,
      }).done();
      await fenced.send(new ListObjectsV2Command({ Bucket: bucket }));
      expect(sent.map((s) => [s.command, s.token === lease.fencingToken])).toEqual([
        ["CreateMultipartUpload", true],
        ["UploadPart", true],
        ["UploadPart", true],
        ["CompleteMultipartUpload", true],
        ["ListObjectsV2", false],
      ]);
      expect(sent.at(-1)!.token).toBeUndefined();
      const records = await writeRecords(bucket, "big");
      expect(records.map((r) => [r.op, r.decision, r.token])).toEqual([
        ["CreateMultipartUpload", "accepted", lease.token],
        ["UploadPart", "accepted", lease.token],
        ["UploadPart", "accepted", lease.token],
        ["CompleteMultipartUpload", "accepted", lease.token],
      ]);
      // The shared client sends without a token: its writes are refused (fencing required).
      const unfenced = await s3
        .send(new PutObjectCommand({ Bucket: bucket, Key: "big", Body: "x" }))
        .catch((e: Error) => e);
      expect(unfenced).toMatchObject({ name: "FencingTokenRequired" });
      // destroy() on the view leaves the shared client's connections alone.
      fenced.destroy();
      const head = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: "big" }));
      expect(head.ContentLength).toBe(body.length);
      await head.Body?.transformToByteArray();
    } finally {
      await lease.release();
    }
  });

  it("fails a write locally once the lease is lost, sending nothing", async () => {
    const bucket = await newBucket();
    const lease = await fence.lease({ bucket, key: "late", ttlMs: 30_000 });
    const s3 = gw.s3();
    const sent = recordTokens(s3);
    await fence.release(lease.leaseId);
    await expect(lease.renew()).rejects.toBeInstanceOf(LeaseLostError);
    const err = await lease
      .s3(s3)
      .send(new PutObjectCommand({ Bucket: bucket, Key: "late", Body: "late" }))
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LeaseLostError);
    expect(sent).toEqual([]);
  });
});
