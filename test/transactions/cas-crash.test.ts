import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { HeadObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createS3Backend, type S3Backend } from "../../src/backends/s3/index.js";
import { LeaseClient } from "../../src/client/lease-client.js";
import { abortTransaction } from "../../src/fence/commit-driver.js";
import { backendOptions, META, rawClient, recordName } from "../backends/s3/s3-fixture.js";
import {
  CREDENTIALS,
  type GatewayProcess,
  spawnGateway,
  type TestGateway,
  tempDir,
} from "../support/gateway.js";
import { requireTools } from "../support/tools.js";
import { waitFor } from "../support/wait.js";
import { type CasWorld, SIGNING_KEY, startCasWorld } from "./cas-support.js";
import { api, getBody, listKeys, makeBucket, openTransaction, putIn } from "./support.js";

/**
 * Transactions on the S3 backend when the gateway that runs them dies (kill -9): between the
 * staging and the commit, nothing of it is ever visible and the next holder writes its keys;
 * between the commit point and the roll-forward, every key is visible to every later read on
 * another gateway. And the garbage collector keeps the bytes of open and committed transactions'
 * staged writes, and collects those of aborted ones.
 */

requireTools("redis-server");

let world: CasWorld;
let other: TestGateway;
let raw: S3Client;
const dirs: Array<{ cleanup(): void }> = [];
const spawned: GatewayProcess[] = [];
const bucket = "tx-crash";

beforeAll(async () => {
  world = await startCasWorld();
  other = await world.replica();
  raw = rawClient(world.store);
  await makeBucket(other, bucket);
}, 60_000);

afterAll(async () => {
  for (const g of spawned) await g.kill("SIGKILL").catch(() => undefined);
  raw?.destroy();
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

async function blobExists(name: string): Promise<boolean> {
  try {
    await raw.send(new HeadObjectCommand({ Bucket: bucket, Key: name }));
    return true;
  } catch {
    return false;
  }
}

async function recordOf(key: string): Promise<Record<string, unknown>> {
  const { GetObjectCommand } = await import("@aws-sdk/client-s3");
  const got = await raw.send(new GetObjectCommand({ Bucket: bucket, Key: recordName(key) }));
  return JSON.parse(await got.Body!.transformToString()) as Record<string, unknown>;
}

describe("transactions on the S3 backend across crashes", () => {
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
    const state = await api(other, "GET", `/transactions/${tx.transactionId}`);
    expect(state.json.state).toBe("aborted");
    // Whoever resolves it, it can no longer commit.
    expect((await api(other, "POST", `/transactions/${tx.transactionId}/commit`)).status).toBe(409);
    expect((await putIn(other, next, null, bucket, "a/2", "new-2")).status).toBe(200);
    expect(await getBody(other, bucket, "a/2")).toBe("new-2");
    await other.leases.release(next.leaseId);
  }, 60_000);

  it("killed between the commit point and the roll-forward: every key visible to every later read", async () => {
    const gw = await spawnReplica({ FENCEGATE_TEST_TX_PAUSE_AFTER_COMMIT_MS: "120000" });
    const leases = leasesOf(gw.url);
    const lease = await leases.acquire({ bucket, prefix: "b/", ttlMs: 30_000 });
    const tx = await openTransaction(gw, lease.leaseId);
    for (const key of ["b/1", "b/2", "b/3"]) {
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
    // Nothing was rolled forward by the dead gateway: the records still hold the pending writes.
    expect((await recordOf("b/1")).p).toBeDefined();
    for (const key of ["b/1", "b/2", "b/3"]) expect(await getBody(other, bucket, key)).toBe(`v-${key}`);
    expect(await listKeys(other, bucket)).toEqual(expect.arrayContaining(["b/1", "b/2", "b/3"]));
    const again = await api(other, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(again.status).toBe(200);
    // Readers roll it forward in the background.
    await waitFor(async () => ((await recordOf("b/3")).p === undefined ? true : null), {
      what: "the roll-forward",
      timeoutMs: 10_000,
    });
    expect((await recordOf("b/3")).state).toBe("live");
  }, 60_000);

  it("keeps the staged bytes of open and committed transactions from the collector, collects aborted ones", async () => {
    const backend: S3Backend = createS3Backend(backendOptions(world.store.url));
    try {
      const lease = await other.leases.acquire({ bucket, prefix: "g/", ttlMs: 30_000 });
      const tx = await openTransaction(other, lease.leaseId);
      expect((await putIn(other, lease, tx.transactionId, bucket, "g/1", "staged")).status).toBe(200);
      const p = (await recordOf("g/1")).p as { live: { blob: string } };
      const blob = `${META}d/${p.live.blob}`;
      await backend.collectGarbage({ graceMs: 0, buckets: [bucket] });
      expect(await blobExists(blob)).toBe(true);
      // Aborted by its record alone (a crashed aborter): the pending write is still in the key's record.
      expect(await abortTransaction(backend.transactionLog(bucket), tx.transactionId, "Test")).toBe(
        "aborted",
      );
      expect((await recordOf("g/1")).p).toBeDefined();
      await backend.collectGarbage({ graceMs: 0, buckets: [bucket] });
      expect(await blobExists(blob)).toBe(false);
      expect((await recordOf("g/1")).p).toBeUndefined();
      expect(await getBody(other, bucket, "g/1")).toBeNull();
      await other.leases.release(lease.leaseId);
    } finally {
      await backend.close();
    }
  }, 60_000);
});
