// Safety scenario 3: many concurrent writers with interleaved tokens on one object. Leases are
// handed over while writes of the previous lease are still in flight, writers holding older
// (superseded) tokens keep trying, and in every round one "straggler" with the round's token
// sends half its body, stalls until the next lease's writes have been answered, then finishes:
// it passed every check before the body and must still be refused at the commit. The HCT must
// never go backwards and a refused write must leave no trace.
import {
  CreateBucketCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  type S3Client,
} from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Lease, LeaseClient } from "../../src/client/lease-client.js";
import { md5Hex } from "../support/digest.js";
import { CREDENTIALS, type GatewayProcess, s3Client, spawnGateway, tempDir } from "../support/gateway.js";
import { allAuditRecords, outcomeOfError, type S3Outcome, slowSignedPut } from "../support/safety-helpers.js";
import { sleep } from "../support/wait.js";

const BUCKET = "race";
const KEY = "contended";
const ROUNDS = 8;
const CURRENT_PER_ROUND = 4; // writes with the round's own token
const OLD_PER_ROUND = 2; // writes with tokens of earlier rounds
const CLIENTS = 4;

type Sent = {
  token: number;
  body: string;
  round: number;
  outcome: S3Outcome;
  /** Stragglers: answered only after the whole body was sent (it reached the commit stage). */
  answeredAfterBody?: boolean;
};

describe("concurrent writers with interleaved tokens on one object", () => {
  const dir = tempDir("fencegate-safety-race-");
  let gateway: GatewayProcess | undefined;
  let clients: S3Client[] = [];
  let leases: LeaseClient;

  beforeAll(async () => {
    gateway = await spawnGateway(dir.path);
    clients = Array.from({ length: CLIENTS }, () => s3Client(gateway!.url));
    leases = new LeaseClient({ endpoint: gateway.url, ...CREDENTIALS });
    await clients[0]!.send(new CreateBucketCommand({ Bucket: BUCKET }));
  });

  afterAll(async () => {
    for (const c of clients) c.destroy();
    await gateway?.kill("SIGKILL");
    dir.cleanup();
  });

  it("never lets the HCT decrease and leaves the object equal to an accepted write", {
    timeout: 90_000,
  }, async () => {
    let n = 0;
    const put = async (lease: Lease, round: number): Promise<Sent> => {
      const i = n++;
      // Distinct bodies; every third one large enough that its upload takes a while.
      const pad = i % 3 === 0 ? "x".repeat(1024 * 1024) : "";
      const body = `write ${i} round ${round} token ${lease.token}\n${pad}`;
      const client = clients[i % CLIENTS]!;
      try {
        const out = await client.send(
          new PutObjectCommand({
            Bucket: BUCKET,
            Key: KEY,
            Body: body,
            Metadata: { "fence-token": lease.fencingToken, write: String(i) },
          }),
        );
        return {
          token: lease.token,
          body,
          round,
          outcome: {
            status: out.$metadata.httpStatusCode!,
            code: null,
            highestToken: null,
            requestId: out.$metadata.requestId ?? null,
            etag: out.ETag,
          },
        };
      } catch (err) {
        return { token: lease.token, body, round, outcome: outcomeOfError(err) };
      }
    };

    /** A slow raw PutObject whose body stalls after its first half until `gate` resolves. */
    const straggle = async (lease: Lease, round: number, gate: Promise<unknown>): Promise<Sent> => {
      const i = n++;
      const body = `write ${i} round ${round} token ${lease.token} (straggler)\n${"s".repeat(128 * 1024)}`;
      const bytes = Buffer.from(body);
      const half = bytes.length >> 1;
      const res = await slowSignedPut({
        endpoint: gateway!.url,
        bucket: BUCKET,
        key: KEY,
        chunks: [bytes.subarray(0, half), bytes.subarray(half)],
        headers: { "x-fence-token": lease.fencingToken, "x-amz-meta-write": String(i) },
        gate: () => gate.then(() => undefined),
      });
      return {
        token: lease.token,
        body,
        round,
        answeredAfterBody: !res.respondedBeforeBodyEnd,
        outcome: {
          status: res.status,
          code: res.code,
          highestToken: res.highestToken,
          requestId: res.requestId,
          etag: res.headers.etag as string | undefined,
        },
      };
    };

    const granted: Lease[] = [];
    const inFlight: Promise<Sent>[] = [];
    const stragglers: Promise<Sent>[] = [];
    let openGate: (() => void) | undefined;
    for (let round = 0; round < ROUNDS; round++) {
      const lease = await leases.acquire({
        bucket: BUCKET,
        key: KEY,
        ttlMs: 10_000,
        owner: `round-${round}`,
      });
      if (granted.length > 0) expect(lease.token).toBeGreaterThan(granted[granted.length - 1]!.token);
      granted.push(lease);
      const current: Promise<Sent>[] = [];
      for (let w = 0; w < CURRENT_PER_ROUND; w++) current.push(put(lease, round));
      inFlight.push(...current);
      // Awaited below; should the test fail first, they end with the gateway, not unhandled.
      for (const p of current) p.catch(() => undefined);
      // The previous round's straggler finishes its body once one of this round's writes is answered.
      const openPrevious = openGate;
      void Promise.race(current).then(
        () => openPrevious?.(),
        () => openPrevious?.(),
      );
      if (round < ROUNDS - 1) {
        const gate = new Promise<void>((r) => {
          openGate = r;
        });
        const s = straggle(lease, round, gate);
        s.catch(() => undefined);
        stragglers.push(s);
      }
      for (let w = 0; w < OLD_PER_ROUND && round > 0; w++) {
        const old = put(granted[Math.floor(Math.random() * round)]!, round);
        old.catch(() => undefined);
        inFlight.push(old);
      }
      // Hand the lease over while this round's writes are still uploading or committing: most
      // rounds once the first of them has been answered (so that some commit and the large
      // ones are still in flight when the next lease's writes commit), every third at once.
      if (round % 3 === 2) await sleep(Math.floor(Math.random() * 5));
      else await Promise.race(current);
      await leases.release(lease.leaseId);
    }
    const sent = [...(await Promise.all(inFlight)), ...(await Promise.all(stragglers))];

    // Each straggler's lease had been released before it finished its body: all refused, and
    // (almost always) some of them only at the commit, after their whole body was received;
    // by then a newer lease existed, so those were refused as superseded.
    for (const s of await Promise.all(stragglers)) {
      expect(s.outcome.status, `straggler of round ${s.round}: ${JSON.stringify(s.outcome)}`).toBe(409);
      if (s.answeredAfterBody) expect(s.outcome.code).toBe("StaleFencingToken");
      else expect(["StaleFencingToken", "LeaseExpired"]).toContain(s.outcome.code);
    }
    const reachedCommit = (await Promise.all(stragglers)).filter((s) => s.answeredAfterBody).length;
    expect(reachedCommit, "no straggler got past the checks before its body").toBeGreaterThan(0);

    // Client side: every answer is an acceptance or a fencing refusal.
    const accepted = sent.filter((s) => s.outcome.status === 200);
    const rejected = sent.filter((s) => s.outcome.status !== 200);
    for (const s of rejected) {
      expect(s.outcome.status, JSON.stringify(s.outcome)).toBe(409);
      expect(["StaleFencingToken", "LeaseExpired"]).toContain(s.outcome.code);
    }
    expect(accepted.length).toBeGreaterThan(0);
    // Writes with a superseded token can never succeed.
    expect(rejected.length).toBeGreaterThanOrEqual(OLD_PER_ROUND * (ROUNDS - 1));
    for (const s of accepted) expect(s.outcome.etag).toBe(`"${md5Hex(s.body)}"`);

    // Audit: one record per write, decisions as the clients saw them, HCT never decreasing.
    const records = (await allAuditRecords(leases, { bucket: BUCKET, key: KEY })).filter(
      (r) => r.op === "PutObject",
    );
    expect(records.filter((r) => r.decision === "accepted")).toHaveLength(accepted.length);
    expect(records.filter((r) => r.decision === "rejected")).toHaveLength(rejected.length);
    const byRequest = new Map(records.map((r) => [r.requestId, r]));
    for (const s of sent) {
      const record = byRequest.get(s.outcome.requestId);
      expect(record, `audit record of ${s.outcome.requestId}`).toBeDefined();
      expect(record!.token).toBe(s.token);
      expect(record!.decision).toBe(s.outcome.status === 200 ? "accepted" : "rejected");
      if (record!.decision === "rejected") expect(record!.reason).toBe(s.outcome.code);
    }
    let runningMax = -1;
    let lastSeq = -1;
    for (const r of records) {
      expect(r.seq).toBeGreaterThan(lastSeq);
      lastSeq = r.seq;
      if (r.decision !== "accepted") continue;
      expect(r.token!, `accepted token ${r.token} after ${runningMax} (seq ${r.seq})`).toBeGreaterThanOrEqual(
        runningMax,
      );
      runningMax = r.token!;
    }
    const highestAccepted = Math.max(...accepted.map((s) => s.token));
    expect(runningMax).toBe(highestAccepted);

    // The object is one complete accepted write carrying the highest accepted token.
    const got = await clients[0]!.send(new GetObjectCommand({ Bucket: BUCKET, Key: KEY }));
    const finalBody = await got.Body!.transformToString();
    const winners = accepted.filter((s) => s.token === highestAccepted).map((s) => s.body);
    expect(winners, "the final body is not a write with the highest accepted token").toContain(finalBody);
    expect(got.ETag).toBe(`"${md5Hex(finalBody)}"`);
    const head = await clients[1]!.send(new HeadObjectCommand({ Bucket: BUCKET, Key: KEY }));
    expect(head.ContentLength).toBe(Buffer.byteLength(finalBody));
    expect(head.ETag).toBe(got.ETag);
    expect(head.Metadata?.write).toBe(String(Number(/^write (\d+)/.exec(finalBody)![1])));

    // The gateway keeps serving: a fresh lease writes, the oldest token is refused.
    const health = await fetch(`${gateway!.url}/_fence/v1/health`);
    expect(health.status).toBe(200);
    const last = await leases.acquire({ bucket: BUCKET, key: KEY, ttlMs: 10_000, owner: "after" });
    const after = await put(last, ROUNDS);
    expect(after.outcome.status).toBe(200);
    const stale = await put(granted[0]!, ROUNDS);
    expect(stale.outcome).toMatchObject({ status: 409, code: "StaleFencingToken", highestToken: last.token });
  });
});
