/**
 * Commit intents (rule 4) on a Redlock quorum of three: an intent recorded by a bare majority
 * stops a grant that a different majority would give (the two majorities share an instance, which
 * answers `fence`); an intent that only a minority could record refuses the commit (503) and is
 * removed where it was recorded. Instances are cut off by an ACL that refuses every script (no
 * script runs there, nothing is queued for later).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fakeClock } from "../../../src/core/clock.js";
import { DomainError } from "../../../src/core/errors.js";
import { createFileEpochStore } from "../../../src/leases/redis-shared/file-epoch-store.js";
import {
  createRedlockLeaseStore,
  type RedlockLeaseStore,
} from "../../../src/leases/redlock/redlock-lease-store.js";
import { type RedisServer, startRedis } from "../../support/redis.js";
import { tempDir } from "../../support/temp.js";
import { requireTools } from "../../support/tools.js";

requireTools("redis-server");

let redis: RedisServer[] = [];
let epochDir: { path: string; cleanup(): void };
beforeAll(async () => {
  redis = await Promise.all([startRedis(), startRedis(), startRedis()]);
  epochDir = tempDir("fencegate-redlock-i-");
}, 60_000);
afterAll(async () => {
  await Promise.all(redis.map((r) => r.stop()));
  epochDir?.cleanup();
});

const cutOff = async (r: RedisServer) =>
  expect(await r.command("ACL", "SETUSER", "default", "-evalsha", "-eval")).toBe("OK");
const restore = async (r: RedisServer) =>
  expect(await r.command("ACL", "SETUSER", "default", "+evalsha", "+eval")).toBe("OK");

let n = 0;
async function open(): Promise<{
  store: RedlockLeaseStore;
  clock: ReturnType<typeof fakeClock>;
  prefix: string;
}> {
  const clock = fakeClock();
  const prefix = `{ri${++n}}`;
  const store = createRedlockLeaseStore({
    urls: redis.map((r) => r.url),
    keyPrefix: prefix,
    epochs: createFileEpochStore(`${epochDir.path}/${prefix}`),
    clock,
    quarantineMs: 60_000,
    commandTimeoutMs: 1_000,
  });
  if (!(await store.ready(10_000))) throw new Error("no majority");
  return { store, clock, prefix };
}

describe("commit intents on a Redlock quorum", () => {
  it("an intent on a bare majority fences a grant that another majority would give", async () => {
    const { store, clock } = await open();
    try {
      const granted = await store.tryAcquire({
        resource: { bucket: "b", key: "k" },
        ttlMs: 1_000,
        owner: "o",
      });
      if (!granted.granted) throw new Error("not granted");
      const lease = granted.lease;
      // C misses the intent: it lives on A and B.
      await cutOff(redis[2]!);
      const intent = await store.beginCommit({
        kind: "fenced",
        leaseId: lease.leaseId,
        token: lease.token,
        bucket: "b",
        key: "k",
      });
      await restore(redis[2]!);
      // Now A is cut off: the next grant can only count B and C. C knows no intent and would grant.
      await cutOff(redis[0]!);
      try {
        clock.advance(1_000); // the lease expired, its commit may still land
        const next = await store.tryAcquire({
          resource: { bucket: "b", key: "k" },
          ttlMs: 1_000,
          owner: "next",
        });
        expect(next.granted).toBe(false);
        if (next.granted || !("fence" in next)) throw new Error(`expected a fence: ${JSON.stringify(next)}`);
        expect(next.fence.intents).toEqual([{ intentId: intent.intentId, bucket: "b", key: "k" }]);
        expect(next.fence.token).toBeGreaterThan(lease.token);
        // Fenced and cleared: the grant goes through, above the fence token.
        await store.clearIntents([intent.intentId]);
        const after = await store.tryAcquire({
          resource: { bucket: "b", key: "k" },
          ttlMs: 1_000,
          owner: "next",
        });
        expect(after.granted).toBe(true);
        if (after.granted) expect(after.lease.token).toBeGreaterThan(next.fence.token);
      } finally {
        await restore(redis[0]!);
      }
    } finally {
      await store.close();
    }
  });

  it("an intent only a minority records refuses the commit and is removed", async () => {
    const { store, prefix } = await open();
    try {
      const granted = await store.tryAcquire({
        resource: { bucket: "b", key: "k" },
        ttlMs: 10_000,
        owner: "o",
      });
      if (!granted.granted) throw new Error("not granted");
      const lease = granted.lease;
      await cutOff(redis[1]!);
      await cutOff(redis[2]!);
      try {
        const refused = await store
          .beginCommit({ kind: "fenced", leaseId: lease.leaseId, token: lease.token, bucket: "b", key: "k" })
          .catch((e: unknown) => e);
        expect(refused).toBeInstanceOf(DomainError);
        expect((refused as DomainError).code).toBe("LeaseStoreUnavailable");
        // A recorded it, then forgot it again.
        expect(await redis[0]!.command("KEYS", `${prefix}:intent:*`)).toEqual([]);
      } finally {
        await restore(redis[1]!);
        await restore(redis[2]!);
      }
    } finally {
      await store.close();
    }
  });
});
