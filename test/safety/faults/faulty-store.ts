// The remote stores of the fault-injection suites, each behind the fault proxy
// (test/support/fault-proxy.ts): S3 (a second fencegate on the fs backend, which honours
// conditional writes) and Azure (Azurite). A gateway under test is started on the store's
// backend configuration; the suite picks the store's requests for faults with the matchers here.
import { type AzureFixture, azureFixture } from "../../backends/azure/azure-fixture.js";
import { type S3Fixture, s3Fixture } from "../../backends/s3/s3-fixture.js";
import { AZURITE_ACCOUNT, azuriteConnectionString, startAzurite } from "../../support/azurite.js";
import { type HttpFaultProxy, type HttpMatch, startHttpFaultProxy } from "../../support/fault-proxy.js";
import { CREDENTIALS } from "../../support/gateway.js";

export type FaultyStore = {
  name: "s3" | "azure";
  proxy: HttpFaultProxy;
  /** The `backend` section of a gateway on this store (through the proxy). */
  backend(extra?: Record<string, unknown>): Record<string, unknown>;
  /** The conditional write that is the commit point of an object (its record; its blob). */
  commit(bucket: string, key: string): HttpMatch;
  /** The read of an object's state before a commit (its record; its blob's properties). */
  stateRead(bucket: string, key: string): HttpMatch;
  stop(): Promise<void>;
};

/** S3: records under `.fencegate/r/` are the commit points. */
export async function faultyS3(): Promise<FaultyStore> {
  const fx: S3Fixture = await s3Fixture();
  const proxy = await startHttpFaultProxy(fx.store.url);
  const record = (bucket: string, key: string) => `/${bucket}/.fencegate/r/${key}`;
  return {
    name: "s3",
    proxy,
    backend: (extra = {}) => ({
      type: "s3",
      endpoint: proxy.url,
      region: "us-east-1",
      accessKeyId: CREDENTIALS.accessKeyId,
      secretAccessKey: CREDENTIALS.secretAccessKey,
      forcePathStyle: true,
      gcIntervalMs: 0,
      ...extra,
    }),
    commit: (bucket, key) => ({ method: "PUT", path: (p) => p === record(bucket, key) }),
    stateRead: (bucket, key) => ({ method: "GET", path: (p) => p === record(bucket, key) }),
    async stop() {
      await proxy.close();
      await fx.cleanup();
    },
  };
}

/** Azure: the blob at the object's own name is its commit point (Put Blob, Put Block List, metadata). */
export async function faultyAzure(): Promise<FaultyStore> {
  const azurite = await startAzurite({ inMemory: true });
  const fx: AzureFixture = await azureFixture(azurite);
  const proxy = await startHttpFaultProxy(azurite.url);
  const blob = (bucket: string, key: string) => `/${AZURITE_ACCOUNT}/${bucket}/${key}`;
  return {
    name: "azure",
    proxy,
    backend: (extra = {}) => ({
      type: "azure",
      connectionString: azuriteConnectionString(proxy.port),
      ...extra,
    }),
    commit: (bucket, key) => ({
      method: "PUT",
      path: (p) => p === blob(bucket, key),
      // Put Blob, Put Block List: the object's bytes and state in one conditional call.
      query: (q) => q.get("comp") === null || q.get("comp") === "blocklist",
    }),
    stateRead: (bucket, key) => ({ method: "HEAD", path: (p) => p === blob(bucket, key) }),
    async stop() {
      await proxy.close();
      await fx.cleanup();
      await azurite.stop();
    },
  };
}

export const FAULTY_STORES = [
  { name: "s3", start: faultyS3 },
  { name: "azure", start: faultyAzure },
] as const;
