/**
 * Delegated liveness (issue 11), with real processes: an orchestrator (owner) acquires a lease and
 * hands a delegate credential to a worker in another process. The owner's process exits; the
 * worker keeps the lease alive and writes with its token; a restarted owner process releases it
 * and the worker sees the loss. In a second run both stop and the lease expires. A delegate can
 * neither release nor delegate; delegates are listed, revocable and audited.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";
import { trackChild } from "../support/processes.js";
import { objectPath, signedRequest } from "../support/signed-http.js";
import { apiAs, apiCall } from "./lease-calls.js";

checkLeaseApiResponses();

const FIXTURE = fileURLToPath(new URL("./fixtures/lease-party.ts", import.meta.url));
let gw: TestGateway;
const api = () => apiAs(gw.url, CREDENTIALS);

beforeAll(async () => {
  gw = await startTestGateway({
    overrides: { leases: { minTtlMs: 500, maxTtlMs: 3_600_000, maxWaitMs: 60_000 } },
  });
  expect((await signedRequest(gw.url, { method: "PUT", path: "/jobs" })).status).toBe(200);
});

afterAll(async () => {
  await gw?.stop();
});

type Party = { child: ChildProcess; lines: Array<Record<string, unknown>>; exited: Promise<number | null> };

function party(...args: string[]): Party {
  const child = spawn(process.execPath, ["--import", "tsx", FIXTURE, ...args], {
    env: {
      ...process.env,
      AWS_ACCESS_KEY_ID: CREDENTIALS.accessKeyId,
      AWS_SECRET_ACCESS_KEY: CREDENTIALS.secretAccessKey,
    },
    stdio: ["pipe", "pipe", "inherit"],
  });
  trackChild(child);
  const lines: Array<Record<string, unknown>> = [];
  let buffered = "";
  child.stdout!.setEncoding("utf8");
  child.stdout!.on("data", (chunk: string) => {
    buffered += chunk;
    for (let i = buffered.indexOf("\n"); i >= 0; i = buffered.indexOf("\n")) {
      lines.push(JSON.parse(buffered.slice(0, i)));
      buffered = buffered.slice(i + 1);
    }
  });
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  return { child, lines, exited };
}

async function until(
  check: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 20_000,
): Promise<void> {
  const start = Date.now();
  while (!(await check())) {
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function ownerStart(key: string, ttlMs: number) {
  const owner = party("owner-start", gw.url, "jobs", key, String(ttlMs));
  expect(await owner.exited).toBe(0); // the owner's process is gone from here on
  const { lease, delegate, status } = owner.lines[0] as {
    lease: Record<string, string>;
    delegate: Record<string, string>;
    status: number;
  };
  expect(status).toBe(201);
  expect(delegate.accessKeyId).toEqual(expect.any(String));
  expect(delegate.secretAccessKey).toEqual(expect.any(String));
  return { lease, delegate };
}

describe("a delegate keeps the lease alive for its owner", () => {
  it("owner's process exits; the worker renews and writes; a restarted owner releases; the worker sees the loss", async () => {
    // Long enough for the worker's process to start; from then on the worker renews to 1 s.
    const { lease, delegate } = await ownerStart("report.csv", 10_000);
    const ttlMs = 1_000;
    const worker = party("delegate", gw.url, JSON.stringify(lease), JSON.stringify(delegate), String(ttlMs));
    // Refused to the delegate: releasing and delegating further.
    await until(() => worker.lines.length >= 2, "the delegate's first answers");
    expect(worker.lines[0]).toEqual({ release: 403 });
    expect(worker.lines[1]).toEqual({ delegate: 403 });

    // Three TTLs with nobody but the worker renewing: the lease lives, the writes go through.
    await until(() => worker.lines.some((l) => "renewed" in l), "the worker's first renewal");
    await new Promise((r) => setTimeout(r, 3 * ttlMs));
    const shown = await api().get(lease.leaseId!);
    expect(shown.body.state).toBe("active");
    const renewals = worker.lines.filter((l) => "renewed" in l);
    expect(renewals.length).toBeGreaterThanOrEqual(5);
    expect(renewals.every((l) => l.write === 200)).toBe(true);
    const object = await signedRequest(gw.url, { method: "GET", path: objectPath("jobs", "report.csv") });
    expect(object.text).toMatch(/^delegate write \d+$/);

    // Listed, and every delegate event in the audit log.
    const listed = await api().list({ bucket: "jobs", prefix: "report.csv" });
    expect(listed.body.leases).toHaveLength(1);
    const delegates = await apiCall(gw.url, CREDENTIALS, "GET", `/leases/${lease.leaseId}/delegates`);
    expect(delegates.body.delegates).toEqual([
      expect.objectContaining({ accessKeyId: delegate.accessKeyId, leaseId: lease.leaseId }),
    ]);
    expect(JSON.stringify(delegates.body)).not.toContain(delegate.secretAccessKey!);

    // A new owner process (the orchestrator restarted) releases; the worker learns it at its next renewal.
    const restarted = party("owner-release", gw.url, lease.leaseId!);
    expect(await restarted.exited).toBe(0);
    expect(restarted.lines[0]).toEqual({ released: 204 });
    await until(() => worker.lines.some((l) => "lost" in l), "the worker to see the loss");
    expect(worker.lines.find((l) => "lost" in l)).toEqual({ lost: 409, code: "LeaseLost" });
    expect(await worker.exited).toBe(0);

    const records = (await api().audit({ leaseId: lease.leaseId!, limit: "1000" })).body.records as Array<
      Record<string, unknown>
    >;
    const ops = records.map((r) => `${r.op}:${r.decision}:${r.principal}`);
    expect(ops).toContain(`LeaseDelegateAdded:accepted:${CREDENTIALS.accessKeyId}`);
    expect(ops).toContain(`LeaseReleased:rejected:${delegate.accessKeyId}`);
    expect(ops).toContain(`LeaseDelegateAdded:rejected:${delegate.accessKeyId}`);
    expect(ops).toContain(`LeaseRenewed:accepted:${delegate.accessKeyId}`);
    expect(ops).toContain(`LeaseReleased:accepted:${CREDENTIALS.accessKeyId}`);
  });

  it("when both stop renewing, the lease expires and the worker's token is refused", async () => {
    const { lease, delegate } = await ownerStart("second-run.csv", 10_000);
    const worker = party("delegate", gw.url, JSON.stringify(lease), JSON.stringify(delegate), "800");
    await until(() => worker.lines.some((l) => "renewed" in l), "the worker's first renewal");
    worker.child.stdin!.end(); // the worker stops too
    expect(await worker.exited).toBe(0);
    await until(
      async () => (await api().get(lease.leaseId!)).body.state === "expired",
      "the lease to expire",
      10_000,
    );
    const late = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath("jobs", "second-run.csv"),
      headers: { "x-fence-token": lease.fencingToken! },
      body: "too late",
      credentials: { accessKeyId: delegate.accessKeyId!, secretAccessKey: delegate.secretAccessKey! },
    });
    expect(late.status).toBe(409);
    expect(late.text).toMatch(/LeaseExpired/);
  });

  it("a revoked delegate can no longer renew or write", async () => {
    const lease = (await api().acquire({ bucket: "jobs", key: "revoked.csv", ttlMs: 30_000 })).body;
    const added = await apiCall(gw.url, CREDENTIALS, "POST", `/leases/${lease.leaseId}/delegates`);
    expect(added.status).toBe(201);
    const me = { accessKeyId: added.body.accessKeyId, secretAccessKey: added.body.secretAccessKey };
    const renewed = await apiCall(gw.url, me, "POST", `/leases/${lease.leaseId}/renew`, {});
    expect(renewed.status).toBe(200);
    expect(renewed.body.fencingToken).toBe(lease.fencingToken);
    // Beside its lease, the delegate may not write at all.
    const beside = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath("jobs", "other.csv"),
      headers: { "x-fence-token": lease.fencingToken },
      body: "x",
      credentials: me,
    });
    expect(beside.status).toBe(403);
    const removed = await apiCall(
      gw.url,
      CREDENTIALS,
      "DELETE",
      `/leases/${lease.leaseId}/delegates/${me.accessKeyId}`,
    );
    expect(removed.status).toBe(204);
    expect((await apiCall(gw.url, me, "POST", `/leases/${lease.leaseId}/renew`, {})).status).toBe(403);
    const listed = await apiCall(gw.url, CREDENTIALS, "GET", `/leases/${lease.leaseId}/delegates`);
    expect(listed.body.delegates).toEqual([]);
    const records = (await api().audit({ leaseId: lease.leaseId, op: "LeaseDelegateRemoved", limit: "10" }))
      .body.records;
    expect(records).toHaveLength(1);
  });
});
