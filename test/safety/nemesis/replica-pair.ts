// What the audit-order tests share: two gateways ("gw-a", "gw-b") on one remote store (through its
// HTTP fault proxy) and one Redis lease store and audit log, reached through one Redis fault proxy
// for both or one for each; and the accepted writes of an object in the audit log's order.
import { afterAll, beforeAll } from "vitest";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { type RedisServer, startRedis } from "../../support/redis.js";
import { type RedisFaultProxy, startRedisFaultProxy } from "../../support/redis-fault-proxy.js";
import { type AuditRecord, allAuditRecords } from "../../support/safety-helpers.js";
import { waitFor } from "../../support/wait.js";
import type { FaultyStore } from "../faults/faulty-store.js";
import { SIGNING_KEY } from "./cluster.js";

export type ReplicaPair = {
  store: FaultyStore;
  /** One proxy for both gateways, or gateway A's then gateway B's. */
  proxies: RedisFaultProxy[];
  a: TestGateway;
  b: TestGateway;
};

/** Starts the pair before the suite's tests and stops it after them; read it inside a test. */
export function replicaPair(start: () => Promise<FaultyStore>, proxiesFor: "shared" | "each"): ReplicaPair {
  const pair = { proxies: [] as RedisFaultProxy[] } as unknown as ReplicaPair;
  let redis: RedisServer | undefined;
  const gateways: TestGateway[] = [];
  beforeAll(async () => {
    redis = await startRedis();
    pair.store = await start();
    for (const id of ["gw-a", "gw-b"]) {
      if (pair.proxies.length === 0 || proxiesFor === "each") {
        pair.proxies.push(await startRedisFaultProxy(redis.port));
      }
      const proxy = pair.proxies.at(-1)!;
      gateways.push(
        await startTestGateway({
          overrides: {
            backend: pair.store.backend({ requestTimeoutMs: 5_000 }),
            leaseStore: { type: "redis", url: proxy.url, unsafeSettings: "warn" },
          },
          env: { FENCEGATE_GATEWAY_ID: id, FENCEGATE_TOKEN_SIGNING_KEY: SIGNING_KEY },
        }),
      );
    }
    [pair.a, pair.b] = gateways as [TestGateway, TestGateway];
  }, 60_000);
  afterAll(async () => {
    for (const p of pair.proxies) p.clear();
    for (const gw of gateways) await gw.stop();
    for (const p of pair.proxies) await p.close();
    await pair.store?.stop();
    await redis?.stop();
  });
  return pair;
}

/** The accepted writes (puts and deletes) of an object, in the audit log's order. */
export async function acceptedWrites(gw: TestGateway, bucket: string, key: string): Promise<AuditRecord[]> {
  return (await allAuditRecords(gw.leases, { bucket, key }))
    .filter((r) => r.decision === "accepted" && (r.op === "PutObject" || r.op === "DeleteObject"))
    .sort((x, y) => x.seq - y.seq);
}

/** Waits until the audit log holds an accepted record of the request. */
export async function acceptedRecord(gw: TestGateway, bucket: string, key: string, requestId: string) {
  return waitFor(async () => (await acceptedWrites(gw, bucket, key)).find((r) => r.requestId === requestId), {
    what: `the accepted record of request ${requestId}`,
    timeoutMs: 15_000,
  });
}
