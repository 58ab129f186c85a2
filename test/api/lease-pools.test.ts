/**
 * Ownership groups (issue 11): a pool of 64 groups over `tiles/` in bucket `maps`. Four workers
 * join one by one, then one leaves; after each change the workers' claims (their heartbeats)
 * settle on shares within one group of the fair share, no group ever has two owners, every write
 * goes through with its group's token, and a write with another group's token is refused.
 * Ordinary leases that would share keys with the groups are refused with a clear error.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { groupOf } from "../../src/leases/lease-rules.js";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";
import { objectPath, signedRequest } from "../support/signed-http.js";
import { apiAs, apiCall } from "./lease-calls.js";

checkLeaseApiResponses();

const GROUPS = 64;
let gw: TestGateway;
const api = () => apiAs(gw.url, CREDENTIALS);

type Claim = {
  target: number;
  fairShare: number;
  groups: Array<{ group: number; lease: { leaseId: string; fencingToken: string; owner: string } }>;
};

beforeAll(async () => {
  gw = await startTestGateway({
    overrides: { pools: { tiles: { bucket: "maps", prefix: "tiles/", groups: GROUPS } } },
  });
  expect((await signedRequest(gw.url, { method: "PUT", path: "/maps" })).status).toBe(200);
});

afterAll(async () => {
  await gw?.stop();
});

async function claim(owner: string): Promise<Claim> {
  const res = await apiCall(gw.url, CREDENTIALS, "POST", "/pools/tiles/claims", { owner, ttlMs: 60_000 });
  expect(res.status).toBe(200);
  return res.body;
}

/** Every active group lease, checked for a single owner per group. */
async function owners(): Promise<Map<number, string>> {
  const leases = (await api().list({ bucket: "maps", prefix: "tiles/" })).body.leases as Array<{
    key: string;
    owner: string;
  }>;
  const byGroup = new Map<number, string>();
  for (const l of leases) {
    const group = Number(/group:(\d+)\//.exec(l.key)![1]);
    expect(byGroup.has(group), `group ${group} has two owners`).toBe(false);
    byGroup.set(group, l.owner);
  }
  return byGroup;
}

/** Heartbeats in rounds until nothing changes; checks single ownership after every claim. */
async function settle(workers: string[]): Promise<Map<string, Claim>> {
  let last = "";
  const claims = new Map<string, Claim>();
  for (let round = 0; round < 10; round++) {
    for (const w of workers) {
      claims.set(w, await claim(w));
      await owners();
    }
    const now = JSON.stringify([...(await owners()).entries()].sort((a, b) => a[0] - b[0]));
    if (now === last) return claims;
    last = now;
  }
  throw new Error("the pool did not settle in 10 rounds");
}

function expectFair(claims: Map<string, Claim>, workers: string[], held: Map<number, string>): void {
  const fair = GROUPS / workers.length;
  let total = 0;
  for (const w of workers) {
    const share = [...held.values()].filter((o) => o === w).length;
    expect(Math.abs(share - fair), `${w} holds ${share}, fair share ${fair}`).toBeLessThan(1);
    expect(claims.get(w)!.groups.length).toBe(share);
    total += share;
  }
  expect(total).toBe(GROUPS);
}

/** A key of the pool in the given group. */
function keyIn(group: number): string {
  for (let i = 0; ; i++) {
    const key = `tiles/${i}.png`;
    if (groupOf(key, GROUPS) === group) return key;
  }
}

function put(key: string, fencingToken: string) {
  return signedRequest(gw.url, {
    method: "PUT",
    path: objectPath("maps", key),
    headers: { "x-fence-token": fencingToken },
    body: `tile ${key}`,
  });
}

describe("a pool of 64 groups", () => {
  it("4 workers join one by one, then one leaves: fair shares, one owner per group, writes with the right group's token", async () => {
    const workers: string[] = [];
    let claims = new Map<string, Claim>();
    for (const w of ["w1", "w2", "w3", "w4"]) {
      workers.push(w);
      claims = await settle(workers);
      expectFair(claims, workers, await owners());
    }
    // Every worker writes a key of each of its groups with that group's token.
    for (const w of workers) {
      for (const { group, lease } of claims.get(w)!.groups.slice(0, 3)) {
        expect((await put(keyIn(group), lease.fencingToken)).status).toBe(200);
      }
    }
    // Another group's token is refused.
    const [a, b] = claims.get("w1")!.groups;
    const wrong = await put(keyIn(a!.group), b!.lease.fencingToken);
    expect(wrong.status).toBe(403);
    expect(wrong.text).toMatch(/FencingTokenScopeMismatch/);

    // w3 leaves: its groups are released and taken up by the others.
    const left = await apiCall(gw.url, CREDENTIALS, "DELETE", "/pools/tiles/claims/w3");
    expect(left.status).toBe(200);
    expect(left.body.released).toBe(16);
    workers.splice(workers.indexOf("w3"), 1);
    claims = await settle(workers);
    expectFair(claims, workers, await owners());
    const stale = claims.get("w1")!.groups[0]!;
    expect((await put(keyIn(stale.group), stale.lease.fencingToken)).status).toBe(200);
  });

  it("refuses ordinary leases that would share keys with the groups, and allows the whole prefix", async () => {
    for (const fields of [{ key: "tiles/1.png" }, { prefix: "tiles/a/" }]) {
      const res = await api().acquire({ bucket: "maps", ttlMs: 1_000, ...fields });
      expect(res.status).toBe(400);
      expect(res.body.error.message).toMatch(/pool tiles/);
    }
    // The whole prefix (or a wider one) overlaps every group: held off while groups are held.
    const whole = await api().acquire({ bucket: "maps", prefix: "tiles/", ttlMs: 1_000 });
    expect(whole.status).toBe(409);
    expect((await api().acquire({ bucket: "maps", key: "other.png", ttlMs: 1_000 })).status).toBe(201);
  });
});
