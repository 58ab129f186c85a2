import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AuthenticationError,
  FenceApiError,
  FenceClient,
  FenceConnectionError,
  InvalidRequestError,
  LeaseHeldError,
  LeaseLostError,
  LeaseNotFoundError,
} from "../../src/client/index.js";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";
import { sleep } from "../support/wait.js";
import { freePort, startFaultProxy } from "./fault-proxy.js";

checkLeaseApiResponses();

let gw: TestGateway;
const FAST_RETRY = { attempts: 4, baseDelayMs: 20, maxDelayMs: 100 };

beforeAll(async () => {
  gw = await startTestGateway({
    overrides: { leases: { minTtlMs: 500, maxTtlMs: 3_600_000, maxWaitMs: 60_000 } },
  });
});
afterAll(async () => {
  await gw?.stop();
});

const client = (endpoint = gw.url, extra: Partial<ConstructorParameters<typeof FenceClient>[0]> = {}) =>
  new FenceClient({ endpoint, ...CREDENTIALS, retry: FAST_RETRY, ...extra });

async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  throw new Error("expected the call to fail");
}

async function grantsFor(key: string): Promise<number> {
  const { records } = await client().audit({ bucket: "sdk", key, op: "LeaseAcquired", decision: "accepted" });
  return records.length;
}

describe("FenceClient: typed errors", () => {
  it("maps the JSON error codes to error classes with status, code and details", async () => {
    const fence = client();
    const held = await fence.acquire({ bucket: "sdk", key: "typed", ttlMs: 30_000 });
    const heldErr = await rejection(fence.acquire({ bucket: "sdk", key: "typed", ttlMs: 1_000 }));
    expect(heldErr).toBeInstanceOf(LeaseHeldError);
    expect(heldErr).toBeInstanceOf(FenceApiError);
    expect(heldErr).toMatchObject({ status: 409, code: "LeaseHeld", requestId: expect.any(String) });
    expect((heldErr as LeaseHeldError).heldBy).toMatchObject({ leaseId: held.leaseId, token: held.token });

    expect(await rejection(fence.show("no-such-lease"))).toBeInstanceOf(LeaseNotFoundError);
    expect(await rejection(fence.acquire({ bucket: "sdk", key: "k", ttlMs: 1 }))).toBeInstanceOf(
      InvalidRequestError,
    );
    const wrong = new FenceClient({
      endpoint: gw.url,
      accessKeyId: CREDENTIALS.accessKeyId,
      secretAccessKey: "wrong",
    });
    expect(await rejection(wrong.list())).toMatchObject({ name: "AuthenticationError", status: 403 });
    expect(await rejection(wrong.list())).toBeInstanceOf(AuthenticationError);

    const short = await fence.acquire({ bucket: "sdk", key: "lost", ttlMs: 500 });
    await sleep(700);
    const lost = await rejection(fence.renew(short.leaseId));
    expect(lost).toBeInstanceOf(LeaseLostError);
    expect(lost).toMatchObject({ status: 409, code: "LeaseLost" });
  });
});

describe("FenceClient: retries only where safe", () => {
  it("retries idempotent calls (show, renew, list) after a 503 and after a lost answer", async () => {
    const fence = client();
    const lease = await fence.acquire({ bucket: "sdk", key: "retry-idem", ttlMs: 30_000 });
    let n = 0;
    const proxy = await startFaultProxy(
      gw.url,
      () => (["503", "drop-after"][n++] as "503" | "drop-after") ?? "forward",
    );
    try {
      const via = client(proxy.url);
      expect((await via.renew(lease.leaseId, 20_000)).ttlMs).toBe(20_000);
      expect(proxy.seen.map((s) => s.action)).toEqual(["503", "drop-after", "forward"]);
      n = 0;
      expect((await via.show(lease.leaseId)).leaseId).toBe(lease.leaseId);
      n = 0;
      expect((await via.list({ bucket: "sdk" })).leases.length).toBeGreaterThan(0);
      expect(proxy.seen).toHaveLength(9);
    } finally {
      await proxy.close();
    }
  });

  it("gives up after the configured attempts", async () => {
    const proxy = await startFaultProxy(gw.url, () => "503");
    try {
      const err = await rejection(client(proxy.url).list());
      expect(err).toMatchObject({ status: 503, code: "LeaseStoreUnavailable" });
      expect(proxy.seen).toHaveLength(FAST_RETRY.attempts);
    } finally {
      await proxy.close();
    }
  });

  it("does not retry an acquire whose outcome is unknown: one request, at most one grant", async () => {
    for (const action of ["503", "drop-after"] as const) {
      const key = `acquire-${action}`;
      const proxy = await startFaultProxy(gw.url, () => action);
      try {
        const err = await rejection(client(proxy.url).acquire({ bucket: "sdk", key, ttlMs: 30_000 }));
        expect(err).toBeInstanceOf(action === "503" ? FenceApiError : FenceConnectionError);
        if (err instanceof FenceConnectionError) expect(err.notSent).toBe(false);
        expect(proxy.seen).toHaveLength(1);
      } finally {
        await proxy.close();
      }
      // The dropped answer's grant happened once (it expires on its own); the 503 did nothing.
      expect(await grantsFor(key)).toBe(action === "503" ? 0 : 1);
    }
  });

  it("retries an acquire that never reached the gateway (connection refused)", async () => {
    const port = await freePort();
    const fence = client(`http://127.0.0.1:${port}`, {
      retry: { attempts: 8, baseDelayMs: 100, maxDelayMs: 400 },
    });
    const pending = fence.acquire({ bucket: "sdk", key: "refused-then-up", ttlMs: 30_000 });
    await sleep(150);
    const proxy = await startFaultProxy(gw.url, () => "forward", port);
    try {
      const lease = await pending;
      expect(lease.key).toBe("refused-then-up");
      expect(proxy.seen).toHaveLength(1);
      expect(await grantsFor("refused-then-up")).toBe(1);
    } finally {
      await proxy.close();
    }
    // With the gateway still away, the error says so and that the request was never sent.
    const down = await rejection(
      client(`http://127.0.0.1:${await freePort()}`, { retry: { attempts: 2, baseDelayMs: 10 } }).acquire({
        bucket: "sdk",
        key: "down",
        ttlMs: 1_000,
      }),
    );
    expect(down).toBeInstanceOf(FenceConnectionError);
    expect((down as FenceConnectionError).notSent).toBe(true);
  });

  it("release retried after a lost answer counts the 404 as released", async () => {
    const fence = client();
    const lease = await fence.acquire({ bucket: "sdk", key: "release-retry", ttlMs: 30_000 });
    let n = 0;
    const proxy = await startFaultProxy(gw.url, () => (n++ === 0 ? "drop-after" : "forward"));
    try {
      await client(proxy.url).release(lease.leaseId);
      expect(proxy.seen.map((s) => `${s.method} ${s.action}`)).toEqual([
        "DELETE drop-after",
        "DELETE forward",
      ]);
    } finally {
      await proxy.close();
    }
    expect(await rejection(fence.show(lease.leaseId))).toBeInstanceOf(LeaseNotFoundError);
    // A release that finds nothing on its first attempt is still an error.
    expect(await rejection(fence.release(lease.leaseId))).toBeInstanceOf(LeaseNotFoundError);
  });
});
