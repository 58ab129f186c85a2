// Safety scenario 4, for any backend: kill -9 of the gateway under load, restart on the same
// data directory, several times. Tokens never go backwards, acknowledged writes survive in full,
// nothing half-written ever becomes visible, HCTs survive, the audit log holds every acknowledged
// decision, and (remote stores) the collector leaves nothing unreferenced behind.
import { randomBytes, randomInt } from "node:crypto";
import { Readable } from "node:stream";
import {
  CreateBucketCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  type S3Client,
} from "@aws-sdk/client-s3";
import { afterAll, describe, expect, it } from "vitest";
import { type Lease, LeaseApiError, LeaseClient } from "../../src/client/lease-client.js";
import { md5Hex } from "../support/digest.js";
import { CREDENTIALS, type GatewayProcess, s3Client, spawnGateway, tempDir } from "../support/gateway.js";
import { type AuditRecord, allAuditRecords, outcomeOfError, quietLogger } from "../support/safety-helpers.js";
import { sleep } from "../support/wait.js";

/** Where the gateway processes keep their objects: the fs backend (none given) or a remote store. */
export type CrashStore = {
  /** Environment of every gateway process (the backend and its store). */
  env: Record<string, string>;
  /** Runs the store's collector (the gateway idle) and returns what is left unreferenced. */
  leftovers?: () => Promise<string[]>;
  stop(): Promise<void>;
};

const BUCKET = "crash";
const WRITERS = 6;
const LARGE = 256 * 1024;

type Write = {
  key: string;
  index: number;
  token: number;
  leaseId: string;
  md5: string;
  size: number;
  /** acked: 200 received; unknown: in flight when the gateway died; failed: an HTTP error. */
  state: "acked" | "unknown" | "failed";
  requestId?: string;
  cycle: number;
};

/** True for errors that mean "no HTTP answer" (the gateway is gone), not an HTTP error status. */
function isConnectionError(err: unknown): boolean {
  if (err instanceof LeaseApiError) return false;
  const e = err as { $metadata?: { httpStatusCode?: number } };
  return e.$metadata?.httpStatusCode === undefined;
}

export function describeCrashRestart(
  name: string,
  opts: { cycles: number; store?: () => Promise<CrashStore> },
) {
  describe(`kill -9 of the gateway under load (${name}), restarted on the same data directory`, () => {
    const dir = tempDir("fencegate-safety-crash-");
    let gateway: GatewayProcess | undefined;
    let store: CrashStore | undefined;
    const clients: S3Client[] = [];
    const CYCLES = opts.cycles;
    const spawn = () => spawnGateway(dir.path, store?.env ?? {});

    afterAll(async () => {
      for (const c of clients) c.destroy();
      await gateway?.kill("SIGKILL");
      await store?.stop();
      dir.cleanup();
    });

    it("keeps tokens, acknowledged writes, HCTs and the audit log across repeated crashes", {
      timeout: 180_000,
    }, async () => {
      store = opts.store ? await opts.store() : undefined;
      const keys = Array.from({ length: WRITERS }, (_, w) => `writer-${w}`);
      const history = new Map<string, Write[]>(keys.map((k) => [k, []]));
      /** Index (in history) of the write each key is known to hold; -1 for none. */
      const current = new Map<string, number>(keys.map((k) => [k, -1]));
      const ackedLeases: Lease[] = [];
      /** Per lease granted to a writer: holding (no release sent), releasing (no answer), released. */
      const leaseState = new Map<string, "holding" | "releasing" | "released">();
      const httpErrors: string[] = [];
      let maxTokenSeen = 0;
      const seenToken = (t: number) => {
        maxTokenSeen = Math.max(maxTokenSeen, t);
      };

      gateway = await spawn();
      let leases = new LeaseClient({ endpoint: gateway.url, ...CREDENTIALS });
      let s3 = s3Client(gateway.url);
      clients.push(s3);
      await s3.send(new CreateBucketCommand({ Bucket: BUCKET }));
      // A first lease per key, never used to write: its token is below every write's token and
      // serves as the stale token of the HCT probes.
      const baseLeases = new Map<string, Lease>();
      for (const key of keys) {
        const lease = await leases.acquire({ bucket: BUCKET, key, ttlMs: 500, owner: "base" });
        seenToken(lease.token);
        await leases.release(lease.leaseId);
        baseLeases.set(key, lease);
      }

      for (let cycle = 0; cycle < CYCLES; cycle++) {
        // Load: each writer acquires a lease on its key, writes once with it, releases, repeats.
        const writerClients = keys.map(() => s3Client(gateway!.url, { logger: quietLogger }));
        clients.push(...writerClients);
        let loadFlowing!: () => void;
        const firstAck = new Promise<void>((r) => {
          loadFlowing = r;
        });
        const writer = async (key: string, client: S3Client, leaseClient: LeaseClient) => {
          const writes = history.get(key)!;
          for (;;) {
            let lease: Lease;
            try {
              lease = await leaseClient.acquire({ bucket: BUCKET, key, ttlMs: 30_000, owner: key });
            } catch (err) {
              if (isConnectionError(err)) return;
              httpErrors.push(`acquire ${key}: ${(err as Error).message}`);
              return;
            }
            seenToken(lease.token);
            ackedLeases.push(lease);
            leaseState.set(lease.leaseId, "holding");
            const index = writes.length;
            const large = randomInt(3) === 0;
            const head = Buffer.from(`${key} write ${index} token ${lease.token} cycle ${cycle}\n`);
            const body = large ? Buffer.concat([head, randomBytes(LARGE)]) : head;
            const write: Write = {
              key,
              index,
              token: lease.token,
              leaseId: lease.leaseId,
              md5: md5Hex(body),
              size: body.length,
              state: "unknown",
              cycle,
            };
            writes.push(write);
            // Large bodies are streamed (aws-chunked from the SDK) in 16 KiB pieces.
            const streamed = large && index % 2 === 0;
            const Body = streamed
              ? Readable.from(
                  Array.from({ length: Math.ceil(body.length / 16384) }, (_, i) =>
                    body.subarray(i * 16384, (i + 1) * 16384),
                  ),
                )
              : body;
            try {
              const out = await client.send(
                new PutObjectCommand({
                  Bucket: BUCKET,
                  Key: key,
                  Body,
                  ContentLength: body.length,
                  Metadata: { "fence-token": lease.fencingToken },
                }),
              );
              write.state = "acked";
              loadFlowing();
              write.requestId = out.$metadata.requestId;
              if (out.ETag !== `"${write.md5}"`) httpErrors.push(`${key} #${index}: ETag ${out.ETag}`);
            } catch (err) {
              if (isConnectionError(err)) return;
              write.state = "failed";
              httpErrors.push(`put ${key} #${index}: ${JSON.stringify(outcomeOfError(err))}`);
              return;
            }
            try {
              leaseState.set(lease.leaseId, "releasing");
              await leaseClient.release(lease.leaseId);
              leaseState.set(lease.leaseId, "released");
            } catch (err) {
              if (isConnectionError(err)) return;
              httpErrors.push(`release ${key}: ${(err as Error).message}`);
              return;
            }
          }
        };
        const loops = keys.map((key, w) =>
          writer(key, writerClients[w]!, new LeaseClient({ endpoint: gateway!.url, ...CREDENTIALS })),
        );
        // The kill lands at a random moment 50-400 ms into the load (counted from the first
        // acknowledged write, so that a slow start on a busy machine does not leave nothing to crash).
        await withTimeout(Promise.race([firstAck, Promise.all(loops)]), 20_000, "no write was acknowledged");
        await sleep(randomInt(50, 401));
        await gateway.kill("SIGKILL");
        await withTimeout(Promise.all(loops), 20_000, "writers did not stop after the kill");
        for (const c of writerClients) c.destroy();
        expect(httpErrors).toEqual([]);

        // Restart on the same data directory (a new port).
        gateway = await spawn();
        leases = new LeaseClient({ endpoint: gateway.url, ...CREDENTIALS });
        s3 = s3Client(gateway.url);
        clients.push(s3);

        // 1. The next token is above every token any client ever saw.
        const next = await leases.acquire({ bucket: BUCKET, key: `probe-${cycle}`, ttlMs: 500 });
        expect(next.token, `token after restart ${cycle}`).toBeGreaterThan(maxTokenSeen);
        seenToken(next.token);
        await leases.release(next.leaseId);
        // Leases survived the crash: those the writers held (no release sent) are still active,
        // released ones are not. Then hand the held ones back.
        const active = new Set((await leases.list({ bucket: BUCKET })).leases.map((l) => l.leaseId));
        for (const [leaseId, state] of leaseState) {
          if (state === "holding") expect(active.has(leaseId), `held lease ${leaseId} lost`).toBe(true);
          if (state === "released")
            expect(active.has(leaseId), `released lease ${leaseId} active`).toBe(false);
        }
        for (const leaseId of active) await leases.release(leaseId);
        leaseState.clear();

        // 2. Every key holds exactly its last acknowledged write, or a later one that was in flight.
        for (const key of keys) {
          const writes = history.get(key)!;
          const lastAcked = writes.findLastIndex((w) => w.state === "acked");
          const floor = Math.max(lastAcked, current.get(key)!);
          const candidates = writes.slice(Math.max(floor, 0)).filter((w) => w.state !== "failed");
          const got = await getObject(s3, key);
          if (got === null) {
            expect(floor, `${key} vanished after restart ${cycle}`).toBe(-1);
            continue;
          }
          const match = candidates.find((w) => w.md5 === got.md5 && w.size === got.size);
          expect(
            match,
            `${key} after restart ${cycle}: ${got.size} bytes, md5 ${got.md5}; last acked #${lastAcked}`,
          ).toBeDefined();
          expect(got.etag).toBe(`"${got.md5}"`);
          const head = await s3.send(new HeadObjectCommand({ Bucket: BUCKET, Key: key }));
          expect(head.ContentLength).toBe(match!.size);
          expect(head.ETag).toBe(`"${match!.md5}"`);
          current.set(key, match!.index);

          // 3. The HCT survived: a write with a lower token is refused, naming an HCT at least as
          // high as the token of the write the key holds.
          const lease = await leases.acquire({ bucket: BUCKET, key, ttlMs: 10_000, owner: "probe" });
          seenToken(lease.token);
          const probe = await s3
            .send(
              new PutObjectCommand({
                Bucket: BUCKET,
                Key: key,
                Body: "stale probe",
                Metadata: { "fence-token": baseLeases.get(key)!.fencingToken },
              }),
            )
            .then(
              () => null,
              (err: unknown) => outcomeOfError(err),
            );
          expect(probe, `stale probe on ${key} was accepted`).not.toBeNull();
          expect(probe!.status).toBe(409);
          expect(probe!.code).toBe("StaleFencingToken");
          expect(probe!.highestToken, `x-fence-highest-token of the probe on ${key}`).not.toBeNull();
          expect(probe!.highestToken).toBeGreaterThanOrEqual(match!.token);
          await leases.release(lease.leaseId);
        }

        // 4. The audit log: unique, increasing seqs; an accepted record for every acknowledged
        // write and lease grant; per key, accepted tokens only ever increase and none is newer
        // than the write the key holds.
        const all = await allAuditRecords(leases, {});
        for (let i = 1; i < all.length; i++) expect(all[i]!.seq).toBeGreaterThan(all[i - 1]!.seq);
        const byRequest = new Map<string, AuditRecord>();
        for (const r of all) if (r.requestId && r.op === "PutObject") byRequest.set(r.requestId, r);
        for (const w of [...history.values()].flat().filter((x) => x.state === "acked")) {
          expect(
            byRequest.get(w.requestId!),
            `audit record of acknowledged write ${w.key} #${w.index}`,
          ).toMatchObject({ decision: "accepted", bucket: BUCKET, key: w.key, token: w.token });
        }
        const grants = new Set(
          all.filter((r) => r.op === "LeaseAcquired" && r.decision === "accepted").map((r) => r.leaseId),
        );
        for (const l of ackedLeases)
          expect(grants.has(l.leaseId), `LeaseAcquired of ${l.leaseId}`).toBe(true);
        for (const key of keys) {
          const accepted = all.filter(
            (r) => r.key === key && r.op === "PutObject" && r.decision === "accepted",
          );
          for (let i = 1; i < accepted.length; i++) {
            expect(accepted[i]!.token!).toBeGreaterThan(accepted[i - 1]!.token!);
          }
          const held = history.get(key)![current.get(key)!];
          if (accepted.length > 0) expect(held, `${key} has accepted writes but no object`).toBeDefined();
          if (held) expect(accepted[accepted.length - 1]?.token ?? 0).toBeLessThanOrEqual(held.token);
        }
      }

      // Every cycle acknowledged writes before its kill (the kill waits for the first one).
      for (let cycle = 0; cycle < CYCLES; cycle++) {
        const acked = [...history.values()].flat().filter((w) => w.cycle === cycle && w.state === "acked");
        expect(acked.length, `acknowledged writes in cycle ${cycle}`).toBeGreaterThan(0);
      }

      // Last, a kill -9 while idle, every lease released: the token counter must not depend on
      // leases that are still live, and nothing changes for the objects.
      await gateway.kill("SIGKILL");
      gateway = await spawn();
      leases = new LeaseClient({ endpoint: gateway.url, ...CREDENTIALS });
      s3 = s3Client(gateway.url);
      clients.push(s3);
      const idle = await leases.acquire({ bucket: BUCKET, key: "probe-idle", ttlMs: 500 });
      expect(idle.token, "token after an idle restart").toBeGreaterThan(maxTokenSeen);
      for (const key of keys) {
        const held = history.get(key)![current.get(key)!];
        const got = await getObject(s3, key);
        expect(got && { md5: got.md5, size: got.size }).toEqual(
          held ? { md5: held.md5, size: held.size } : null,
        );
      }

      // The gateway is idle: what the crashes left in the store (blobs of commits that never
      // happened, replaced blobs not yet deleted, open uploads) goes to the collector, and after it
      // nothing unreferenced is left.
      if (store?.leftovers) expect(await store.leftovers()).toEqual([]);
    });
  });
}

async function getObject(
  s3: S3Client,
  key: string,
): Promise<{ md5: string; size: number; etag: string | undefined } | null> {
  try {
    const got = await s3.send(new GetObjectCommand({ Bucket: BUCKET, Key: key }));
    const bytes = await got.Body!.transformToByteArray();
    return { md5: md5Hex(bytes), size: bytes.length, etag: got.ETag };
  } catch (err) {
    if (outcomeOfError(err).status === 404) return null;
    throw err;
  }
}

function withTimeout<T>(p: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(message)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
