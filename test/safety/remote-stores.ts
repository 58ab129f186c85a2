// The remote stores the process-level safety tests run gateways against: S3 (a second fencegate
// on the fs backend, which honours conditional writes) and Azure (Azurite). Each sits behind an
// HTTP proxy that can hold one commit call of a key (the conditional write that is the commit
// point) until the test lets it go, so a commit can be paused at exactly that step while other
// leases are granted and write.
import type { IncomingMessage } from "node:http";
import { type AzureFixture, azureFixture } from "../backends/azure/azure-fixture.js";
import { startProxy } from "../backends/s3/proxy.js";
import { type S3Fixture, s3Fixture } from "../backends/s3/s3-fixture.js";
import { AZURITE_ACCOUNT, azuriteConnectionString, startAzurite } from "../support/azurite.js";
import { CREDENTIALS } from "../support/gateway.js";
import { waitFor } from "../support/wait.js";

export type Hold = {
  /** Resolves once the commit call reached the proxy and is held there. */
  reached: Promise<void>;
  /** Lets the held call go on to the store. */
  release(): void;
};

export type RemoteStore = {
  name: string;
  /** Environment for gateway processes that use this store as their backend (through the proxy). */
  env: Record<string, string>;
  /** Holds the next commit call (the conditional write at the object's commit point) of `key`. */
  holdCommit(bucket: string, key: string): Hold;
  /** With the gateways idle: runs the store's collector, then lists what nothing references. */
  leftovers(): Promise<string[]>;
  stop(): Promise<void>;
};

/** Arms holds on requests that a predicate picks; each hold takes one request. */
class Holds {
  private armed: {
    matches: (req: IncomingMessage, path: string) => boolean;
    reached(): void;
    gate: Promise<void>;
  }[] = [];

  arm(matches: (req: IncomingMessage, path: string) => boolean): Hold {
    let reached!: () => void;
    let release!: () => void;
    const isReached = new Promise<void>((r) => {
      reached = r;
    });
    const gate = new Promise<void>((r) => {
      release = r;
    });
    this.armed.push({ matches, reached, gate });
    return { reached: isReached, release };
  }

  /**
   * A held request is read in full first and forwarded from memory when released, so that it
   * reaches the store even when the gateway that sent it died meanwhile (kill -9).
   */
  async decide(req: IncomingMessage, path: string): Promise<"forward" | { forward: Buffer }> {
    const i = this.armed.findIndex((h) => h.matches(req, path));
    if (i < 0) return "forward";
    const [hold] = this.armed.splice(i, 1);
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    hold!.reached();
    await hold!.gate;
    return { forward: Buffer.concat(chunks) };
  }
}

const pathOf = (path: string) => path.split("?")[0]!;
const queryOf = (path: string) => new URLSearchParams(path.split("?")[1] ?? "");

/** S3: the gateway's backend is an S3 backend on a second fencegate, through a proxy. */
export async function s3RemoteStore(): Promise<RemoteStore> {
  const fx: S3Fixture = await s3Fixture();
  const holds = new Holds();
  const proxy = await startProxy(fx.store.url, (req, path) => holds.decide(req, path));
  return {
    name: "s3",
    env: {
      FENCEGATE_BACKEND: "s3",
      FENCEGATE_S3_ENDPOINT: proxy.url,
      FENCEGATE_S3_REGION: "us-east-1",
      FENCEGATE_S3_ACCESS_KEY_ID: CREDENTIALS.accessKeyId,
      FENCEGATE_S3_SECRET_ACCESS_KEY: CREDENTIALS.secretAccessKey,
      FENCEGATE_S3_FORCE_PATH_STYLE: "true",
    },
    // The commit point of an object on S3 is the conditional PUT of its record.
    holdCommit: (bucket, key) =>
      holds.arm((req, path) => req.method === "PUT" && pathOf(path) === `/${bucket}/.fencegate/r/${key}`),
    async leftovers() {
      await fx.current().collectGarbage({ graceMs: 0 });
      return fx.leftovers();
    },
    async stop() {
      await proxy.close();
      await fx.cleanup();
    },
  };
}

/** Azure: the gateway's backend is an Azure backend on Azurite, through a proxy. */
export async function azureRemoteStore(): Promise<RemoteStore> {
  const azurite = await startAzurite({ inMemory: true });
  const fx: AzureFixture = await azureFixture(azurite);
  const holds = new Holds();
  const proxy = await startProxy(azurite.url, (req, path) => holds.decide(req, path));
  const port = new URL(proxy.url).port;
  return {
    name: "azure",
    env: {
      FENCEGATE_BACKEND: "azure",
      FENCEGATE_AZURE_CONNECTION_STRING: azuriteConnectionString(Number(port)),
    },
    // The commit point of an object on Azure is the conditional Put Blob or Put Block List of the
    // blob at its own name (staged blocks, comp=block, commit nothing).
    holdCommit: (bucket, key) =>
      holds.arm((req, path) => {
        const comp = queryOf(path).get("comp");
        return (
          req.method === "PUT" &&
          pathOf(path) === `/${AZURITE_ACCOUNT}/${bucket}/${key}` &&
          (comp === null || comp === "blocklist")
        );
      }),
    async leftovers() {
      await fx.backend.multipart.sweepAbandoned();
      return fx.leftovers();
    },
    async stop() {
      await proxy.close();
      await fx.cleanup();
      await azurite.stop();
    },
  };
}

export const REMOTE_STORES: { name: string; start: () => Promise<RemoteStore> }[] = [
  { name: "s3 (a second fencegate behind a proxy)", start: s3RemoteStore },
  { name: "azure (Azurite behind a proxy)", start: azureRemoteStore },
];

/** Waits for a hold to be reached, failing with `what` after `timeoutMs`. */
export async function reached(hold: Hold, what: string, timeoutMs = 20_000): Promise<void> {
  let done = false;
  hold.reached.then(() => {
    done = true;
  });
  await waitFor(() => done || null, { what, timeoutMs });
}
