/**
 * Commit intents on a Redlock quorum of three real redis-servers, through losses of data one
 * instance at a time. A fenced write recorded its intent on the instances and froze before its
 * conditional write; then instances restart empty one after the other. Each is repaired (its
 * token floor installed) and must get the live intents back before it counts again, so that a
 * majority made only of repaired instances still answers `fence` for the frozen write's object.
 * And a single instance answering `fence` is enough to stop a grant: an intent it holds is never
 * outvoted by instances that do not hold it.
 *
 * The store's clock is a fake one: quarantines and TTLs pass by moving it, not by sleeping.
 */
import { afterEach, describe, expect, it } from "vitest";
import { createEmbeddedAuditLog } from "../../../src/audit/embedded/embedded-audit-log.js";
import type { FencedCommit } from "../../../src/backends/storage-backend.js";
import { fakeClock } from "../../../src/core/clock.js";
import { DomainError } from "../../../src/core/errors.js";
import { makeKeyring, signFencingToken } from "../../../src/fence/tokens.js";
import { WriteFencer } from "../../../src/fence/write-fencer.js";
import { type LeaseInfo, LeaseService } from "../../../src/leases/lease-service.js";
import type {
  AcquireResult,
  CommitIntentRef,
  LeaseEvents,
  LeaseRecord,
} from "../../../src/leases/lease-store.js";
import { createFileEpochStore } from "../../../src/leases/redis-shared/file-epoch-store.js";
import {
  createRedlockLeaseStore,
  type RedlockLeaseStore,
} from "../../../src/leases/redlock/redlock-lease-store.js";
import { fsFixture } from "../../backends/fs/fs-fixture.js";
import { readAll, verifiedBody } from "../../support/bodies.js";
import { type RedisServer, startRedis } from "../../support/redis.js";
import { tempDir } from "../../support/temp.js";
import { requireTools } from "../../support/tools.js";
import { waitFor } from "../../support/wait.js";

requireTools("redis-server");

const TTL_MS = 1_000;
/** The longest TTL: a repaired instance stays out of the quorum at least this long. */
const QUARANTINE_MS = 2_000;
const BUCKET = "bkt";
const KEY = "k";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

type Quorum = {
  redis: RedisServer[];
  clock: ReturnType<typeof fakeClock>;
  store: RedlockLeaseStore;
  prefix: string;
  /** Restarts instance i empty (a new run id, no data) and waits until the store has repaired it. */
  lose(i: number): Promise<void>;
  /** Moves the clock past instance i's quarantine and waits until it counts toward a majority again. */
  rejoin(i: number): Promise<void>;
  /** Whether instance i counts toward a majority now. */
  counts(i: number): boolean;
  holds(i: number, intentId: string): Promise<boolean>;
  /** Stops instance i (SIGSTOP): it answers nothing until resume(i). */
  silence(i: number): void;
  resume(i: number): void;
  cutOff(i: number): Promise<void>;
  reconnect(i: number): Promise<void>;
};

async function quorum(opts: { commandTimeoutMs?: number; events?: LeaseEvents } = {}): Promise<Quorum> {
  const redis = await Promise.all([startRedis(), startRedis(), startRedis()]);
  // restart() hands the directory to the new handle: stop whatever runs at the end.
  cleanups.push(() => Promise.all(redis.map((r) => r.stop().catch(() => undefined))).then(() => undefined));
  const stopped = new Set<number>();
  cleanups.push(() => {
    for (const pid of stopped) process.kill(pid, "SIGCONT");
  });
  const epochs = tempDir("fencegate-redlock-ir-");
  cleanups.push(() => epochs.cleanup());
  const clock = fakeClock();
  // Glob characters in the prefix: the repair finds the intents by pattern, and must match them literally.
  const prefix = "{ir*[?]\\}";
  const store = createRedlockLeaseStore({
    urls: redis.map((r) => r.url),
    keyPrefix: prefix,
    epochs: createFileEpochStore(epochs.path),
    clock,
    quarantineMs: QUARANTINE_MS,
    commandTimeoutMs: opts.commandTimeoutMs ?? 1_000,
    // The fake clock does not move while a grant runs.
    driftAllowanceMs: 0,
    ...(opts.events ? { events: opts.events } : {}),
  });
  cleanups.push(() => store.close());
  if (!(await store.ready(10_000))) throw new Error("no majority of the three redis-servers");

  const counts = (i: number) => {
    const inst = store.instances()[i]!;
    return inst.connected && inst.unsafe === null && inst.quarantinedUntil <= clock() && !inst.intentsPending;
  };
  const settleFloors = () => store.checkFloors().catch(() => undefined);
  return {
    redis,
    clock,
    store,
    prefix,
    counts,
    async lose(i) {
      redis[i] = await redis[i]!.restart();
      await waitFor(
        async () => {
          await settleFloors();
          return store.instances()[i]!.quarantinedUntil > clock();
        },
        { what: `the repair of instance ${i}`, timeoutMs: 15_000 },
      );
    },
    async rejoin(i) {
      clock.advance(QUARANTINE_MS);
      await waitFor(
        async () => {
          await settleFloors();
          return counts(i);
        },
        { what: `instance ${i} to count again`, timeoutMs: 15_000 },
      );
    },
    async holds(i, intentId) {
      return (await redis[i]!.command("EXISTS", `${prefix}:intent:${intentId}`)) === 1;
    },
    silence(i) {
      process.kill(redis[i]!.pid, "SIGSTOP");
      stopped.add(redis[i]!.pid);
    },
    resume(i) {
      process.kill(redis[i]!.pid, "SIGCONT");
      stopped.delete(redis[i]!.pid);
    },
    async cutOff(i) {
      expect(await redis[i]!.command("ACL", "SETUSER", "default", "-evalsha", "-eval")).toBe("OK");
    },
    async reconnect(i) {
      expect(await redis[i]!.command("ACL", "SETUSER", "default", "+evalsha", "+eval")).toBe("OK");
    },
  };
}

async function grant(q: Quorum, owner = "holder"): Promise<LeaseRecord> {
  const r = await q.store.tryAcquire({ resource: { bucket: BUCKET, key: KEY }, ttlMs: TTL_MS, owner });
  if (!r.granted) throw new Error(`not granted: ${JSON.stringify(r)}`);
  return r.lease;
}

/** A fenced write's intent on the object, recorded as the write path records it before its commit. */
async function freezeCommit(q: Quorum, lease: LeaseRecord): Promise<CommitIntentRef> {
  const { intentId } = await q.store.beginCommit({
    kind: "fenced",
    leaseId: lease.leaseId,
    token: lease.token,
    bucket: BUCKET,
    key: KEY,
  });
  return { intentId, bucket: BUCKET, key: KEY };
}

function expectFence(result: AcquireResult, intent: CommitIntentRef, above: number): number {
  if (result.granted || !("fence" in result)) {
    throw new Error(`expected a fence naming the frozen commit: ${JSON.stringify(result)}`);
  }
  expect(result.fence.intents).toEqual([intent]);
  expect(result.fence.token).toBeGreaterThan(above);
  return result.fence.token;
}

const attempt = (q: Quorum, owner = "next") =>
  q.store.tryAcquire({ resource: { bucket: BUCKET, key: KEY }, ttlMs: TTL_MS, owner });

describe("a frozen commit's intent through two one-at-a-time losses of data", () => {
  for (const third of ["answers", "is down"] as const) {
    it(`is still fenced by a majority of repaired instances when the third ${third}`, async () => {
      const q = await quorum();
      const lease = await grant(q);
      const intent = await freezeCommit(q, lease);
      // The write freezes between its intent and its conditional write; its lease expires.
      q.clock.advance(TTL_MS);

      // r1 restarts empty, is repaired, and after its quarantine counts again; then r2 does the same.
      await q.lose(0);
      await q.rejoin(0);
      await q.lose(1);
      await q.rejoin(1);
      expect([q.counts(0), q.counts(1), q.counts(2)]).toEqual([true, true, true]);

      // r1 and r2 remember no lease from before their loss; each got the intent back.
      if (third === "is down") await q.redis[2]!.kill9();
      const fenceToken = expectFence(await attempt(q), intent, lease.token);
      expect([await q.holds(0, intent.intentId), await q.holds(1, intent.intentId)]).toEqual([true, true]);

      // Once the object is fenced and the intent cleared, the grant goes through above the fence.
      await q.store.clearIntents([intent.intentId]);
      const next = await attempt(q);
      if (!next.granted) throw new Error(`not granted after the fence: ${JSON.stringify(next)}`);
      expect(next.lease.token).toBeGreaterThan(fenceToken);
    });
  }
});

describe("an instance whose intents could not be restored", () => {
  it("stays out of the quorum until they are, then fences the frozen commit with its restored copy", async () => {
    const q = await quorum({ commandTimeoutMs: 500 });
    const lease = await grant(q);
    // r2 misses the intent: it lives on r1 and r3 only.
    await q.cutOff(1);
    const intent = await freezeCommit(q, lease);
    await q.reconnect(1);
    expect([await q.holds(0, intent.intentId), await q.holds(1, intent.intentId)]).toEqual([true, false]);
    q.clock.advance(TTL_MS);

    // r3 stops answering; r1 restarts empty. Only r2 can tell it what intents are live, and r2
    // never had this one.
    q.silence(2);
    await q.lose(0);
    q.clock.advance(QUARANTINE_MS);
    await q.store.checkFloors().catch(() => undefined);

    // r1 and r2 would make a majority that knows nothing of the frozen commit: no grant.
    const refused = await attempt(q).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(DomainError);
    expect((refused as DomainError).code).toBe("LeaseStoreUnavailable");
    expect((refused as DomainError).message).toMatch(/commit intents/);
    expect(q.counts(0)).toBe(false);
    expect(q.store.instances()[0]!.intentsPending).toBe(true);

    // r3 answers again: r1's intents are restored from r2 and r3, and r1 counts again.
    q.resume(2);
    await q.rejoin(0);
    expect(await q.holds(0, intent.intentId)).toBe(true);

    // Even with r3 silent again, r1 and r2 fence the frozen commit's object.
    q.silence(2);
    expectFence(await attempt(q), intent, lease.token);
  });
});

describe("one instance answering fence", () => {
  it("stops a grant that the two others would give: an intent left behind is fenced, never outvoted", async () => {
    const q = await quorum();
    const lease = await grant(q);
    const intent = await freezeCommit(q, lease);
    // The commit ends, but its endCommit reaches r1 and r2 only: r3 keeps the intent.
    await q.cutOff(2);
    await q.store.endCommit(intent.intentId);
    await q.reconnect(2);
    expect(await Promise.all([0, 1, 2].map((i) => q.holds(i, intent.intentId)))).toEqual([
      false,
      false,
      true,
    ]);
    q.clock.advance(TTL_MS);

    // r1 and r2 grant, r3 answers fence: the answer is a fence.
    const first = expectFence(await attempt(q), intent, lease.token);
    // Nothing was granted anywhere.
    expect(await q.store.list({ bucket: BUCKET })).toEqual([]);

    // The fence's clearIntents reaches r1 and r2 only: r3 still fences the next attempt.
    await q.cutOff(2);
    await q.store.clearIntents([intent.intentId]);
    await q.reconnect(2);
    const second = expectFence(await attempt(q), intent, first);

    await q.store.clearIntents([intent.intentId]);
    const next = await attempt(q);
    if (!next.granted) throw new Error(`not granted after the fence: ${JSON.stringify(next)}`);
    expect(next.lease.token).toBeGreaterThan(second);
  });
});

describe("through the lease service, with a real backend object", () => {
  it("refuses the frozen write after the new holder was granted and read the object", async () => {
    const audit = createEmbeddedAuditLog({ gatewayId: "gw" });
    cleanups.push(() => audit.close());
    const q = await quorum({ events: audit });
    const fs = await fsFixture({ clock: q.clock });
    cleanups.push(() => fs.cleanup());
    const { backend } = fs;
    await backend.createBucket(BUCKET);
    const keyring = makeKeyring([{ id: "k1", secret: Buffer.alloc(32, 7) }]);
    const leases = new LeaseService({
      store: q.store,
      audit,
      clock: q.clock,
      limits: { minTtlMs: 1, maxTtlMs: QUARANTINE_MS, maxWaitMs: 0 },
      fenceObject: (bucket, key, token) => backend.raiseHighestToken(bucket, key, token),
    });
    const fencer = new WriteFencer({
      leases: q.store,
      audit,
      keyring,
      clock: q.clock,
      policyFor: () => "required",
      writeState: (bucket, key) => backend.writeState(bucket, key),
      highestToken: (bucket, key) => backend.highestToken(bucket, key),
      domainOf: () => backend.domain,
    });
    const acquire = (owner: string) =>
      leases.acquire(
        { resource: { bucket: BUCKET, key: KEY }, ttlMs: TTL_MS, waitMs: 0, owner },
        { principal: owner, requestId: null },
      );
    const tokenOf = (lease: LeaseInfo) =>
      signFencingToken(
        { leaseId: lease.leaseId, token: lease.token, bucket: BUCKET, key: KEY },
        keyring.active,
      );
    const put = (data: string, lease: LeaseInfo, between?: () => Promise<void>) =>
      fencer.write(
        {
          op: "PutObject",
          bucket: BUCKET,
          key: KEY,
          tokenString: tokenOf(lease),
          principal: "p",
          requestId: "r",
        },
        (commit) => {
          const frozen: FencedCommit = {
            ...commit,
            prepare: async () => {
              await commit.prepare();
              await between?.();
            },
          };
          return backend.putObject(
            {
              bucket: BUCKET,
              key: KEY,
              body: verifiedBody(data),
              metadata: { headers: {}, userMetadata: {} },
            },
            frozen,
          );
        },
      );
    const content = async () => (await readAll((await backend.getObject(BUCKET, KEY)).body)).toString();

    const a = await acquire("A");
    await put("A's first", a);
    let b: LeaseInfo | undefined;
    let seenByB = "";
    const frozen = put("A, frozen", a, async () => {
      // Frozen after its intent was recorded, for longer than two quarantines.
      q.clock.advance(TTL_MS);
      await q.lose(0);
      await q.rejoin(0);
      await q.lose(1);
      await q.rejoin(1);
      await q.redis[2]!.kill9();
      b = await acquire("B");
      seenByB = await content();
    }).then(
      () => "accepted",
      (e: { code?: string }) => e.code ?? String(e),
    );
    expect(await frozen).toBe("StaleFencingToken");
    expect(b!.token).toBeGreaterThan(a.token);
    expect(seenByB).toBe("A's first");
    expect(await content()).toBe("A's first");
    expect(await backend.highestToken(BUCKET, KEY)).toBeGreaterThan(a.token);
    expect(await backend.highestToken(BUCKET, KEY)).toBeLessThan(b!.token);

    // B's own write goes through.
    await put("B's write", b!);
    expect(await content()).toBe("B's write");
  });
});
