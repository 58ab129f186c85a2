/**
 * The LeaseService contract (fair waiting, pools) over the Redis store: waiting goes through the
 * wait queue every replica shares (src/leases/redis/redis-wait-queue.ts), pool membership through
 * Redis too. Across several replicas: replicas-fifo.test.ts.
 */
import { createFileEpochStore } from "../../../src/leases/redis/file-epoch-store.js";
import { createRedisLeaseStore } from "../../../src/leases/redis/redis-lease-store.js";
import { useRedisForFile } from "../../support/redis.js";
import { describeLeaseServiceContract } from "../lease-service.contract.js";

const shared = useRedisForFile();

let harnesses = 0;
describeLeaseServiceContract("the Redis store", async () => {
  // A key prefix of its own per test: tests share nothing but the server.
  const prefix = `{svc${++harnesses}}`;
  const store = createRedisLeaseStore({
    url: shared.server.url,
    keyPrefix: prefix,
    epochs: createFileEpochStore(`${shared.epochDir}/${prefix}`),
  });
  if (!(await store.ready(5_000))) throw new Error(`no connection to ${shared.server.url}`);
  return { store, cleanup: () => store.close() };
});
