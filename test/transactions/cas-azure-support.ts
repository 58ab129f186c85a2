import { BlobServiceClient } from "@azure/storage-blob";
import { type AzuriteServer, azuriteConnectionString, startAzurite } from "../support/azurite.js";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import { type RedisServer, startRedis } from "../support/redis.js";
import { SIGNING_KEY, SYSTEM_BUCKET } from "./cas-support.js";

/**
 * The world of the Azure transaction tests: one private Azurite and one Redis lease store,
 * shared by every gateway replica started on them (each with the same token-signing key).
 * `port` points a replica at another blob endpoint (a fault proxy in front of Azurite).
 */
export type AzureCasWorld = {
  azurite: AzuriteServer;
  redis: RedisServer;
  /** A client of the account that bypasses the gateways. */
  direct: BlobServiceClient;
  overrides(port?: number): Record<string, unknown>;
  yaml(port?: number): string;
  replica(port?: number, extra?: Record<string, unknown>): Promise<TestGateway>;
  stop(): Promise<void>;
};

export async function startAzureCasWorld(): Promise<AzureCasWorld> {
  const redis = await startRedis();
  const azurite = await startAzurite();
  const direct = BlobServiceClient.fromConnectionString(azurite.connectionString);
  await direct.getContainerClient(SYSTEM_BUCKET).createIfNotExists();
  const replicas: TestGateway[] = [];
  const overrides = (port = azurite.port) => ({
    backend: {
      type: "azure",
      connectionString: azuriteConnectionString(port),
      requestTimeoutMs: 6_000,
    },
    leaseStore: {
      type: "redis",
      url: redis.url,
      epochs: { bucket: SYSTEM_BUCKET },
      unsafeSettings: "warn",
    },
    leases: { minTtlMs: 100 },
  });
  return {
    azurite,
    redis,
    direct,
    overrides,
    yaml: (port = azurite.port) =>
      [
        "backend:",
        "  type: azure",
        `  connectionString: "${azuriteConnectionString(port)}"`,
        "  requestTimeoutMs: 6000",
        "leaseStore:",
        "  type: redis",
        `  url: ${redis.url}`,
        `  epochs: { bucket: ${SYSTEM_BUCKET} }`,
        "  unsafeSettings: warn",
        "leases: { minTtlMs: 100 }",
        "",
      ].join("\n"),
    async replica(port, extra = {}) {
      const gw = await startTestGateway({
        env: { FENCEGATE_TOKEN_SIGNING_KEY: SIGNING_KEY },
        overrides: { ...overrides(port), ...extra },
      });
      replicas.push(gw);
      return gw;
    },
    async stop() {
      for (const r of replicas) await r.stop().catch(() => undefined);
      await azurite.stop();
      await redis.stop();
    },
  };
}

/** The state fencegate keeps in a blob's metadata (blob-state.ts), read around the gateways. */
export async function blobState(
  direct: BlobServiceClient,
  bucket: string,
  name: string,
): Promise<Record<string, unknown> | null> {
  try {
    const props = await direct.getContainerClient(bucket).getBlockBlobClient(name).getProperties();
    const encoded = props.metadata?.fencegate;
    return encoded
      ? (JSON.parse(Buffer.from(encoded, "base64url").toString("utf8")) as Record<string, unknown>)
      : null;
  } catch (e) {
    if ((e as { statusCode?: number }).statusCode === 404) return null;
    throw e;
  }
}

export async function blobExists(direct: BlobServiceClient, bucket: string, name: string): Promise<boolean> {
  return direct.getContainerClient(bucket).getBlockBlobClient(name).exists();
}

/** A transaction's record as the container holds it (`.fencegate/t/<id>`). */
export async function storedTransaction(
  direct: BlobServiceClient,
  bucket: string,
  id: string,
): Promise<Record<string, unknown>> {
  const buffer = await direct
    .getContainerClient(bucket)
    .getBlockBlobClient(`.fencegate/t/${id}`)
    .downloadToBuffer();
  return JSON.parse(buffer.toString("utf8")) as Record<string, unknown>;
}

/** The names of the staging blobs of transactions in the container. */
export async function stagingBlobs(direct: BlobServiceClient, bucket: string): Promise<string[]> {
  const names: string[] = [];
  for await (const item of direct.getContainerClient(bucket).listBlobsFlat({ prefix: ".fencegate/tx/" })) {
    names.push(item.name);
  }
  return names;
}
