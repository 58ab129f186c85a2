/**
 * Round trips from a gateway to its Redis lease store per lease call, counted at Redis with
 * MONITOR on a private redis-server (appendfsync always, as a durable deployment runs it): every
 * request the gateway sends is one line with its client address; the commands scripts run come
 * as lines of their own marked "lua" (counted as commands, not round trips). With `appendfsync
 * always` every write reply waits for an fsync, so a round trip is what a lease call pays most for.
 *
 * An uncontended acquire: its ticket in the shared wait queue (enqueue), then the grant as head of
 * the queue, which also appends the audit record and takes the token (2 round trips). A release:
 * the read its owner check needs, then one script that ends the lease, appends the audit record
 * and tells the waiters now first in line (2 round trips; it was 3, the wake-up a call of its own).
 */
import { createHash } from "node:crypto";
import { Redis } from "ioredis";
import { afterEach, describe, expect, it } from "vitest";
import { LeaseClient } from "../../../src/client/lease-client.js";
import { loadConfig } from "../../../src/config/load.js";
import { createLogger } from "../../../src/core/log.js";
import * as leaseScripts from "../../../src/leases/redis/lua/lease-scripts.js";
import * as waitScripts from "../../../src/leases/redis/lua/wait-scripts.js";
import * as sharedScripts from "../../../src/leases/redis-shared/lua/lease-scripts.js";
import { startGateway } from "../../../src/server/gateway.js";
import { CREDENTIALS, tempDir, waitForHealth } from "../../support/gateway.js";
import { startRedis } from "../../support/redis.js";
import { requireTools } from "../../support/tools.js";
import { sleep } from "../../support/wait.js";

requireTools("redis-server");

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** The lease store's scripts by SHA1 (what EVALSHA names), as their export names. */
const SCRIPT_NAMES = new Map<string, string>();
for (const [name, value] of Object.entries({ ...sharedScripts, ...leaseScripts, ...waitScripts })) {
  if (typeof value === "string") SCRIPT_NAMES.set(createHash("sha1").update(value).digest("hex"), name);
}

type Seen = { client: string; command: string; script?: string };

/** Round trips: one per request line, a MULTI ... EXEC of one client counted once. */
function roundTrips(seen: readonly Seen[]): string[] {
  const out: string[] = [];
  const inMulti = new Set<string>();
  for (const s of seen) {
    if (s.client === "lua") continue;
    if (inMulti.has(s.client)) {
      if (s.command === "exec" || s.command === "discard") inMulti.delete(s.client);
      continue;
    }
    if (s.command === "multi") inMulti.add(s.client);
    out.push(s.script ? `${s.command} ${s.script}` : s.command);
  }
  return out;
}

describe("round trips to the Redis lease store per lease call", () => {
  it("an uncontended acquire is 2 round trips, a release 2; MULTI and scripts' own calls are not round trips", async () => {
    const redis = await startRedis({ persistence: "aof" });
    cleanups.push(() => redis.stop());
    const dir = tempDir();
    cleanups.push(() => dir.cleanup());
    const config = loadConfig(
      { FENCEGATE_PORT: "0", FENCEGATE_DATA_DIR: dir.path, FENCEGATE_REDIS_URL: redis.url },
      {},
    );
    // The periodic expiry sweep would land in a window now and then: once an hour here.
    const gw = await startGateway(config, { log: createLogger("silent"), sweepMs: 3_600_000 });
    cleanups.push(() => gw.close());
    await waitForHealth(gw.url, { timeoutMs: 10_000 });
    const client = new LeaseClient({ endpoint: gw.url, ...CREDENTIALS });

    // Warm-up: token epoch installed, scripts loaded (a first call answers NOSCRIPT and is
    // repeated), the audit log's first record made.
    for (let i = 0; i < 3; i++) {
      const w = await client.acquire({ bucket: "bkt", key: `warm-${i}`, ttlMs: 60_000 });
      await client.release(w.leaseId);
    }

    const base = new Redis(redis.url);
    cleanups.push(() => void base.disconnect());
    const monitor = await base.monitor();
    cleanups.push(() => void monitor.disconnect());
    let seen: Seen[] = [];
    monitor.on("monitor", (_time: string, args: string[], source: string) => {
      const command = String(args[0]).toLowerCase();
      const script = command === "evalsha" ? (SCRIPT_NAMES.get(String(args[1])) ?? "unknown") : undefined;
      seen.push({ client: source, command, script });
    });
    await sleep(200);
    const window = async (call: () => Promise<unknown>): Promise<Seen[]> => {
      seen = [];
      await call();
      await sleep(300); // MONITOR's report may trail the answer
      return seen;
    };

    const perAcquire: number[] = [];
    const perRelease: number[] = [];
    for (let i = 0; i < 3; i++) {
      let leaseId = "";
      const acquired = await window(async () => {
        leaseId = (await client.acquire({ bucket: "bkt", key: `k-${i}`, ttlMs: 60_000 })).leaseId;
      });
      expect(roundTrips(acquired)).toEqual(["evalsha ENQUEUE", "evalsha ACQUIRE_AS_HEAD"]);
      perAcquire.push(acquired.length);
      const released = await window(() => client.release(leaseId));
      expect(roundTrips(released)).toEqual(["evalsha GET", "evalsha RELEASE_AND_WAKE"]);
      perRelease.push(released.length);
    }
    // Commands, the scripts' own calls included (reported, and bounded loosely: a count, not a time).
    console.log(`Redis commands per acquire ${perAcquire.join(", ")}; per release ${perRelease.join(", ")}`);
    for (const n of perAcquire) expect(n).toBeLessThanOrEqual(48);
    for (const n of perRelease) expect(n).toBeLessThanOrEqual(28);
  }, 60_000);
});
