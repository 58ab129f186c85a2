import { BlobServiceClient } from "@azure/storage-blob";
import { afterAll } from "vitest";
import {
  type AzureBackend,
  type AzureBackendOptions,
  createAzureBackend,
} from "../../../src/backends/azure/index.js";
import type { fakeClock } from "../../../src/core/clock.js";
import { type AzuriteServer, startAzurite } from "../../support/azurite.js";
import type { MultipartFixture } from "../multipart.contract.js";

/**
 * One private Azurite per test file, started on first use and stopped after the file's tests.
 * Call at the top level of a test file.
 */
export function useAzurite(options: { inMemory?: boolean } = {}): () => Promise<AzuriteServer> {
  let started: Promise<AzuriteServer> | undefined;
  afterAll(async () => {
    if (started) await (await started).stop();
  });
  return () => {
    started ??= startAzurite(options);
    return started;
  };
}

export const META = ".fencegate/";

export type AzureFixture = MultipartFixture & {
  backend: AzureBackend;
  server: AzuriteServer;
  /** A client of the same account that bypasses the gateway, for looking at the container. */
  direct: BlobServiceClient;
  reopen: () => Promise<AzureBackend>;
  leftovers: () => Promise<string[]>;
  storedParts: () => Promise<number>;
};

export type AzureFixtureOptions = Omit<AzureBackendOptions, "connectionString" | "clock"> & {
  clock?: ReturnType<typeof fakeClock>;
};

/**
 * An Azure backend on the file's Azurite; reopen = a new AzureBackend on the same account.
 * Leftovers and stored parts are looked for in the containers created since the fixture was made.
 */
export async function azureFixture(
  server: AzuriteServer,
  options: AzureFixtureOptions = {},
): Promise<AzureFixture> {
  const open = () =>
    createAzureBackend({
      multipartSweepIntervalMs: 0,
      ...options,
      connectionString: server.connectionString,
    });
  const direct = BlobServiceClient.fromConnectionString(server.connectionString);
  const before = new Set(await containerNames(direct));
  const ours = async () => (await containerNames(direct)).filter((name) => !before.has(name));
  let backend = open();
  return {
    get backend() {
      return backend;
    },
    server,
    direct,
    ...(options.clock ? { clock: options.clock } : {}),
    async reopen() {
      await backend.close();
      backend = open();
      return backend;
    },
    /**
     * Blobs nothing references: part blobs whose upload record is gone, and blobs that exist only
     * as uncommitted blocks (a write that staged blocks for a new key and never committed).
     * Uncommitted blocks of a blob that exists are not counted: nothing can remove them short of
     * the blob's next commit (or Azure's 7-day collection), and they change nothing.
     */
    async leftovers() {
      const found: string[] = [];
      for (const name of await ours()) {
        const container = direct.getContainerClient(name);
        const committed = new Set<string>();
        for await (const item of container.listBlobsFlat()) committed.add(item.name);
        for await (const item of container.listBlobsFlat({ includeUncommitedBlobs: true })) {
          if (!committed.has(item.name)) found.push(`${name}/${item.name} (uncommitted)`);
        }
        for (const blob of committed) {
          const part = /^\.fencegate\/parts\/([0-9a-f]{44})\//.exec(blob);
          if (part && !committed.has(`${META}uploads/${part[1]}`))
            found.push(`${name}/${blob} (orphan part)`);
        }
      }
      return found;
    },
    // Other tests' uploads share the account: sweep only this fixture's containers.
    sweepAbandoned: async () => backend.multipart.sweepAbandoned({ buckets: await ours() }),
    async storedParts() {
      let count = 0;
      for (const name of await ours()) {
        for await (const _item of direct
          .getContainerClient(name)
          .listBlobsFlat({ prefix: `${META}parts/` })) {
          count++;
        }
      }
      return count;
    },
    async cleanup() {
      await backend.close();
    },
  };
}

async function containerNames(service: BlobServiceClient): Promise<string[]> {
  const names: string[] = [];
  for await (const item of service.listContainers()) names.push(item.name);
  return names;
}
