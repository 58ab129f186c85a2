/**
 * With the lease store and the audit log in the same Redis under the same key prefix, the lease
 * scripts append their lease events' audit records themselves (audit_append), in the same script
 * that changes the lease: a gateway that dies right after the script answered leaves no lease
 * change without its record, and a script that cannot append changes nothing.
 */
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { toApiError } from "../../../src/api/errors.js";
import type { AuditLog, AuditRecord } from "../../../src/audit/audit-log.js";
import {
  connectRedis,
  createRedisAuditLog,
  type RedisAuditLog,
} from "../../../src/audit/redis/redis-audit-log.js";
import { loadConfig } from "../../../src/config/load.js";
import { fakeClock, systemClock } from "../../../src/core/clock.js";
import { DomainError } from "../../../src/core/errors.js";
import { createLogger } from "../../../src/core/log.js";
import { type Caller, LeaseService } from "../../../src/leases/lease-service.js";
import { createRedisLeaseStore, type RedisLeaseStore } from "../../../src/leases/redis/redis-lease-store.js";
import { createFileEpochStore } from "../../../src/leases/redis-shared/file-epoch-store.js";
import { openComponents } from "../../../src/server/components.js";
import { ROOT } from "../../support/gateway.js";
import { trackChild } from "../../support/processes.js";
import { type RedisServer, startRedis } from "../../support/redis.js";
import { killChild, LineReader } from "../../support/safety-helpers.js";
import { tempDir } from "../../support/temp.js";
import { requireTools } from "../../support/tools.js";

requireTools("redis-server");

const CRASH = fileURLToPath(new URL("./fixtures/lease-crash.ts", import.meta.url));
const LIMITS = { minTtlMs: 1, maxTtlMs: 3_600_000, maxWaitMs: 60_000 };

let server: RedisServer;
let epochDir: { path: string; cleanup(): void };
const closers: Array<() => Promise<void>> = [];
beforeAll(async () => {
  server = await startRedis();
  epochDir = tempDir("fencegate-epochs-");
});
afterAll(async () => {
  for (const close of closers.reverse()) await close().catch(() => undefined);
  await server?.stop();
  epochDir?.cleanup();
});

type Setup = {
  store: RedisLeaseStore;
  audit: RedisAuditLog;
  service: LeaseService;
  clock: ReturnType<typeof fakeClock>;
  prefix: string;
};

let prefixes = 0;
/**
 * A lease store and an audit log on this file's redis-server, under a key prefix of their own
 * (the audit log's under `auditPrefix` when given), one fake clock for both, and a LeaseService
 * over them (the log given as `audit` makes of it, when given). `legacy`: the store is given the
 * log without its in-script appends, so it appends every record right after the script, as before.
 */
async function open(
  o: { legacy?: boolean; auditPrefix?: string; audit?: (log: RedisAuditLog) => AuditLog } = {},
): Promise<Setup> {
  const prefix = `{ev${++prefixes}}`;
  const clock = fakeClock();
  const audit = await createRedisAuditLog({
    redis: await connectRedis(server.url),
    ownsConnection: true,
    keyPrefix: o.auditPrefix ?? prefix,
    gatewayId: "gw-1",
    clock,
  });
  const log = o.audit ? o.audit(audit) : audit;
  const store = createRedisLeaseStore({
    url: server.url,
    keyPrefix: prefix,
    epochs: createFileEpochStore(`${epochDir.path}/${prefix}`),
    clock,
    events: o.legacy ? { append: (draft) => log.append(draft) } : log,
  });
  closers.push(
    () => store.close(),
    () => audit.close(),
  );
  if (!(await store.ready(10_000))) throw new Error(`no connection to ${server.url}`);
  const service = new LeaseService({
    store,
    audit: log,
    clock,
    limits: LIMITS,
    fenceObject: async () => {},
  });
  return { store, audit, service, clock, prefix };
}

const caller = (principal: string | null, requestId: string | null): Caller => ({ principal, requestId });

/**
 * Every kind of lease event, accepted and refused, through the service: grants, a renewal,
 * releases, expiries seen by a grant, by a release, by the sweep and by a break, breaks of an
 * active and of an expired lease, a refused renewal and a refused grant.
 */
async function everyLeaseEvent(s: Setup): Promise<void> {
  const { service, clock } = s;
  const alice = caller("alice", "rq-1");
  const acquire = (
    resource: { bucket: string; key: string } | { bucket: string; prefix: string },
    ttlMs = 1_000,
  ) => service.acquire({ resource, ttlMs, waitMs: 0, owner: "worker-1" }, alice);

  const a = await acquire({ bucket: "b", key: "k1" });
  clock.advance(10);
  await service.renew(a.leaseId, 2_000, caller("alice", "rq-2"));
  clock.advance(10);
  await service.release(a.leaseId, caller("alice", "rq-3"));

  // Two leases expire unnoticed; a grant over both sees their expiries first.
  await acquire({ bucket: "b", key: "p/x" }, 100);
  await acquire({ bucket: "b", key: "p/y" }, 100);
  clock.advance(200);
  const p = await service.acquire(
    { resource: { bucket: "b", prefix: "p/" }, ttlMs: 1_000, waitMs: 0, owner: "worker-2" },
    caller(null, "rq-4"),
  );
  // Held: refused, recorded by the service.
  await expect(acquire({ bucket: "b", key: "p/z" })).rejects.toMatchObject({ code: "LeaseHeld" });
  await service.breakLease(p.leaseId, caller("admin", "rq-5"));

  // Expiry seen by a release, by the sweep, by a break; a renewal refused after expiry.
  const r = await acquire({ bucket: "b", key: "k2" }, 100);
  const w = await acquire({ bucket: "b", key: "k3" }, 100);
  const x = await acquire({ bucket: "b", key: "k4" }, 100);
  clock.advance(200);
  await expect(service.renew(w.leaseId, 1_000, caller("alice", "rq-6"))).rejects.toMatchObject({
    code: "LeaseLost",
  });
  await service.release(r.leaseId, caller("alice", "rq-7"));
  await service.breakLease(x.leaseId, caller("admin", "rq-8"));
  expect(await service.sweepExpired()).toBe(1);
}

/** Every record of the log, in seq order. */
async function allAuditRecords(audit: AuditLog): Promise<AuditRecord[]> {
  const out: AuditRecord[] = [];
  let cursor: string | undefined;
  for (;;) {
    const page = await audit.query({ limit: 1000, ...(cursor ? { cursor } : {}) });
    out.push(...page.records);
    if (!page.nextCursor) return out;
    cursor = page.nextCursor;
  }
}

/** The records with lease ids replaced by their order of first appearance (ids are random). */
function normalized(records: AuditRecord[]): AuditRecord[] {
  const ids = new Map<string, string>();
  return records.map((r) => {
    if (r.leaseId !== null && !ids.has(r.leaseId)) ids.set(r.leaseId, `lease-${ids.size + 1}`);
    return { ...r, leaseId: r.leaseId === null ? null : ids.get(r.leaseId)! };
  });
}

describe("lease events recorded in the lease scripts (one Redis, one key prefix)", () => {
  it("records every event once, with the same fields and order the service's own appends gave", {
    timeout: 30_000,
  }, async () => {
    const before = await open({ legacy: true });
    const now = await open();
    expect(before.store.recordsInScript).toBe(false);
    expect(now.store.recordsInScript).toBe(true);
    await everyLeaseEvent(before);
    await everyLeaseEvent(now);
    const expected = normalized(await allAuditRecords(before.audit));
    const got = normalized(await allAuditRecords(now.audit));
    expect(got).toEqual(expected);
    // What the sequence makes, one record per event, in this order.
    expect(got.map((r) => `${r.op} ${r.decision} ${r.leaseId ?? "-"} ${r.principal ?? "-"}`)).toEqual([
      "LeaseAcquired accepted lease-1 alice",
      "LeaseRenewed accepted lease-1 alice",
      "LeaseReleased accepted lease-1 alice",
      "LeaseAcquired accepted lease-2 alice",
      "LeaseAcquired accepted lease-3 alice",
      "LeaseExpired accepted lease-2 -",
      "LeaseExpired accepted lease-3 -",
      "LeaseAcquired accepted lease-4 -",
      "LeaseAcquired rejected - alice",
      "LeaseBroken accepted lease-4 admin",
      "LeaseAcquired accepted lease-5 alice",
      "LeaseAcquired accepted lease-6 alice",
      "LeaseAcquired accepted lease-7 alice",
      "LeaseRenewed rejected lease-6 alice",
      "LeaseExpired accepted lease-5 -",
      "LeaseExpired accepted lease-7 -",
      "LeaseBroken accepted lease-7 admin",
      "LeaseExpired accepted lease-6 -",
    ]);
    expect(got.map((r) => r.seq)).toEqual(got.map((_, i) => i + 1));
    expect(new Set(got.map((r) => r.gateway))).toEqual(new Set(["gw-1"]));
  });

  it("a gateway on one Redis (FENCEGATE_REDIS_URL) opens a lease store that records in its scripts, unless the log has its own prefix", {
    timeout: 30_000,
  }, async () => {
    const dir = tempDir("fencegate-components-");
    try {
      for (const [overrides, expected] of [
        [{}, true],
        [{ audit: { keyPrefix: "{audit-elsewhere}" } }, false],
      ] as const) {
        const config = loadConfig(
          { FENCEGATE_DATA_DIR: dir.path, FENCEGATE_REDIS_URL: server.url },
          overrides,
        );
        const c = await openComponents(config, {
          clock: systemClock,
          gatewayId: "gw-c",
          log: createLogger("silent"),
        });
        try {
          expect((c.leaseStore as RedisLeaseStore).recordsInScript).toBe(expected);
        } finally {
          await c.close();
        }
      }
    } finally {
      dir.cleanup();
    }
  });

  it("appends in the script only to the log of the same prefix: another prefix's log gets the service's appends", {
    timeout: 20_000,
  }, async () => {
    const s = await open({ auditPrefix: "{elsewhere}" });
    expect(s.store.recordsInScript).toBe(false);
    const lease = await s.service.acquire(
      { resource: { bucket: "b", key: "k" }, ttlMs: 1_000, waitMs: 0, owner: "o" },
      caller("alice", "rq-1"),
    );
    await s.service.release(lease.leaseId, caller("alice", "rq-2"));
    const records = await allAuditRecords(s.audit);
    expect(records.map((r) => `${r.op} ${r.leaseId === lease.leaseId}`)).toEqual([
      "LeaseAcquired true",
      "LeaseReleased true",
    ]);
    // Nothing went under the lease store's own prefix.
    expect(await server.command("EXISTS", `${s.prefix}:a`)).toBe(0);
  });

  it("a gateway killed right after the script answered (before the service goes on) leaves the grant and the release recorded", {
    timeout: 60_000,
  }, async () => {
    const prefix = `{crash${++prefixes}}`;
    const epochs = `${epochDir.path}/${prefix}`;
    const audit = await createRedisAuditLog({
      redis: await connectRedis(server.url),
      ownsConnection: true,
      keyPrefix: prefix,
      gatewayId: "observer",
    });
    const store = createRedisLeaseStore({
      url: server.url,
      keyPrefix: prefix,
      epochs: createFileEpochStore(epochs),
    });
    closers.push(
      () => store.close(),
      () => audit.close(),
    );
    expect(await store.ready(10_000)).toBe(true);

    const crashAfterScript = async (
      op: "acquire" | "acquire-shared" | "release",
      arg: string,
    ): Promise<string> => {
      let stderr = "";
      const child = spawn(process.execPath, ["--import", "tsx", CRASH, server.url, prefix, epochs, op, arg], {
        cwd: ROOT,
        stdio: ["ignore", "pipe", "pipe"],
      });
      trackChild(child);
      child.stderr!.on("data", (d) => {
        stderr += d;
      });
      try {
        const lines = new LineReader<{ event: string; leaseId?: string }>(child.stdout!, () => stderr);
        const returned = await lines.next((m) => m.event === "returned", 30_000);
        await killChild(child, "SIGKILL");
        expect(child.signalCode).toBe("SIGKILL");
        return returned.leaseId!;
      } finally {
        await killChild(child, "SIGKILL");
      }
    };

    const leaseId = await crashAfterScript("acquire", "k");
    // The lease was granted...
    const granted = await store.get(leaseId);
    expect(granted?.releasedAt).toBeUndefined();
    expect(granted?.owner).toBe("w1");
    // ...and its record is there, although the gateway died before it could append anything.
    const acquired = (await audit.query({ leaseId, limit: 100 })).records;
    expect(
      acquired.map((r) => [r.op, r.decision, r.principal, r.requestId, r.owner, r.token, r.gateway]),
    ).toEqual([["LeaseAcquired", "accepted", "alice", "req-acquire", "w1", granted!.token, "doomed"]]);

    await crashAfterScript("release", leaseId);
    expect((await store.get(leaseId))?.releasedAt).toBeDefined();
    const all = (await audit.query({ leaseId, limit: 100 })).records;
    expect(all.map((r) => [r.op, r.principal, r.requestId])).toEqual([
      ["LeaseAcquired", "alice", "req-acquire"],
      ["LeaseReleased", "alice", "req-release"],
    ]);

    // The same through the wait queue every replica shares (its own grant script).
    const shared = await crashAfterScript("acquire-shared", "k2");
    const grantedShared = await store.get(shared);
    expect(grantedShared?.releasedAt).toBeUndefined();
    expect(
      (await audit.query({ leaseId: shared, limit: 100 })).records.map((r) => [r.op, r.requestId, r.token]),
    ).toEqual([["LeaseAcquired", "req-acquire-shared", grantedShared!.token]]);
  });

  it("while the audit counter is gone and cannot be restored, a grant answers 503 and changes nothing", {
    timeout: 20_000,
  }, async () => {
    let restores = 0;
    const s = await open({
      // The log cannot restore its counter (say its archive is unreachable).
      audit: (log) => ({
        ...log,
        inScript: {
          ...log.inScript,
          restore: async () => {
            restores++;
            throw new DomainError("ServiceUnavailable", "the audit archive is unreachable");
          },
        },
      }),
    });
    const held = await s.service.acquire(
      { resource: { bucket: "b", key: "held" }, ttlMs: 60_000, waitMs: 0, owner: "o" },
      caller("alice", "rq-0"),
    );
    const keysBefore = ((await server.command("KEYS", `${s.prefix}:*`)) as string[]).sort();
    const floorBefore = await server.command("HGET", `${s.prefix}:floor`, "last");
    expect(await server.command("DEL", `${s.prefix}:a:seq`)).toBe(1);
    const keysLost = ((await server.command("KEYS", `${s.prefix}:*`)) as string[]).sort();

    const refused = s.service.acquire(
      { resource: { bucket: "b", key: "k" }, ttlMs: 1_000, waitMs: 0, owner: "o" },
      caller("alice", "rq-1"),
    );
    await expect(refused).rejects.toBeInstanceOf(DomainError);
    await expect(refused).rejects.toMatchObject({ code: "LeaseStoreUnavailable" });
    expect(toApiError(await refused.catch((e: unknown) => e)).status).toBe(503);
    expect(restores).toBe(1);
    // Nothing granted, no token taken, no key written; the renewal and the release refuse too.
    expect(await s.store.list({})).toEqual([expect.objectContaining({ leaseId: held.leaseId })]);
    expect(await server.command("HGET", `${s.prefix}:floor`, "last")).toBe(floorBefore);
    await expect(s.service.renew(held.leaseId, 60_000, caller("alice", "rq-2"))).rejects.toMatchObject({
      code: "LeaseStoreUnavailable",
    });
    await expect(s.service.release(held.leaseId, caller("alice", "rq-3"))).rejects.toMatchObject({
      code: "LeaseStoreUnavailable",
    });
    expect((await s.store.get(held.leaseId))?.releasedAt).toBeUndefined();
    const keysAfter = ((await server.command("KEYS", `${s.prefix}:*`)) as string[]).sort();
    expect(keysAfter).toEqual(keysLost);
    expect(keysBefore.filter((k) => !keysAfter.includes(k))).toEqual([`${s.prefix}:a:seq`]);
  });

  it("an append that fails inside the script (a counter behind the log) leaves the lease as it was", {
    timeout: 20_000,
  }, async () => {
    const s = await open();
    const alice = caller("alice", "rq-1");
    const held = await s.service.acquire(
      { resource: { bucket: "b", key: "held" }, ttlMs: 60_000, waitMs: 0, owner: "o" },
      alice,
    );
    const leasesBefore = ((await server.command("KEYS", `${s.prefix}:lease:*`)) as string[]).sort();
    // The next seq would collide with a record already in the log: XADD fails inside the script
    // (each failed attempt moves the counter on, so it is put back before each call).
    const behind = async () => expect(await server.command("SET", `${s.prefix}:a:seq`, "0")).toBe("OK");
    await behind();
    await expect(
      s.service.acquire({ resource: { bucket: "b", key: "k" }, ttlMs: 1_000, waitMs: 0, owner: "o" }, alice),
    ).rejects.toMatchObject({ code: "LeaseStoreUnavailable" });
    await behind();
    await expect(s.service.release(held.leaseId, alice)).rejects.toMatchObject({
      code: "LeaseStoreUnavailable",
    });
    await behind();
    await expect(s.service.renew(held.leaseId, 30_000, alice)).rejects.toMatchObject({
      code: "LeaseStoreUnavailable",
    });
    expect(((await server.command("KEYS", `${s.prefix}:lease:*`)) as string[]).sort()).toEqual(leasesBefore);
    const still = await s.store.get(held.leaseId);
    expect(still?.expiresAt).toBe(held.expiresAt);
    expect(still?.releasedAt).toBeUndefined();
    expect(still?.endedAt).toBeUndefined();
    expect(await s.store.list({})).toEqual([expect.objectContaining({ leaseId: held.leaseId })]);
  });

  it("once the log restores its counter, the grant goes through, numbered above every seq given out", {
    timeout: 20_000,
  }, async () => {
    const s = await open();
    const caller1 = caller("alice", "rq-1");
    const first = await s.service.acquire(
      { resource: { bucket: "b", key: "a" }, ttlMs: 60_000, waitMs: 0, owner: "o" },
      caller1,
    );
    await s.service.renew(first.leaseId, 60_000, caller1);
    // Redis loses the log (its counter and records); the lease keys stay.
    for (const key of (await server.command("KEYS", `${s.prefix}:a*`)) as string[]) {
      await server.command("DEL", key);
    }
    const second = await s.service.acquire(
      { resource: { bucket: "b", key: "c" }, ttlMs: 60_000, waitMs: 0, owner: "o" },
      caller1,
    );
    const records = await allAuditRecords(s.audit);
    // The two seqs given out by the scripts before the loss are not given out again.
    expect(records.map((r) => [r.seq, r.op, r.leaseId])).toEqual([[3, "LeaseAcquired", second.leaseId]]);
  });
});
