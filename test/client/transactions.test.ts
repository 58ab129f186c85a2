import {
  CreateBucketCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  type S3Client,
} from "@aws-sdk/client-s3";
import type { FinalizeHandlerArguments } from "@smithy/types";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  FENCE_TOKEN_HEADER,
  FENCE_TRANSACTION_HEADER,
  FenceApiError,
  FenceClient,
  FencingTokenConflictError,
  fetchTransport,
  LeaseLostError,
  OutcomeUnknownError,
  type Transaction,
  TransactionAbortedError,
  TransactionCommittedError,
  type Transport,
} from "../../src/client/index.js";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";
import { type FaultProxy, startFaultProxy } from "./fault-proxy.js";

checkLeaseApiResponses();

/**
 * Fenced transactions through the SDK against a real gateway (embedded filesystem backend):
 * lease.transaction(fn) commits on return and aborts on throw, the S3 bindings carry
 * x-fence-transaction, refused commits are typed refusals and unknown outcomes are not.
 */

const BUCKET = "tx-sdk";
let gw: TestGateway;
let fence: FenceClient;
let s3: S3Client;

beforeAll(async () => {
  gw = await startTestGateway();
  fence = new FenceClient({ endpoint: gw.url, ...CREDENTIALS, retry: { baseDelayMs: 10 } });
  s3 = gw.s3();
  await s3.send(new CreateBucketCommand({ Bucket: BUCKET }));
});
afterAll(async () => {
  await gw?.stop();
});

/** The object's body as a plain reader (no transaction) sees it, or null when it does not exist. */
async function plainRead(key: string): Promise<string | null> {
  try {
    const out = await s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: key }));
    return await out.Body!.transformToString();
  } catch (e) {
    if ((e as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode === 404) return null;
    throw e;
  }
}

/** An S3 client that records the fencegate headers of each request as signed and sent. */
function recordingClient(): {
  s3: S3Client;
  sent: { command: string; token?: string; transaction?: string }[];
} {
  const client = gw.s3();
  const sent: { command: string; token?: string; transaction?: string }[] = [];
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const { headers } = (args as FinalizeHandlerArguments<object>).request as {
        headers: Record<string, string>;
      };
      sent.push({
        command: String(context.commandName).replace(/Command$/, ""),
        token: headers[FENCE_TOKEN_HEADER],
        transaction: headers[FENCE_TRANSACTION_HEADER],
      });
      return next(args);
    },
    { step: "deserialize", name: "recordFenceHeaders" },
  );
  return { s3: client, sent };
}

describe("lease.transaction", () => {
  it("commits when the function returns: invisible before, all visible after", async () => {
    const lease = await fence.lease({ bucket: BUCKET, prefix: "commit/", ttlMs: 10_000 });
    let seenInside: { plainA: string | null; plainB: string | null; txA: string } | undefined;
    let id = "";
    try {
      const result = await lease.transaction(async (tx) => {
        id = tx.transactionId;
        expect(tx.token).toBe(lease.token);
        expect(tx.leaseId).toBe(lease.leaseId);
        await s3.send(tx.bind(new PutObjectCommand({ Bucket: BUCKET, Key: "commit/a", Body: "A" })));
        await tx.s3(s3).send(new PutObjectCommand({ Bucket: BUCKET, Key: "commit/b", Body: "B" }));
        // A reader outside the transaction sees nothing yet; a read inside it sees what it staged.
        const inside = await s3.send(tx.bind(new GetObjectCommand({ Bucket: BUCKET, Key: "commit/a" })));
        seenInside = {
          plainA: await plainRead("commit/a"),
          plainB: await plainRead("commit/b"),
          txA: await inside.Body!.transformToString(),
        };
        expect((await fence.transactionState(tx.transactionId)).state).toBe("open");
        return 42;
      });
      expect(seenInside).toEqual({ plainA: null, plainB: null, txA: "A" });
      expect(result.value).toBe(42);
      expect(result.commit.transactionId).toBe(id);
      expect(result.commit.token).toBe(lease.token);
      expect(result.commit.objects.map((o) => o.key).sort()).toEqual(["commit/a", "commit/b"]);
      expect(await plainRead("commit/a")).toBe("A");
      expect(await plainRead("commit/b")).toBe("B");
      const state = await fence.transactionState(id);
      expect(state).toMatchObject({ transactionId: id, state: "committed", leaseId: lease.leaseId });
      // Committing again answers the same.
      expect(await fence.commitTransaction(id)).toEqual(result.commit);
      // An abort after the commit is refused, typed.
      await expect(fence.abortTransaction(id)).rejects.toBeInstanceOf(TransactionCommittedError);
    } finally {
      await lease.release();
    }
  });

  it("aborts when the function throws: its error comes out and nothing is visible", async () => {
    const lease = await fence.lease({ bucket: BUCKET, prefix: "abort/", ttlMs: 10_000 });
    let handle: Transaction | undefined;
    const boom = new Error("the job failed half way");
    try {
      const err = await lease
        .transaction(async (tx) => {
          handle = tx;
          await s3.send(tx.bind(new PutObjectCommand({ Bucket: BUCKET, Key: "abort/a", Body: "A" })));
          await s3.send(tx.bind(new PutObjectCommand({ Bucket: BUCKET, Key: "abort/b", Body: "B" })));
          throw boom;
        })
        .catch((e: unknown) => e);
      expect(err).toBe(boom);
      expect(handle!.state).toBe("aborted");
      expect(await plainRead("abort/a")).toBeNull();
      expect(await plainRead("abort/b")).toBeNull();
      const state = await fence.transactionState(handle!.transactionId);
      expect(state.state).toBe("aborted");
      expect(state.reason).toBe("ClientAbort");
      // A commit of the aborted transaction is a refusal, typed.
      await expect(fence.commitTransaction(handle!.transactionId)).rejects.toBeInstanceOf(
        TransactionAbortedError,
      );
      // The handle sends nothing more.
      const late = await s3
        .send(handle!.bind(new PutObjectCommand({ Bucket: BUCKET, Key: "abort/late", Body: "L" })))
        .catch((e: unknown) => e);
      expect(String(late)).toMatch(/is aborted/);
      expect(await plainRead("abort/late")).toBeNull();
    } finally {
      await lease.release();
    }
  });

  it("stages deletes too: the old object stays readable until the commit", async () => {
    const lease = await fence.lease({ bucket: BUCKET, prefix: "del/", ttlMs: 10_000 });
    try {
      await s3.send(lease.bind(new PutObjectCommand({ Bucket: BUCKET, Key: "del/old", Body: "old" })));
      const { commit } = await lease.transaction(async (tx) => {
        await s3.send(tx.bind(new DeleteObjectCommand({ Bucket: BUCKET, Key: "del/old" })));
        await s3.send(tx.bind(new PutObjectCommand({ Bucket: BUCKET, Key: "del/new", Body: "new" })));
        expect(await plainRead("del/old")).toBe("old");
        expect(await plainRead("del/new")).toBeNull();
      });
      expect(commit.objects).toEqual(
        expect.arrayContaining([
          { key: "del/old", deleted: true },
          expect.objectContaining({ key: "del/new" }),
        ]),
      );
      expect(await plainRead("del/old")).toBeNull();
      expect(await plainRead("del/new")).toBe("new");
    } finally {
      await lease.release();
    }
  });

  it("a refused commit rejects with the gateway's refusal, and nothing is visible", async () => {
    // A short lease without a handle that renews it: the commit comes after it expired.
    const record = await fence.acquire({ bucket: BUCKET, key: "refused/k", ttlMs: 500 });
    const tx = await fence.openTransaction(record.leaseId);
    expect(tx).toMatchObject({ leaseId: record.leaseId, token: record.token, bucket: BUCKET });
    const holder = {
      fencingToken: record.fencingToken,
      leaseId: record.leaseId,
      token: record.token,
      transactionId: tx.transactionId,
      throwIfLost() {},
    };
    const { s3: recording } = recordingClient();
    const { bindFencingToken } = await import("../../src/client/index.js");
    await recording.send(
      bindFencingToken(new PutObjectCommand({ Bucket: BUCKET, Key: "refused/k", Body: "x" }), holder),
    );
    await new Promise((r) => setTimeout(r, 800));
    const err = await fence.commitTransaction(tx.transactionId).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FenceApiError);
    expect(err).not.toBeInstanceOf(OutcomeUnknownError);
    expect((err as FenceApiError).status).toBe(409);
    expect(["LeaseExpired", "LeaseLost", "TransactionAborted"]).toContain((err as FenceApiError).code);
    if ((err as FenceApiError).code !== "TransactionAborted") expect(err).toBeInstanceOf(LeaseLostError);
    expect(await plainRead("refused/k")).toBeNull();
    expect((await fence.transactionState(tx.transactionId)).state).toBe("aborted");
  });

  it("rejects at once with the LeaseLostError when the lease is lost while the function runs", async () => {
    const lease = await fence.lease({ bucket: BUCKET, key: "lost/k", ttlMs: 10_000 });
    let id = "";
    let release!: () => void;
    const stuck = new Promise<void>((r) => {
      release = r;
    });
    const run = lease.transaction(async (tx) => {
      id = tx.transactionId;
      await s3.send(tx.bind(new PutObjectCommand({ Bucket: BUCKET, Key: "lost/k", Body: "x" })));
      await stuck;
    });
    run.catch(() => undefined);
    await expect.poll(() => id).not.toBe("");
    await fence.breakLease(lease.leaseId);
    // The handle learns of the loss at its next renewal; force one.
    await lease.renew().catch(() => undefined);
    const err = await run.catch((e: unknown) => e);
    release();
    expect(err).toBeInstanceOf(LeaseLostError);
    expect(await plainRead("lost/k")).toBeNull();
    await expect.poll(async () => (await fence.transactionState(id)).state).toBe("aborted");
  });
});

describe("the S3 bindings of a transaction", () => {
  it("carry x-fence-transaction on writes (with the token) and reads while open, and nothing after", async () => {
    const lease = await fence.lease({ bucket: BUCKET, prefix: "hdr/", ttlMs: 10_000 });
    const { s3: recording, sent } = recordingClient();
    const pluggedSent: typeof sent = [];
    try {
      // Reads go to an object that exists outside the transaction.
      await s3.send(lease.bind(new PutObjectCommand({ Bucket: BUCKET, Key: "hdr/existing", Body: "0" })));
      let handle: Transaction | undefined;
      await lease.transaction(async (tx) => {
        handle = tx;
        // bind(command)
        await recording.send(tx.bind(new PutObjectCommand({ Bucket: BUCKET, Key: "hdr/bind", Body: "1" })));
        await recording.send(tx.bind(new HeadObjectCommand({ Bucket: BUCKET, Key: "hdr/existing" })));
        // a view of a shared client
        await tx.s3(recording).send(new PutObjectCommand({ Bucket: BUCKET, Key: "hdr/view", Body: "2" }));
        // the plugin on a client of this transaction only
        const own = recordingClient();
        own.s3.middlewareStack.use(tx.plugin());
        await own.s3.send(new PutObjectCommand({ Bucket: BUCKET, Key: "hdr/plugin", Body: "3" }));
        await own.s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: "hdr/existing" }));
        pluggedSent.push(...own.sent);
        // A plain write of the lease is not in the transaction.
        await recording.send(
          lease.bind(new PutObjectCommand({ Bucket: BUCKET, Key: "hdr/plain", Body: "4" })),
        );
        expect(await plainRead("hdr/plain")).toBe("4");
        // One command, one source: a transaction's command cannot be bound to its lease as well.
        const cmd = tx.bind(new PutObjectCommand({ Bucket: BUCKET, Key: "hdr/x", Body: "x" }));
        expect(() => lease.bind(cmd)).toThrow(FencingTokenConflictError);
      });
      const txid = handle!.transactionId;
      const token = lease.fencingToken;
      expect(sent).toEqual([
        { command: "PutObject", token, transaction: txid },
        { command: "HeadObject", token: undefined, transaction: txid },
        { command: "PutObject", token, transaction: txid },
        { command: "PutObject", token, transaction: undefined },
      ]);
      expect(pluggedSent).toEqual([
        { command: "PutObject", token, transaction: txid },
        { command: "GetObject", token: undefined, transaction: txid },
      ]);
      for (const [key, body] of [
        ["hdr/bind", "1"],
        ["hdr/view", "2"],
        ["hdr/plugin", "3"],
      ]) {
        expect(await plainRead(key!)).toBe(body);
      }
      // After the commit a read through the handle goes out plain; a write fails without being sent.
      sent.length = 0;
      await recording.send(handle!.bind(new GetObjectCommand({ Bucket: BUCKET, Key: "hdr/bind" })));
      const late = await recording
        .send(handle!.bind(new PutObjectCommand({ Bucket: BUCKET, Key: "hdr/late", Body: "5" })))
        .catch((e: unknown) => e);
      expect(String(late)).toMatch(/is committed/);
      expect(sent).toEqual([{ command: "GetObject", token: undefined, transaction: undefined }]);
    } finally {
      await lease.release();
    }
  });
});

describe("a commit whose outcome is unknown", () => {
  /**
   * A transport to the real gateway that passes the first commit on and answers it, once the
   * gateway has committed, 503 with x-fence-outcome: unknown instead of the gateway's 200.
   */
  function losingFirstCommitAnswer(): { transport: Transport; commits: number[] } {
    const commits: number[] = [];
    const transport: Transport = async (req) => {
      const res = await fetchTransport(req);
      if (req.method === "POST" && req.url.pathname.endsWith("/commit")) {
        commits.push(res.status);
        if (commits.length === 1) {
          return {
            status: 503,
            statusText: "Service Unavailable",
            header: (name) =>
              ({ "x-fence-outcome": "unknown", "content-type": "application/json" })[name.toLowerCase()],
            text: JSON.stringify({ error: { code: "ServiceUnavailable", message: "answer lost (test)" } }),
          };
        }
      }
      return res;
    };
    return { transport, commits };
  }

  it("is retried (commits are idempotent) and answers the same 200", async () => {
    const { transport, commits } = losingFirstCommitAnswer();
    const client = new FenceClient({
      endpoint: gw.url,
      ...CREDENTIALS,
      transport,
      retry: { baseDelayMs: 5 },
    });
    const lease = await client.lease({ bucket: BUCKET, key: "unknown/retried", ttlMs: 10_000 });
    try {
      const { commit } = await lease.transaction(async (tx) => {
        await s3.send(tx.bind(new PutObjectCommand({ Bucket: BUCKET, Key: "unknown/retried", Body: "r" })));
      });
      expect(commits).toEqual([200, 200]);
      expect(commit.objects.map((o) => o.key)).toEqual(["unknown/retried"]);
      expect(await plainRead("unknown/retried")).toBe("r");
    } finally {
      await lease.release();
    }
  });

  it("without retries is an OutcomeUnknownError, not a refusal; committing again tells", async () => {
    const { transport } = losingFirstCommitAnswer();
    const client = new FenceClient({ endpoint: gw.url, ...CREDENTIALS, transport, retry: { attempts: 1 } });
    const lease = await client.lease({ bucket: BUCKET, key: "unknown/once", ttlMs: 10_000 });
    try {
      let handle: Transaction | undefined;
      const err = await lease
        .transaction(async (tx) => {
          handle = tx;
          await s3.send(tx.bind(new PutObjectCommand({ Bucket: BUCKET, Key: "unknown/once", Body: "u" })));
        })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OutcomeUnknownError);
      expect(err).not.toBeInstanceOf(TransactionAbortedError);
      expect(err).toMatchObject({ status: 503, transactionId: handle!.transactionId });
      expect(handle!.state).toBe("unknown");
      // It did commit (the answer was lost): the handle commits again and learns it.
      const again = await handle!.commit();
      expect(handle!.state).toBe("committed");
      expect(again.objects.map((o) => o.key)).toEqual(["unknown/once"]);
      expect(await client.commitTransaction(handle!.transactionId)).toEqual(again);
      expect(await plainRead("unknown/once")).toBe("u");
    } finally {
      await lease.release();
    }
  });

  it("when the connection breaks after the commit was sent and no retry gets through", async () => {
    let proxy: FaultProxy | undefined;
    proxy = await startFaultProxy(gw.url, (req) => {
      if (req.method === "POST" && (req.url ?? "").includes("/commit")) {
        // The first commit reaches the gateway and its answer is cut; later ones get 503s.
        return proxy!.seen.some((s) => s.path.endsWith("/commit")) ? "503" : "drop-after";
      }
      return "forward";
    });
    try {
      const client = new FenceClient({
        endpoint: proxy.url,
        ...CREDENTIALS,
        retry: { attempts: 3, baseDelayMs: 5 },
      });
      const record = await client.acquire({ bucket: BUCKET, key: "unknown/dropped", ttlMs: 10_000 });
      const tx = await client.openTransaction(record.leaseId);
      const { bindFencingToken } = await import("../../src/client/index.js");
      await s3.send(
        bindFencingToken(new PutObjectCommand({ Bucket: BUCKET, Key: "unknown/dropped", Body: "d" }), {
          fencingToken: record.fencingToken,
          leaseId: record.leaseId,
          transactionId: tx.transactionId,
          throwIfLost() {},
        }),
      );
      const err = await client.commitTransaction(tx.transactionId).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OutcomeUnknownError);
      expect(err).toMatchObject({ code: "OutcomeUnknown", transactionId: tx.transactionId });
      expect(proxy.seen.filter((s) => s.path.endsWith("/commit")).map((s) => s.action)).toEqual([
        "drop-after",
        "503",
        "503",
      ]);
      // The gateway did commit.
      expect((await fence.transactionState(tx.transactionId)).state).toBe("committed");
      expect(await plainRead("unknown/dropped")).toBe("d");
      await fence.release(record.leaseId);
    } finally {
      await proxy.close();
    }
  });
});
