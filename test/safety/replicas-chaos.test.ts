/**
 * Three gateway replicas (separate processes) on one Redis lease store and one shared S3 store (a
 * second fencegate), configured as an operator would (config/redis-replicas.yaml's shape): clients
 * lease → read → increment → write → release through random replicas while replicas are SIGSTOPped
 * past the lease TTL at random, and clients pause past it too, for at least 30 s. The final counter
 * equals the number of acknowledged increments, every grant has its own token, accepted writes
 * carry increasing tokens, and every write decision of every replica is in the one audit log.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { CreateBucketCommand, GetObjectCommand, PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LeaseClient } from "../../src/client/lease-client.js";
import { startStore } from "../backends/s3/s3-fixture.js";
import {
  CREDENTIALS,
  type GatewayProcess,
  s3Client,
  spawnGateway,
  type TestGateway,
  tempDir,
} from "../support/gateway.js";
import { type RedisServer, startRedis } from "../support/redis.js";
import { allAuditRecords, outcomeOfError } from "../support/safety-helpers.js";
import { requireTools } from "../support/tools.js";
import { sleep } from "../support/wait.js";

requireTools("redis-server");

const BUCKET = "chaos";
const KEY = "counter";
const TTL_MS = 1_000;
const CHAOS_MS = Number(process.env.CHAOS_MS ?? 30_000);
const WORKERS = 4;

describe("three replicas on one Redis under SIGSTOP chaos", () => {
  let redis: RedisServer;
  let inner: TestGateway;
  const dirs: Array<{ path: string; cleanup(): void }> = [];
  const replicas: GatewayProcess[] = [];

  beforeAll(async () => {
    redis = await startRedis({ persistence: "aof" });
    inner = await startStore();
    const setup = inner.s3();
    await setup.send(new CreateBucketCommand({ Bucket: BUCKET }));
    await setup.send(new CreateBucketCommand({ Bucket: "fencegate-system" }));
    setup.destroy();
    const confDir = tempDir();
    dirs.push(confDir);
    const config = join(confDir.path, "replicas.yaml");
    writeFileSync(
      config,
      [
        "backend:",
        "  type: s3",
        `  endpoint: ${inner.url}`,
        "  region: us-east-1",
        `  accessKeyId: ${CREDENTIALS.accessKeyId}`,
        `  secretAccessKey: ${CREDENTIALS.secretAccessKey}`,
        "  forcePathStyle: true",
        "leaseStore:",
        "  type: redis",
        `  url: ${redis.url}`,
        "  epochs: { bucket: fencegate-system }",
        "  unsafeSettings: warn", // the private test Redis runs without a maxmemory
        "leases: { minTtlMs: 100 }",
        "",
      ].join("\n"),
    );
    for (let i = 0; i < 3; i++) {
      const dir = tempDir();
      dirs.push(dir);
      replicas.push(
        await spawnGateway(dir.path, {
          FENCEGATE_CONFIG: config,
          FENCEGATE_GATEWAY_ID: `replica-${i}`,
          FENCEGATE_TOKEN_SIGNING_KEY: "one-signing-key-for-every-replica",
        }),
      );
    }
  }, 120_000);

  afterAll(async () => {
    for (const r of replicas) {
      try {
        process.kill(r.child.pid!, "SIGCONT");
      } catch {}
      await r.kill("SIGKILL");
    }
    await inner?.stop();
    await redis?.stop();
    for (const d of dirs) d.cleanup();
  });

  it(
    `keeps every acknowledged increment and refuses every stale write for ${CHAOS_MS / 1000} s`,
    async () => {
      const clients = replicas.map((r) => ({
        leases: new LeaseClient({
          endpoint: r.url,
          ...CREDENTIALS,
          timeoutMs: 15_000,
          retry: { attempts: 1 },
        }),
        s3: s3Client(r.url, { requestHandler: { requestTimeout: 15_000 } }) as S3Client,
      }));
      const pick = () => clients[Math.floor(Math.random() * clients.length)]!;
      const stop = Date.now() + CHAOS_MS;
      let acked = 0;
      const grants: number[] = [];
      const accepted: Array<{ token: number; wrote: number }> = [];
      const decisions: Array<{ requestId: string; decision: "accepted" | "rejected" }> = [];
      let stale = 0;
      let pausedReplicas = 0;
      const refusedAcquires = new Map<string, number>();

      const chaos = (async () => {
        while (Date.now() < stop) {
          await sleep(500 + Math.random() * 1_500);
          const victim = replicas[Math.floor(Math.random() * replicas.length)]!;
          process.kill(victim.child.pid!, "SIGSTOP");
          pausedReplicas++;
          await sleep(TTL_MS + 200 + Math.random() * 1_500); // past the lease TTL
          process.kill(victim.child.pid!, "SIGCONT");
        }
      })();

      const worker = async (n: number) => {
        while (Date.now() < stop) {
          let lease: Awaited<ReturnType<LeaseClient["acquire"]>>;
          try {
            lease = await pick().leases.acquire({
              bucket: BUCKET,
              key: KEY,
              ttlMs: TTL_MS,
              waitMs: 2_000,
              owner: `w${n}`,
            });
          } catch {
            continue; // held, or a replica answered 503 while Redis was busy: try again
          }
          grants.push(lease.token);
          let value: number;
          try {
            const got = await pick().s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: KEY }));
            value = Number(await got.Body!.transformToString());
          } catch (e) {
            if (outcomeOfError(e).code !== "NoSuchKey") continue;
            value = 0;
          }
          // Now and then the client itself pauses past its lease (a GC pause).
          if (Math.random() < 0.15) await sleep(TTL_MS + 200 + Math.random() * 500);
          try {
            const put = await pick().s3.send(
              new PutObjectCommand({
                Bucket: BUCKET,
                Key: KEY,
                Body: String(value + 1),
                Metadata: { "fence-token": lease.fencingToken },
              }),
            );
            acked++;
            accepted.push({ token: lease.token, wrote: value + 1 });
            decisions.push({ requestId: put.$metadata.requestId!, decision: "accepted" });
          } catch (e) {
            const outcome = outcomeOfError(e);
            if (outcome.status === 409) stale++;
            const requestId = (e as { $metadata?: { requestId?: string } }).$metadata?.requestId;
            if (requestId && outcome.status !== 503) decisions.push({ requestId, decision: "rejected" });
          }
          await pick()
            .leases.release(lease.leaseId)
            .catch(() => undefined);
        }
      };
      await Promise.all([chaos, ...Array.from({ length: WORKERS }, (_, n) => worker(n))]);
      for (const r of replicas) process.kill(r.child.pid!, "SIGCONT");

      console.log(
        `chaos: ${grants.length} grants, ${acked} acknowledged increments, ${stale} stale writes refused, ${pausedReplicas} replica pauses, acquires refused: ${JSON.stringify(Object.fromEntries(refusedAcquires))}`,
      );
      // Every acknowledged increment is in the final value, nothing more.
      const final = await clients[0]!.s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: KEY }));
      expect(Number(await final.Body!.transformToString())).toBe(acked);
      expect(acked).toBeGreaterThanOrEqual(CHAOS_MS / 5_000);
      expect(pausedReplicas).toBeGreaterThanOrEqual(Math.floor(CHAOS_MS / 5_000));
      // Every grant its own token. Each accepted write stored one more than it read, so with no
      // increment lost the values written are 1..acked in commit order: accepted writes committed
      // in increasing token order. (The order in which clients got their answers is not the
      // commit order: a replica stopped between its commit and its answer delivers it late.)
      expect(new Set(grants).size).toBe(grants.length);
      accepted.sort((a, b) => a.wrote - b.wrote);
      expect(accepted.map((a) => a.wrote)).toEqual(Array.from({ length: acked }, (_, i) => i + 1));
      for (let i = 1; i < accepted.length; i++)
        expect(accepted[i]!.token).toBeGreaterThan(accepted[i - 1]!.token);
      // Every answered write decision, from whichever replica, is in the one audit log.
      const records = await allAuditRecords(clients[0]!.leases, { bucket: BUCKET, op: "PutObject" });
      const byRequest = new Map(records.map((r) => [r.requestId, r]));
      for (const d of decisions) expect(byRequest.get(d.requestId)?.decision, d.requestId).toBe(d.decision);
      expect(new Set(records.map((r) => r.gateway)).size).toBe(3);
      // Every grant a client received is on record too.
      const acquired = await allAuditRecords(clients[1]!.leases, { bucket: BUCKET, op: "LeaseAcquired" });
      const grantedTokens = new Set(acquired.filter((r) => r.decision === "accepted").map((r) => r.token));
      for (const token of grants) expect(grantedTokens.has(token), `grant ${token}`).toBe(true);
      // Each grant's record is appended by the grant itself, so the log's order is the grant
      // order: tokens rise along it.
      const grantOrder = acquired
        .filter((r) => r.decision === "accepted")
        .sort((a, b) => a.seq - b.seq)
        .map((r) => Number(r.token));
      expect(grantOrder.length).toBeGreaterThanOrEqual(grants.length);
      for (let i = 1; i < grantOrder.length; i++) expect(grantOrder[i]).toBeGreaterThan(grantOrder[i - 1]!);
      for (let i = 1; i < records.length; i++) expect(records[i]!.seq).toBeGreaterThan(records[i - 1]!.seq);
      for (const c of clients) c.s3.destroy();
    },
    CHAOS_MS + 120_000,
  );
});
