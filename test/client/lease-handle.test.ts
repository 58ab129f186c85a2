import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FenceClient, type Lease, LeaseLostError, LeaseNotFoundError } from "../../src/client/index.js";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";
import { sleep } from "../support/wait.js";
import { startFaultProxy } from "./fault-proxy.js";

checkLeaseApiResponses();

let gw: TestGateway;
let fence: FenceClient;

beforeAll(async () => {
  gw = await startTestGateway({
    overrides: { leases: { minTtlMs: 500, maxTtlMs: 3_600_000, maxWaitMs: 60_000 } },
  });
  fence = new FenceClient({ endpoint: gw.url, ...CREDENTIALS, retry: { attempts: 3, baseDelayMs: 20 } });
});
afterAll(async () => {
  await gw?.stop();
});

/** Resolves when the signal fires, with the time it took; rejects after `ms`. */
function aborted(signal: AbortSignal, ms: number): Promise<number> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`the signal did not fire within ${ms} ms`)), ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(t);
        resolve(Date.now() - started);
      },
      { once: true },
    );
  });
}

async function renewals(leaseId: string): Promise<string[]> {
  const { records } = await fence.audit({ leaseId, op: "LeaseRenewed", limit: 1000 });
  return records.map((r) => r.time);
}

describe("Lease handle", () => {
  it("renews in the background before expiry, with jitter, and keeps the token", async () => {
    const lease = await fence.lease({ bucket: "handle", key: "kept", ttlMs: 2_000 });
    await sleep(5_000);
    expect(lease.state, String(lease.signal.reason)).toBe("held");
    const shown = await fence.show(lease.leaseId);
    expect(shown).toMatchObject({ state: "active", token: lease.token });
    const times = (await renewals(lease.leaseId)).map((t) => Date.parse(t));
    expect(times.length).toBeGreaterThanOrEqual(4);
    const gaps = times.slice(1).map((t, i) => t - times[i]!);
    // Renewals come a third to a half of the TTL apart (plus scheduling slack), not in step.
    for (const g of gaps) expect(g).toBeGreaterThanOrEqual(650);
    for (const g of gaps) expect(g).toBeLessThan(2_000);
    expect(Math.max(...gaps) - Math.min(...gaps)).toBeGreaterThan(5);
    await lease.release();
    expect(lease.state).toBe("released");
    await expect(fence.show(lease.leaseId)).rejects.toBeInstanceOf(LeaseNotFoundError);
  });

  it("fires its signal when a renewal is refused because the lease was released by someone else", async () => {
    const lost: LeaseLostError[] = [];
    const lease = await fence.lease({
      bucket: "handle",
      key: "taken",
      ttlMs: 1_500,
      onLost: (e) => lost.push(e),
    });
    const fired = aborted(lease.signal, 3_000);
    await fence.release(lease.leaseId); // an administrator (or the same key) releases it
    expect(await fired).toBeLessThan(1_500);
    expect(lease.state).toBe("lost");
    expect(lease.signal.reason).toBeInstanceOf(LeaseLostError);
    // The gateway refuses the renewal of a released lease (LeaseLost, or LeaseNotFound once it is gone).
    expect(["LeaseLost", "LeaseNotFound"]).toContain((lease.signal.reason as LeaseLostError).code);
    expect(lost).toEqual([lease.signal.reason]);
    expect(() => lease.throwIfLost()).toThrow(LeaseLostError);
    await lease.release(); // nothing left to release: no error
  });

  it("fires its signal before the gateway lets anyone else take the lease when renewals cannot get through", async () => {
    // Every renewal through this proxy fails with 503; the grant itself goes through.
    const proxy = await startFaultProxy(gw.url, (req) => (req.url?.endsWith("/renew") ? "503" : "forward"));
    try {
      const via = new FenceClient({ endpoint: proxy.url, ...CREDENTIALS, retry: { attempts: 1 } });
      const lease = await via.lease({ bucket: "handle", key: "cut-off", ttlMs: 1_000 });
      let firedAt = 0;
      lease.signal.addEventListener("abort", () => {
        firedAt = Date.now();
      });
      const next = await fence.acquire({ bucket: "handle", key: "cut-off", ttlMs: 5_000, waitMs: 5_000 });
      const grantedAt = Date.now();
      expect(next.token).toBeGreaterThan(lease.token);
      expect(firedAt).toBeGreaterThan(0);
      expect(firedAt).toBeLessThanOrEqual(grantedAt);
      expect(lease.signal.reason).toMatchObject({ code: "LeaseExpired", status: 0 });
      expect(proxy.seen.filter((s) => s.path.endsWith("/renew")).length).toBeGreaterThanOrEqual(2);
      await fence.release(next.leaseId);
    } finally {
      await proxy.close();
    }
  });

  it("is released by `await using` at the end of the block", async () => {
    let leaseId = "";
    {
      await using lease = await fence.lease({ bucket: "handle", key: "scoped", ttlMs: 5_000 });
      leaseId = lease.leaseId;
      expect((await fence.show(leaseId)).state).toBe("active");
    }
    await expect(fence.show(leaseId)).rejects.toBeInstanceOf(LeaseNotFoundError);
  });
});

describe("FenceClient.attach()", () => {
  it("takes over renewing a lease another handle stopped renewing, and releases it or not", async () => {
    const first = await fence.lease({ bucket: "handle", key: "handed-over", ttlMs: 1_000 });
    first.detach(); // the first process stops renewing without releasing
    const second = new FenceClient({ endpoint: gw.url, ...CREDENTIALS });
    const attached = await second.attach(first.leaseId, { releases: false });
    expect(attached.token).toBe(first.token);
    expect(attached.fencingToken).toBe(first.fencingToken);
    await sleep(2_500); // more than two TTLs: alive only through the attached handle's renewals
    expect(attached.state, String(attached.signal.reason)).toBe("held");
    expect((await fence.show(first.leaseId)).state).toBe("active");
    await attached.release(); // releases: false — it only stops renewing
    expect((await fence.show(first.leaseId)).state).toBe("active");
    const owner = await fence.attach(first.leaseId);
    await owner.release();
    await expect(fence.show(first.leaseId)).rejects.toBeInstanceOf(LeaseNotFoundError);
    const late = await fence.attach(first.leaseId).catch((e: unknown) => e);
    expect(["LeaseLost", "LeaseNotFound"]).toContain((late as LeaseLostError).code);
  });
});

describe("FenceClient.using()", () => {
  it("acquires, renews, returns fn's result and releases", async () => {
    let seen: Lease | undefined;
    const result = await fence.using({ bucket: "handle", key: "work", ttlMs: 600 }, async (lease) => {
      seen = lease;
      await sleep(1_500); // longer than the TTL: only renewals keep it
      expect(lease.signal.aborted).toBe(false);
      return "done";
    });
    expect(result).toBe("done");
    expect(seen?.state).toBe("released");
    await expect(fence.show(seen!.leaseId)).rejects.toBeInstanceOf(LeaseNotFoundError);
  });

  it("aborts the work and rejects with LeaseLostError when a renewal is refused (lease released by an admin)", async () => {
    let workAborted = false;
    let granted!: (leaseId: string) => void;
    const leaseId = new Promise<string>((resolve) => {
      granted = resolve;
    });
    const started = Date.now();
    const outcome = fence.using({ bucket: "handle", key: "refused", ttlMs: 1_500 }, async (lease) => {
      granted(lease.leaseId);
      // The work honours the signal; it would otherwise run for 20 s.
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, 20_000);
        lease.signal.addEventListener("abort", () => {
          workAborted = true;
          clearTimeout(t);
          resolve();
        });
      });
      return "finished";
    });
    // Released by someone else once the work has started (a busy machine may take a while to grant).
    await fence.release(await leaseId);
    const err = await outcome.then(
      () => new Error("using() resolved"),
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(LeaseLostError);
    expect(workAborted).toBe(true);
    expect(Date.now() - started).toBeLessThan(1_500);
  });

  it("rejects at once when the lease is lost even if fn ignores the signal (superseded after expiry)", async () => {
    const proxy = await startFaultProxy(gw.url, (req) => (req.url?.endsWith("/renew") ? "503" : "forward"));
    try {
      const via = new FenceClient({ endpoint: proxy.url, ...CREDENTIALS, retry: { attempts: 1 } });
      const started = Date.now();
      const err = await via
        .using({ bucket: "handle", key: "ignored", ttlMs: 800 }, () => sleep(10_000).then(() => "late"))
        .then(
          () => new Error("using() resolved"),
          (e: unknown) => e,
        );
      expect(err).toBeInstanceOf(LeaseLostError);
      expect(Date.now() - started).toBeLessThan(2_000);
      // Someone else gets it; the old holder's renewal is refused by the gateway too.
      const next = await fence.acquire({ bucket: "handle", key: "ignored", ttlMs: 5_000, waitMs: 2_000 });
      expect(next.key).toBe("ignored");
      await fence.release(next.leaseId);
    } finally {
      await proxy.close();
    }
  });

  it("releases the lease when fn throws, and rethrows fn's error", async () => {
    let leaseId = "";
    await expect(
      fence.using({ bucket: "handle", key: "throws", ttlMs: 5_000 }, async (lease) => {
        leaseId = lease.leaseId;
        throw new Error("work failed");
      }),
    ).rejects.toThrow("work failed");
    await expect(fence.show(leaseId)).rejects.toBeInstanceOf(LeaseNotFoundError);
  });
});
