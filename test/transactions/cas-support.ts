import { CreateBucketCommand } from "@aws-sdk/client-s3";
import { startStore } from "../backends/s3/s3-fixture.js";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../support/gateway.js";
import { type RedisServer, startRedis } from "../support/redis.js";

/** One signing key for every gateway of a test: a token granted by one is valid on another. */
export const SIGNING_KEY = "one-signing-key-for-every-replica";
export const SYSTEM_BUCKET = "fencegate-system";

/**
 * The store of compare-and-swap transaction tests: an S3 store (a fencegate gateway on the
 * embedded backend, which honours If-Match / If-None-Match: s3rver does not) and a Redis lease
 * store, shared by every gateway replica started on them.
 */
export type CasWorld = {
  store: TestGateway;
  redis: RedisServer;
  /** The config every replica uses (overrides), for the S3 backend at `endpoint` (default: the store). */
  overrides(endpoint?: string): Record<string, unknown>;
  /** The same config as YAML lines (spawned gateways). */
  yaml(endpoint?: string): string;
  replica(endpoint?: string): Promise<TestGateway>;
  stop(): Promise<void>;
};

export async function startCasWorld(): Promise<CasWorld> {
  const redis = await startRedis();
  const store = await startStore();
  const setup = store.s3();
  await setup.send(new CreateBucketCommand({ Bucket: SYSTEM_BUCKET }));
  setup.destroy();
  const replicas: TestGateway[] = [];
  const backend = (endpoint: string) => ({
    type: "s3",
    endpoint,
    region: "us-east-1",
    accessKeyId: CREDENTIALS.accessKeyId,
    secretAccessKey: CREDENTIALS.secretAccessKey,
    forcePathStyle: true,
    requestTimeoutMs: 6_000,
  });
  const overrides = (endpoint = store.url) => ({
    backend: backend(endpoint),
    leaseStore: {
      type: "redis",
      url: redis.url,
      epochs: { bucket: SYSTEM_BUCKET },
      unsafeSettings: "warn",
    },
    leases: { minTtlMs: 100 },
  });
  return {
    store,
    redis,
    overrides,
    yaml: (endpoint = store.url) =>
      [
        "backend:",
        "  type: s3",
        `  endpoint: ${endpoint}`,
        "  region: us-east-1",
        `  accessKeyId: ${CREDENTIALS.accessKeyId}`,
        `  secretAccessKey: ${CREDENTIALS.secretAccessKey}`,
        "  forcePathStyle: true",
        "leaseStore:",
        "  type: redis",
        `  url: ${redis.url}`,
        `  epochs: { bucket: ${SYSTEM_BUCKET} }`,
        "  unsafeSettings: warn",
        "leases: { minTtlMs: 100 }",
        "",
      ].join("\n"),
    async replica(endpoint) {
      const gw = await startTestGateway({
        env: { FENCEGATE_TOKEN_SIGNING_KEY: SIGNING_KEY },
        overrides: overrides(endpoint),
      });
      replicas.push(gw);
      return gw;
    },
    async stop() {
      for (const r of replicas) await r.stop().catch(() => undefined);
      await store.stop();
      await redis.stop();
    },
  };
}
