/**
 * The LeaseService contract (fair waiting, pools) over the Redis store: waiting goes through the
 * wait queue every replica shares (src/leases/redis/redis-wait-queue.ts), pool membership through
 * Redis too. Across several replicas: replicas-fifo.test.ts.
 */
import { afterAll, beforeAll } from "vitest";
import { createFileEpochStore } from "../../../src/leases/redis/file-epoch-store.js";
import { createRedisLeaseStore } from "../../../src/leases/redis/redis-lease-store.js";
import { type RedisServer, startRedis } from "../../support/redis.js";
import { tempDir } from "../../support/temp.js";
import { requireTools } from "../../support/tools.js";
import { describeLeaseServiceContract } from "../lease-service.contract.js";

requireTools("redis-server");

let server: RedisServer;
let epochDir: { path: string; cleanup(): void };
beforeAll(async () => {
  server = await startRedis();
  epochDir = tempDir("fencegate-epochs-");
});
afterAll(async () => {
  await server?.stop();
  epochDir?.cleanup();
});

let harnesses = 0;
describeLeaseServiceContract("the Redis store", async () => {
  // A key prefix of its own per test: tests share nothing but the server.
  const prefix = `{svc${++harnesses}}`;
  const store = createRedisLeaseStore({
    url: server.url,
    keyPrefix: prefix,
    epochs: createFileEpochStore(`${epochDir.path}/${prefix}`),
  });
  if (!(await store.ready(5_000))) throw new Error(`no connection to ${server.url}`);
  return { store, cleanup: () => store.close() };
});
