import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AzureBackend, createAzureBackend } from "../../src/backends/azure/index.js";
import { LeaseClient } from "../../src/client/lease-client.js";
import { runCommit } from "../../src/fence/commit-driver.js";
import { startHttpFaultProxy } from "../support/fault-proxy.js";
import {
  CREDENTIALS,
  type GatewayProcess,
  spawnGateway,
  type TestGateway,
  tempDir,
} from "../support/gateway.js";
import { objectPath, signedRequest } from "../support/signed-http.js";
import { requireTools } from "../support/tools.js";
import { waitFor } from "../support/wait.js";
import { type AzureCasWorld, blobExists, blobState, startAzureCasWorld } from "./cas-azure-support.js";
import { SIGNING_KEY } from "./cas-support.js";
import { api, getBody, listKeys, makeBucket, openTransaction, putIn } from "./support.js";

/**
 * Transactions on the Azure backend when the gateway that runs them dies (kill -9): between the
 * staging and the commit, nothing of it is ever visible and the next holder writes its keys;
 * between the commit point and the roll-forward, every key is visible to every later read on
 * another gateway, which rolls it forward. And a roll-forward that lost its race to another
 * writer never lands over that writer's version (its copy is conditional on the state it read).
 */

requireTools("redis-server");

let world: AzureCasWorld;
let other: TestGateway;
const dirs: Array<{ cleanup(): void }> = [];
const spawned: GatewayProcess[] = [];
const bucket = "tx-azure-crash";

beforeAll(async () => {
  world = await startAzureCasWorld();
  other = await world.replica();
  await makeBucket(other, bucket);
}, 60_000);

afterAll(async () => {
  for (const g of spawned) await g.kill("SIGKILL").catch(() => undefined);
  await world?.stop();
  for (const d of dirs) d.cleanup();
});

async function spawnReplica(env: Record<string, string> = {}): Promise<GatewayProcess> {
  const dir = tempDir();
  dirs.push(dir);
  const config = join(dir.path, "gateway.yaml");
  writeFileSync(config, world.yaml());
  const gw = await spawnGateway(join(dir.path), {
    FENCEGATE_CONFIG: config,
    FENCEGATE_TOKEN_SIGNING_KEY: SIGNING_KEY,
    ...env,
  });
  spawned.push(gw);
  return gw;
}

const leasesOf = (url: string) => new LeaseClient({ endpoint: url, ...CREDENTIALS });
const state = (key: string) => blobState(world.direct, bucket, key);

/** A gateway killed after the commit point of a transaction that staged `keys`, before any roll-forward. */
async function committedByTheDead(prefix: string, keys: string[]) {
  const gw = await spawnReplica({ FENCEGATE_TEST_TX_PAUSE_AFTER_COMMIT_MS: "120000" });
  const leases = leasesOf(gw.url);
  const lease = await leases.acquire({ bucket, prefix, ttlMs: 30_000 });
  const tx = await openTransaction(gw, lease.leaseId);
  for (const key of keys) {
    expect((await putIn(gw, lease, tx.transactionId, bucket, key, `v-${key}`)).status).toBe(200);
  }
  const commit = api(gw, "POST", `/transactions/${tx.transactionId}/commit`).catch(() => null);
  await waitFor(
    async () =>
      (await api(other, "GET", `/transactions/${tx.transactionId}`)).json.state === "committed" || null,
    { what: "the commit point", timeoutMs: 20_000 },
  );
  await gw.kill("SIGKILL");
  await commit;
  return { lease, tx };
}

describe("transactions on the Azure backend across crashes", () => {
  it("killed between staging and commit: never visible, the keys writable by the next holder", async () => {
    const gw = await spawnReplica();
    const leases = leasesOf(gw.url);
    const lease = await leases.acquire({ bucket, prefix: "a/", ttlMs: 2_000 });
    const tx = await openTransaction(gw, lease.leaseId);
    expect((await putIn(gw, lease, tx.transactionId, bucket, "a/1", "old-1")).status).toBe(200);
    expect((await putIn(gw, lease, tx.transactionId, bucket, "a/2", "old-2")).status).toBe(200);
    await gw.kill("SIGKILL");
    expect(await getBody(other, bucket, "a/1")).toBeNull();
    expect(await listKeys(other, bucket)).toEqual([]);
    const next = await other.leases.acquire({ bucket, prefix: "a/", ttlMs: 30_000, waitMs: 10_000 });
    expect((await putIn(other, next, null, bucket, "a/1", "new-1")).status).toBe(200);
    expect(await getBody(other, bucket, "a/1")).toBe("new-1");
    expect(await getBody(other, bucket, "a/2")).toBeNull();
    expect((await api(other, "GET", `/transactions/${tx.transactionId}`)).json.state).toBe("aborted");
    expect((await api(other, "POST", `/transactions/${tx.transactionId}/commit`)).status).toBe(409);
    expect((await putIn(other, next, null, bucket, "a/2", "new-2")).status).toBe(200);
    expect(await getBody(other, bucket, "a/2")).toBe("new-2");
    await other.leases.release(next.leaseId);
  }, 60_000);

  it("killed between the commit point and the roll-forward: every key visible to every later read", async () => {
    const keys = ["b/1", "b/2", "b/3"];
    const { tx } = await committedByTheDead("b/", keys);
    // Nothing was rolled forward by the dead gateway: the blobs still hold the pending writes.
    for (const key of keys) expect((await state(key))?.p).toBeDefined();
    // A range and a HEAD see the committed version too, served from its staging blob.
    const ranged = await signedRequest(other.url, {
      method: "GET",
      path: objectPath(bucket, "b/2"),
      headers: { range: "bytes=2-4" },
    });
    expect(ranged.status, ranged.text).toBe(206);
    expect(ranged.text).toBe("b/2");
    const head = await signedRequest(other.url, { method: "HEAD", path: objectPath(bucket, "b/3") });
    expect(head.status).toBe(200);
    expect(head.headers["content-length"]).toBe("5");
    for (const key of keys) expect(await getBody(other, bucket, key)).toBe(`v-${key}`);
    expect(await listKeys(other, bucket)).toEqual(expect.arrayContaining(keys));
    const again = await api(other, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(again.status).toBe(200);
    // Readers roll it forward in the background.
    await waitFor(async () => ((await state("b/3"))?.p === undefined ? true : null), {
      what: "the roll-forward",
      timeoutMs: 10_000,
    });
    expect((await state("b/3"))?.etag).toBeDefined();
    expect(await getBody(other, bucket, "b/3")).toBe("v-b/3");
  }, 60_000);

  it("the collector never removes the staged bytes of a committed transaction before they are rolled forward", async () => {
    const { tx } = await committedByTheDead("k/", ["k/1", "k/2"]);
    const staged = ((await state("k/1"))?.p as { b: string } | undefined)?.b ?? "";
    const collector = createAzureBackend({
      connectionString: world.azurite.connectionString,
      multipartSweepIntervalMs: 0,
    });
    try {
      expect(await blobExists(world.direct, bucket, staged)).toBe(true);
      await collector.collectStaging({ graceMs: 0, buckets: [bucket] });
      // Rolled forward first (the bytes copied onto the objects' blobs), then removed.
      expect(await blobExists(world.direct, bucket, staged)).toBe(false);
      expect((await state("k/1"))?.p).toBeUndefined();
      expect(await getBody(other, bucket, "k/1")).toBe("v-k/1");
      expect(await getBody(other, bucket, "k/2")).toBe("v-k/2");
      expect((await api(other, "GET", `/transactions/${tx.transactionId}`)).json.state).toBe("committed");
    } finally {
      await collector.close();
    }
  }, 60_000);

  it("a roll-forward that lost its race never lands over the next writer's version", async () => {
    const { lease } = await committedByTheDead("r/", ["r/1"]);
    // The next holder's gateway cannot remove staging blobs: the staged bytes stay after its roll-forward.
    const proxy = await startHttpFaultProxy(`http://127.0.0.1:${world.azurite.port}`);
    const writer = await world.replica(Number(new URL(proxy.url).port));
    proxy.on(
      { method: "DELETE", path: /\/\.fencegate\/tx\// },
      { kind: "reset" },
      { times: Number.POSITIVE_INFINITY },
    );
    // A slow roll-forward: it read the pending write, decided, and pauses before its copy.
    let reached!: () => void;
    const paused = new Promise<void>((resolve) => {
      reached = resolve;
    });
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const slow: AzureBackend = createAzureBackend({
      connectionString: world.azurite.connectionString,
      multipartSweepIntervalMs: 0,
      hooks: async (step, at) => {
        if (step === "before-commit" && at.key === "r/1") {
          reached();
          await held;
        }
      },
    });
    try {
      const rolling = runCommit(slow.port, { bucket, key: "r/1" }, { op: "settle" });
      await paused;
      await other.leases.release(lease.leaseId).catch(() => undefined);
      const next = await writer.leases.acquire({ bucket, prefix: "r/", ttlMs: 30_000, waitMs: 10_000 });
      expect((await putIn(writer, next, null, bucket, "r/1", "newer")).status).toBe(200);
      const staged = ((await state("r/1"))?.p as { b?: string } | undefined)?.b;
      expect(staged).toBeUndefined();
      release();
      await rolling;
      expect(await getBody(other, bucket, "r/1")).toBe("newer");
      expect((await state("r/1"))?.hct).toBe(next.token);
      await writer.leases.release(next.leaseId);
    } finally {
      release();
      await slow.close();
      await proxy.close();
    }
  }, 60_000);

  it("a commit whose answer is lost and whose gateway dies: a later reader and writer finish it", async () => {
    const proxy = await startHttpFaultProxy(`http://127.0.0.1:${world.azurite.port}`);
    const dir = tempDir();
    dirs.push(dir);
    const config = join(dir.path, "gateway.yaml");
    writeFileSync(config, world.yaml(Number(new URL(proxy.url).port)));
    const gw = await spawnGateway(dir.path, {
      FENCEGATE_CONFIG: config,
      FENCEGATE_TOKEN_SIGNING_KEY: SIGNING_KEY,
    });
    spawned.push(gw);
    try {
      const lease = await leasesOf(gw.url).acquire({ bucket, prefix: "l/", ttlMs: 30_000 });
      const tx = await openTransaction(gw, lease.leaseId);
      expect((await putIn(gw, lease, tx.transactionId, bucket, "l/1", "one")).status).toBe(200);
      expect((await putIn(gw, lease, tx.transactionId, bucket, "l/2", "two")).status).toBe(200);
      // The commit point is held on its way to the store; the gateway dies; then it lands.
      const point = proxy.on({ method: "PUT", path: /\/\.fencegate\/t\// }, { kind: "hold" });
      const commit = api(gw, "POST", `/transactions/${tx.transactionId}/commit`).catch(() => null);
      await point.reached;
      await gw.kill("SIGKILL");
      await commit;
      point.release();
      await waitFor(
        async () =>
          (await api(other, "GET", `/transactions/${tx.transactionId}`)).json.state === "committed" || null,
        { what: "the held commit point", timeoutMs: 10_000 },
      );
      // Both keys at once for every later read, then the next holder writes over them.
      expect(await getBody(other, bucket, "l/2")).toBe("two");
      expect(await getBody(other, bucket, "l/1")).toBe("one");
      await other.leases.release(lease.leaseId).catch(() => undefined);
      const next = await other.leases.acquire({ bucket, prefix: "l/", ttlMs: 30_000, waitMs: 10_000 });
      expect((await putIn(other, next, null, bucket, "l/1", "three")).status).toBe(200);
      expect(await getBody(other, bucket, "l/1")).toBe("three");
      expect(await getBody(other, bucket, "l/2")).toBe("two");
      expect(await blobExists(world.direct, bucket, "l/2")).toBe(true);
      await other.leases.release(next.leaseId);
    } finally {
      await proxy.close();
    }
  }, 60_000);
});
