// Safety scenario 4 under heavy concurrency: 32 workers at once grant, write (small bodies kept
// inline in the database, larger ones as files), send writes with tokens of leases they have
// already released, and release, so that the embedded store commits them in shared batches
// (group commit). The gateway is killed with SIGKILL in the middle of that, restarted on the same
// data directory, and checked: every acknowledged grant, write, refusal and release survived,
// tokens never go backwards, no refused write left a trace, HCTs survived.
import { randomBytes, randomInt } from "node:crypto";
import { CreateBucketCommand, GetObjectCommand, PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { afterAll, describe, expect, it } from "vitest";
import { type Lease, LeaseApiError, LeaseClient } from "../../src/client/lease-client.js";
import { md5Hex } from "../support/digest.js";
import { CREDENTIALS, type GatewayProcess, s3Client, spawnGateway, tempDir } from "../support/gateway.js";
import { type AuditRecord, allAuditRecords, outcomeOfError, quietLogger } from "../support/safety-helpers.js";
import { sleep } from "../support/wait.js";

const BUCKET = "burst";
const WORKERS = 32;
const CYCLES = 3;
/** Acknowledged operations (grants, writes, refusals, releases) before the kill is armed. */
const ACKS_BEFORE_KILL = 150;

type Write = {
  key: string;
  token: number;
  md5: string;
  size: number;
  /** acked: 200; refused: 409; unknown: no answer (the gateway died). */
  state: "acked" | "refused" | "unknown";
  requestId?: string;
  code?: string | null;
};

const isConnectionError = (err: unknown): boolean =>
  !(err instanceof LeaseApiError) &&
  (err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode === undefined;

describe("kill -9 during bursts of concurrent grants and writes (group commit)", () => {
  const dir = tempDir("fencegate-safety-burst-");
  let gateway: GatewayProcess | undefined;
  const clients: S3Client[] = [];

  afterAll(async () => {
    for (const c of clients) c.destroy();
    await gateway?.kill("SIGKILL");
    dir.cleanup();
  });

  it("keeps every acknowledged grant, write, refusal and release across repeated crashes", {
    timeout: 240_000,
  }, async () => {
    const keys = Array.from({ length: WORKERS }, (_, w) => `w${w}`);
    const writes = new Map<string, Write[]>(keys.map((k) => [k, []]));
    /** The write each key is known to hold after the last restart (index into writes). */
    const held = new Map<string, number>(keys.map((k) => [k, -1]));
    const grants: Lease[] = [];
    const leaseState = new Map<string, "holding" | "releasing" | "released">();
    const errors: string[] = [];
    let maxToken = 0;
    const see = (t: number) => {
      maxToken = Math.max(maxToken, t);
    };

    gateway = await spawnGateway(dir.path);
    let leases = new LeaseClient({ endpoint: gateway.url, ...CREDENTIALS });
    let s3 = s3Client(gateway.url);
    clients.push(s3);
    await s3.send(new CreateBucketCommand({ Bucket: BUCKET }));

    for (let cycle = 0; cycle < CYCLES; cycle++) {
      let acks = 0;
      let armed!: () => void;
      const killArmed = new Promise<void>((r) => {
        armed = r;
      });
      const ack = () => {
        if (++acks === ACKS_BEFORE_KILL) armed();
      };
      const url = gateway.url;
      const worker = async (key: string) => {
        const client = s3Client(url, { logger: quietLogger });
        clients.push(client);
        const leaseClient = new LeaseClient({ endpoint: url, ...CREDENTIALS });
        const mine = writes.get(key)!;
        let previous: Lease | undefined;
        const put = async (lease: Lease, stale: boolean): Promise<boolean> => {
          // One write in four is larger than the inline threshold: a file, not a database row.
          const big = randomInt(4) === 0;
          const head = Buffer.from(
            `${key} token ${lease.token} ${stale ? "stale" : "fresh"} ${mine.length}\n`,
          );
          const body = big ? Buffer.concat([head, randomBytes(192 * 1024)]) : head;
          const w: Write = {
            key,
            token: lease.token,
            md5: md5Hex(body),
            size: body.length,
            state: "unknown",
          };
          mine.push(w);
          try {
            const out = await client.send(
              new PutObjectCommand({
                Bucket: BUCKET,
                Key: key,
                Body: body,
                Metadata: { "fence-token": lease.fencingToken },
              }),
            );
            w.state = "acked";
            w.requestId = out.$metadata.requestId;
            if (stale) errors.push(`${key}: a write with released token ${lease.token} was accepted`);
            ack();
            return true;
          } catch (err) {
            if (isConnectionError(err)) return false;
            const o = outcomeOfError(err);
            w.state = "refused";
            w.requestId = o.requestId ?? undefined;
            w.code = o.code;
            if (!stale || o.status !== 409) errors.push(`${key}: ${JSON.stringify(o)}`);
            ack();
            return true;
          }
        };
        for (;;) {
          let lease: Lease;
          try {
            lease = await leaseClient.acquire({ bucket: BUCKET, key, ttlMs: 60_000, owner: key });
          } catch (err) {
            if (!isConnectionError(err)) errors.push(`acquire ${key}: ${(err as Error).message}`);
            return;
          }
          see(lease.token);
          grants.push(lease);
          leaseState.set(lease.leaseId, "holding");
          ack();
          // The fresh write and, at the same time, one with the token of the lease released
          // before: both reach the store in the same turns as the other workers' steps.
          const sent = [put(lease, false)];
          if (previous) sent.push(put(previous, true));
          const answered = await Promise.all(sent);
          if (answered.includes(false)) return;
          leaseState.set(lease.leaseId, "releasing");
          try {
            await leaseClient.release(lease.leaseId);
          } catch (err) {
            if (!isConnectionError(err)) errors.push(`release ${key}: ${(err as Error).message}`);
            return;
          }
          leaseState.set(lease.leaseId, "released");
          ack();
          previous = lease;
        }
      };
      const loops = Promise.all(keys.map(worker));
      await within(Promise.race([killArmed, loops]), 60_000, `fewer than ${ACKS_BEFORE_KILL} acks`);
      await sleep(randomInt(0, 200));
      await gateway.kill("SIGKILL");
      await within(loops, 30_000, "workers did not stop after the kill");
      expect(errors).toEqual([]);

      gateway = await spawnGateway(dir.path);
      leases = new LeaseClient({ endpoint: gateway.url, ...CREDENTIALS });
      s3 = s3Client(gateway.url);
      clients.push(s3);

      // 1. Tokens never go backwards.
      const probe = await leases.acquire({ bucket: BUCKET, key: `probe-${cycle}`, ttlMs: 1000 });
      expect(probe.token, `first token after restart ${cycle}`).toBeGreaterThan(maxToken);
      see(probe.token);
      await leases.release(probe.leaseId);

      // 2. Held leases are still active, released ones are not.
      const active = new Set((await leases.list({ bucket: BUCKET })).leases.map((l) => l.leaseId));
      for (const [leaseId, state] of leaseState) {
        if (state === "holding") expect(active.has(leaseId), `held lease ${leaseId} lost`).toBe(true);
        if (state === "released") expect(active.has(leaseId), `released lease ${leaseId} active`).toBe(false);
      }
      for (const leaseId of active) await leases.release(leaseId);
      leaseState.clear();

      // 3. Each key holds its last acknowledged write or a later one left unanswered; never a
      // refused one.
      for (const key of keys) {
        const mine = writes.get(key)!;
        const floor = Math.max(
          held.get(key)!,
          mine.findLastIndex((w) => w.state === "acked"),
        );
        const got = await getObject(s3, key);
        if (got === null) {
          expect(floor, `${key} vanished after restart ${cycle}`).toBe(-1);
          continue;
        }
        const index = mine.findLastIndex(
          (w, i) => i >= floor && w.state !== "refused" && w.md5 === got.md5 && w.size === got.size,
        );
        // -1: bytes that no write could have left (an older write, a refused one, a torn body).
        expect(
          index,
          `${key} after restart ${cycle}: ${got.size} bytes, md5 ${got.md5}`,
        ).toBeGreaterThanOrEqual(Math.max(floor, 0));
        held.set(key, index);
      }

      // 4. The audit log holds every acknowledged decision, as the client saw it.
      const all = await allAuditRecords(leases, { bucket: BUCKET });
      for (let i = 1; i < all.length; i++) expect(all[i]!.seq).toBeGreaterThan(all[i - 1]!.seq);
      const byRequest = new Map<string, AuditRecord>();
      for (const r of all) if (r.op === "PutObject" && r.requestId) byRequest.set(r.requestId, r);
      for (const w of [...writes.values()].flat()) {
        if (w.state === "unknown") continue;
        const r = byRequest.get(w.requestId!);
        expect(r, `audit record of ${w.state} write ${w.key} token ${w.token}`).toMatchObject({
          decision: w.state === "acked" ? "accepted" : "rejected",
          key: w.key,
          token: w.token,
          ...(w.state === "refused" ? { reason: w.code } : {}),
        });
      }
      const granted = new Set(
        all.filter((r) => r.op === "LeaseAcquired" && r.decision === "accepted").map((r) => r.leaseId),
      );
      for (const l of grants) expect(granted.has(l.leaseId), `LeaseAcquired of ${l.leaseId}`).toBe(true);
      // Per key, accepted tokens only ever increase.
      for (const key of keys) {
        const tokens = all
          .filter((r) => r.key === key && r.op === "PutObject" && r.decision === "accepted")
          .map((r) => r.token!);
        for (let i = 1; i < tokens.length; i++) expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);
      }
      // 5. HCTs survived: the oldest token of each key is refused, naming at least the token
      // of the write the key holds.
      for (const key of keys) {
        const first = grants.find((l) => l.key === key);
        const heldWrite = writes.get(key)![held.get(key)!];
        if (!first || !heldWrite) continue;
        const lease = await leases.acquire({ bucket: BUCKET, key, ttlMs: 10_000, owner: "probe" });
        see(lease.token);
        const refused = await s3
          .send(
            new PutObjectCommand({
              Bucket: BUCKET,
              Key: key,
              Body: "stale probe",
              Metadata: { "fence-token": first.fencingToken },
            }),
          )
          .then(
            () => null,
            (err: unknown) => outcomeOfError(err),
          );
        expect(refused, `stale probe on ${key} accepted`).not.toBeNull();
        expect(refused!.status).toBe(409);
        if (first.token < heldWrite.token) {
          expect(refused!.highestToken ?? 0).toBeGreaterThanOrEqual(heldWrite.token);
        }
        await leases.release(lease.leaseId);
      }
      const ackedWrites = [...writes.values()].flat().filter((w) => w.state === "acked").length;
      expect(ackedWrites, `acknowledged writes by cycle ${cycle}`).toBeGreaterThan(0);
    }
    const refusals = [...writes.values()].flat().filter((w) => w.state === "refused").length;
    expect(refusals, "no stale write was answered").toBeGreaterThan(0);
  });
});

async function getObject(s3: S3Client, key: string): Promise<{ md5: string; size: number } | null> {
  try {
    const got = await s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: key }));
    const bytes = await got.Body!.transformToByteArray();
    return { md5: md5Hex(bytes), size: bytes.length };
  } catch (err) {
    if (outcomeOfError(err).status === 404) return null;
    throw err;
  }
}

function within<T>(p: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(message)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
