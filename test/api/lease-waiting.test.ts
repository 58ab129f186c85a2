/**
 * Fair waiting through a real gateway: a waiter whose client hangs up leaves the queue at once
 * (the request's abort signal), the listing shows each resource's queue length, and waiters are
 * granted in arrival order.
 */
import { request as httpRequest } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";
import { signRequest } from "../support/signed-http.js";
import { apiAs } from "./lease-calls.js";

checkLeaseApiResponses();

let gw: TestGateway;
const api = () => apiAs(gw.url, CREDENTIALS);

beforeAll(async () => {
  gw = await startTestGateway();
});

afterAll(async () => {
  await gw?.stop();
});

/** Starts a waiting acquire and returns a way to hang up on it. */
async function startWaiting(body: Record<string, unknown>): Promise<{ hangUp(): void }> {
  const signed = await signRequest(gw.url, {
    method: "POST",
    path: "/_fence/v1/leases",
    body: JSON.stringify(body),
    headers: { "content-type": "application/json" },
  });
  const url = new URL(gw.url);
  const req = httpRequest({
    host: url.hostname,
    port: Number(url.port),
    method: "POST",
    path: signed.path,
    headers: signed.headers,
    agent: false,
  });
  req.on("error", () => {});
  req.end(signed.body);
  return { hangUp: () => req.destroy() };
}

async function queueLength(key: string): Promise<number> {
  const leases = (await api().list({ bucket: "waiting", prefix: key })).body.leases;
  return leases[0]?.waiters ?? -1;
}

async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  const start = Date.now();
  while (!(await check())) {
    if (Date.now() - start > 10_000) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe("waiting for a lease over HTTP", () => {
  it("a client that hangs up leaves the queue at once and is never granted", async () => {
    const holder = await api().acquire({ bucket: "waiting", key: "k", ttlMs: 60_000 });
    const gone = await startWaiting({
      bucket: "waiting",
      key: "k",
      ttlMs: 60_000,
      waitMs: 30_000,
      owner: "gone",
    });
    await until(async () => (await queueLength("k")) === 1, "the waiter in the queue");
    const next = api().acquire({ bucket: "waiting", key: "k", ttlMs: 60_000, waitMs: 30_000, owner: "next" });
    await until(async () => (await queueLength("k")) === 2, "two waiters");
    gone.hangUp();
    await until(async () => (await queueLength("k")) === 1, "the hung-up waiter to leave");
    expect((await api().release(holder.body.leaseId)).status).toBe(204);
    const granted = await next;
    expect(granted.status).toBe(201);
    expect(granted.body.owner).toBe("next");
    const records = (await api().audit({ bucket: "waiting", key: "k", op: "LeaseAcquired", limit: "100" }))
      .body.records as Array<Record<string, unknown>>;
    expect(records.filter((r) => r.owner === "gone")).toEqual([]);
  });

  it("serves waiters in arrival order", async () => {
    const holder = await api().acquire({ bucket: "waiting", key: "order", ttlMs: 60_000 });
    const answers: Array<Promise<{ status: number; body: { owner: string; leaseId: string } }>> = [];
    for (let i = 0; i < 5; i++) {
      answers.push(
        api().acquire({ bucket: "waiting", key: "order", ttlMs: 60_000, waitMs: 30_000, owner: `w${i}` }),
      );
      await until(async () => (await queueLength("order")) === i + 1, `waiter ${i} in the queue`);
    }
    const served: string[] = [];
    let current = holder.body.leaseId as string;
    for (let i = 0; i < 5; i++) {
      expect((await api().release(current)).status).toBe(204);
      const granted = await answers[i]!;
      served.push(granted.body.owner);
      current = granted.body.leaseId;
    }
    expect(served).toEqual(["w0", "w1", "w2", "w3", "w4"]);
  });
});
