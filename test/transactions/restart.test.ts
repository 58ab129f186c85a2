import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { FenceClient } from "../../src/client/fence-client.js";
import { LeaseClient } from "../../src/client/lease-client.js";
import { CREDENTIALS, type GatewayProcess, spawnGateway, tempDir } from "../support/gateway.js";
import { api, filesUnder, getBody, makeBucket, openTransaction, putIn } from "./support.js";

/**
 * A gateway killed (kill -9) between staging and commit: nothing of the transaction ever becomes
 * visible, its staged bytes are removed when the backend opens again, the transaction is unknown
 * to the restarted gateway, and the keys are writable by the lease's holder at once. A gateway
 * shut down (SIGTERM) aborts its open transactions the same way, with a record saying so.
 */

const sandbox = tempDir("fencegate-tx-restart-");
const dataDir = join(sandbox.path, "data");
let gw: GatewayProcess | undefined;

afterAll(async () => {
  await gw?.kill();
  sandbox.cleanup();
});

const blobs = () => filesUnder(join(dataDir, "blobs"));

describe("a gateway that stops between staging and commit", () => {
  it("kill -9: nothing becomes visible, the staged bytes are collected at the next start", async () => {
    gw = await spawnGateway(dataDir);
    await makeBucket(gw, "restart");
    const leases = new LeaseClient({ endpoint: gw.url, ...CREDENTIALS });
    const lease = await leases.acquire({ bucket: "restart", prefix: "out/", ttlMs: 60_000 });
    const before = blobs();
    const tx = await openTransaction(gw, lease.leaseId);
    expect((await putIn(gw, lease, tx.transactionId, "restart", "out/big", "x".repeat(300_000))).status).toBe(
      200,
    );
    expect((await putIn(gw, lease, tx.transactionId, "restart", "out/small", "small")).status).toBe(200);
    expect(blobs().length).toBe(before.length + 1);
    await gw.kill("SIGKILL");

    gw = await spawnGateway(dataDir);
    expect(blobs()).toEqual(before);
    expect(await getBody(gw, "restart", "out/big")).toBeNull();
    expect(await getBody(gw, "restart", "out/small")).toBeNull();
    const state = await api(gw, "GET", `/transactions/${tx.transactionId}`);
    expect(state.status).toBe(404);
    // The lease outlived the gateway: its holder writes the keys at once, outside any transaction.
    expect((await putIn(gw, lease, null, "restart", "out/small", "after")).status).toBe(200);
    expect(await getBody(gw, "restart", "out/small")).toBe("after");
  });

  it("SIGTERM: open transactions are aborted (GatewayShutdown) and their bytes removed", async () => {
    const leases = new LeaseClient({ endpoint: gw!.url, ...CREDENTIALS });
    const lease = await leases.acquire({ bucket: "restart", prefix: "term/", ttlMs: 60_000 });
    const before = blobs();
    const tx = await openTransaction(gw!, lease.leaseId);
    expect((await putIn(gw!, lease, tx.transactionId, "restart", "term/a", "y".repeat(300_000))).status).toBe(
      200,
    );
    await gw!.kill("SIGTERM");
    expect(blobs()).toEqual(before);
    gw = await spawnGateway(dataDir);
    const records = await new FenceClient({ endpoint: gw.url, ...CREDENTIALS }).audit({
      leaseId: lease.leaseId,
    });
    const end = records.records.find((r) => r.op === "TransactionAborted");
    expect(end).toMatchObject({
      reason: "GatewayShutdown",
      transactionId: tx.transactionId,
      keys: ["term/a"],
    });
    expect(await getBody(gw, "restart", "term/a")).toBeNull();
  });
});
