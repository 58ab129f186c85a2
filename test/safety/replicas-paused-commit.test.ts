/**
 * Rule 4 across replicas: three gateway replicas (each with its own Redis connections and its own
 * S3 backend) share one Redis lease store, one Redis audit log and one store (an S3 backend in
 * front of a second fencegate). A replica pauses exactly between its lease check (the commit
 * intent, FencedCommit.prepare) and its conditional write; meanwhile its lease expires, another
 * replica is granted the key (or a prefix over it), reads, increments and writes; then the paused
 * commit resumes. 1,000 randomized runs: no stale write lands, every acknowledged increment is in
 * the final value, every decision is in the one audit log.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AuditRecord } from "../../src/audit/audit-log.js";
import { createRedisAuditLog, openRedis, type RedisAuditLog } from "../../src/audit/redis/redis-audit-log.js";
import { createS3Backend, type S3Backend } from "../../src/backends/s3/index.js";
import type { FencedCommit } from "../../src/backends/storage-backend.js";
import { fakeClock } from "../../src/core/clock.js";
import { createSystemEpochStore } from "../../src/epochs/system-epoch-store.js";
import { makeKeyring, signFencingToken } from "../../src/fence/tokens.js";
import { WriteFencer } from "../../src/fence/write-fencer.js";
import { type LeaseInfo, LeaseService } from "../../src/leases/lease-service.js";
import { createRedisLeaseStore, type RedisLeaseStore } from "../../src/leases/redis/redis-lease-store.js";
import { backendOptions, startStore } from "../backends/s3/s3-fixture.js";
import { readAll, verifiedBody } from "../support/bodies.js";
import type { TestGateway } from "../support/gateway.js";
import { type RedisServer, startRedis } from "../support/redis.js";
import { requireTools } from "../support/tools.js";

requireTools("redis-server");

const BUCKET = "shared";
const SYSTEM = "fencegate-system";
const TTL = 5_000;
const RUNS = Number(process.env.REPLICA_RUNS ?? 1_000);
/** Independent deployments run side by side (own key prefix in Redis, own clock, own keys). */
const LANES = 4;

type Replica = {
  id: string;
  backend: S3Backend;
  store: RedisLeaseStore;
  audit: RedisAuditLog;
  leases: LeaseService;
  fencer: WriteFencer;
};

/** mulberry32, so that a failing run replays. */
function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe("replicas on one Redis: a commit paused between its lease check and its write", () => {
  let redis: RedisServer;
  let inner: TestGateway;
  const keyring = makeKeyring([{ id: "shared", secret: Buffer.alloc(32, 9) }]);
  const opened: Replica[] = [];

  beforeAll(async () => {
    redis = await startRedis();
    inner = await startStore();
    const setup = createS3Backend(backendOptions(inner.url));
    await setup.createBucket(BUCKET);
    for (let lane = 0; lane < LANES; lane++) await setup.createBucket(`${SYSTEM}-${lane}`);
    await setup.close();
  }, 60_000);

  afterAll(async () => {
    for (const r of opened) {
      await r.store.close();
      await r.audit.close();
      await r.backend.close();
    }
    await inner?.stop();
    await redis?.stop();
  });

  /** Three replicas of one deployment: their own connections and backends, one Redis prefix. */
  async function deployment(lane: number, clock: ReturnType<typeof fakeClock>): Promise<Replica[]> {
    const keyPrefix = `{lane${lane}}`;
    const replicas: Replica[] = [];
    for (let i = 0; i < 3; i++) {
      const id = `gw-${lane}-${i}`;
      const backend = createS3Backend(backendOptions(inner.url));
      const audit = await createRedisAuditLog({
        redis: openRedis(redis.url),
        ownsConnection: true,
        keyPrefix,
        gatewayId: id,
        clock,
      });
      const store = createRedisLeaseStore({
        url: redis.url,
        keyPrefix,
        epochs: createSystemEpochStore({ records: backend.systemRecords(`${SYSTEM}-${lane}`) }),
        clock,
        events: audit,
      });
      const replica: Replica = {
        id,
        backend,
        store,
        audit,
        leases: new LeaseService({
          store,
          audit,
          clock,
          limits: { minTtlMs: 1, maxTtlMs: 3_600_000, maxWaitMs: 0 },
          fenceObject: (bucket, key, token) => backend.raiseHighestToken(bucket, key, token),
        }),
        fencer: new WriteFencer({
          leases: store,
          audit,
          keyring,
          clock,
          policyFor: () => "required",
          writeState: (bucket, key) => backend.writeState(bucket, key),
          highestToken: (bucket, key) => backend.highestToken(bucket, key),
          domainOf: () => undefined, // a remote store: rule 4 goes through commit intents
        }),
      };
      opened.push(replica);
      if (!(await store.ready(5_000))) throw new Error("Redis not reachable");
      replicas.push(replica);
    }
    return replicas;
  }
  const tokenOf = (lease: LeaseInfo) =>
    signFencingToken(
      {
        leaseId: lease.leaseId,
        token: lease.token,
        bucket: lease.bucket,
        key: lease.key,
        prefix: lease.prefix,
      },
      keyring.active,
    );

  async function read(r: Replica, key: string): Promise<number> {
    try {
      return Number((await readAll((await r.backend.getObject(BUCKET, key)).body)).toString());
    } catch (e) {
      if ((e as { code?: string }).code === "NoSuchKey") return 0;
      throw e;
    }
  }

  /** A PutObject through replica r's fencer; `between` runs after the lease check, before the conditional write. */
  function write(r: Replica, key: string, lease: LeaseInfo, value: number, between?: () => Promise<void>) {
    return r.fencer
      .write(
        {
          op: "PutObject",
          bucket: BUCKET,
          key,
          tokenString: tokenOf(lease),
          principal: r.id,
          requestId: `${r.id}-${value}`,
        },
        (commit) => {
          const paused: FencedCommit = {
            ...commit,
            prepare: async () => {
              await commit.prepare();
              await between?.();
            },
          };
          return r.backend.putObject(
            {
              bucket: BUCKET,
              key,
              body: verifiedBody(String(value)),
              metadata: { headers: {}, userMetadata: {} },
            },
            paused,
          );
        },
      )
      .then(
        () => "accepted",
        (e: { code?: string }) => e.code ?? String(e),
      );
  }

  const acquire = (r: Replica, resource: { key: string } | { prefix: string }, owner: string) =>
    r.leases.acquire(
      { resource: { bucket: BUCKET, ...resource } as never, ttlMs: TTL, waitMs: 0, owner },
      { principal: owner, requestId: null },
    );

  async function lane(n: number, runs: number): Promise<Map<string, number>> {
    const clock = fakeClock();
    const replicas = await deployment(n, clock);
    const random = seeded(8_2026 + n);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
    const acked = new Map<string, number>();
    const outcomes = new Map<string, number>();
    const count = (what: string) => outcomes.set(what, (outcomes.get(what) ?? 0) + 1);
    const keys = [`l${n}/c/0`, `l${n}/c/1`, `l${n}/c/2`];

    for (let run = 0; run < runs; run++) {
      const key = pick(keys);
      const [a, b] = [...replicas].sort(() => random() - 0.5) as [Replica, Replica];
      const first = await acquire(a, { key }, `A${run}`);
      const seen = await read(a, key);
      // Most runs: the lease ends while A is paused and B takes over. Some: A resumes in time.
      const takeover = random() < 0.85;
      const overPrefix = random() < 0.3;
      // Either B completes its read-modify-write while A is paused, or A resumes right after B's
      // read, before B's write (the case only the commit intent's fence catches).
      const bWritesFirst = random() < 0.5;
      let second: LeaseInfo | undefined;
      let bRead = 0;
      let bOutcome: string | undefined;
      const bWrite = async () => {
        bOutcome = await write(b, key, second!, bRead + 1);
        if (bOutcome === "accepted") acked.set(key, (acked.get(key) ?? 0) + 1);
      };
      const aOutcome = await write(a, key, first, seen + 1, async () => {
        if (!takeover) return;
        clock.advance(TTL + 1);
        second = await acquire(b, overPrefix ? { prefix: `l${n}/c/` } : { key }, `B${run}`);
        bRead = await read(b, key);
        if (bWritesFirst) await bWrite();
      });
      if (takeover && !bWritesFirst) await bWrite();
      if (aOutcome === "accepted") acked.set(key, (acked.get(key) ?? 0) + 1);
      count(`A ${takeover ? (bWritesFirst ? "after B wrote" : "after B read") : "in time"}: ${aOutcome}`);
      if (bOutcome) count(`B: ${bOutcome}`);
      if (takeover) {
        // The stale commit never lands, and B's increment was not lost under it.
        expect(aOutcome, `run ${run}`).not.toBe("accepted");
        expect(bOutcome, `run ${run}`).toBe("accepted");
        expect(bRead, `run ${run}`).toBe(seen);
        expect(await read(b, key), `run ${run}`).toBe(seen + 1);
      } else {
        expect(aOutcome, `run ${run}`).toBe("accepted");
      }
      await b.leases
        .release((second ?? first).leaseId, { principal: null, requestId: null })
        .catch(() => undefined);
      if (second)
        await a.leases.release(first.leaseId, { principal: null, requestId: null }).catch(() => undefined);
      clock.advance(1);
    }

    // Every acknowledged increment is in the final values.
    for (const key of keys) expect(await read(replicas[0]!, key), key).toBe(acked.get(key) ?? 0);
    // Both orders happened often, and each paused commit was refused as superseded.
    expect(outcomes.get("A after B wrote: StaleFencingToken") ?? 0).toBeGreaterThanOrEqual(
      Math.floor(runs / 8),
    );
    expect(outcomes.get("A after B read: StaleFencingToken") ?? 0).toBeGreaterThanOrEqual(
      Math.floor(runs / 8),
    );

    // Every write decision of every replica is in the one audit log, in one order.
    const records: AuditRecord[] = [];
    for (let cursor: string | undefined; ; ) {
      const page = await replicas[2]!.audit.query({
        op: "PutObject",
        limit: 1000,
        ...(cursor ? { cursor } : {}),
      });
      records.push(...page.records);
      if (!page.nextCursor) break;
      cursor = page.nextCursor;
    }
    const accepted = records.filter((r) => r.decision === "accepted").length;
    const totalAcked = [...acked.values()].reduce((a, b) => a + b, 0);
    expect(accepted).toBe(totalAcked);
    const writes = [...outcomes.entries()].reduce((n, [, c]) => n + c, 0);
    expect(records).toHaveLength(writes);
    expect(new Set(records.map((r) => r.gateway))).toEqual(new Set(replicas.map((r) => r.id)));
    for (let i = 1; i < records.length; i++) expect(records[i]!.seq).toBeGreaterThan(records[i - 1]!.seq);
    return outcomes;
  }

  it(`${RUNS} randomized runs: no stale write lands, every acknowledged increment survives`, async () => {
    const per = Math.ceil(RUNS / LANES);
    const results = await Promise.all(Array.from({ length: LANES }, (_, n) => lane(n, per)));
    const total = new Map<string, number>();
    for (const outcomes of results) for (const [k, v] of outcomes) total.set(k, (total.get(k) ?? 0) + v);
    expect([...total.values()].reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(RUNS);
  }, 900_000);
});
