import { randomBytes } from "node:crypto";
import { beforeEach, describe, expect, it } from "vitest";
import { fakeClock } from "../../src/core/clock.js";
import { DomainError } from "../../src/core/errors.js";
import {
  assertLeaseCurrent,
  authorizeWrite,
  claimsCover,
  type FenceLookups,
  type FencingPolicy,
} from "../../src/fence/decision.js";
import { makeKeyring, signFencingToken, type TokenClaims } from "../../src/fence/tokens.js";
import { covers, isActive, overlaps } from "../../src/leases/lease-rules.js";
import type { LeaseRecord } from "../../src/leases/lease-store.js";

const keyring = makeKeyring([{ id: "k1", secret: randomBytes(32) }]);
const foreign = { id: "k1", secret: randomBytes(32) };

/** An in-memory stand-in for the lease store's lookups, recording every call. */
function fakeLeases(now: () => number) {
  const records = new Map<string, LeaseRecord>();
  const calls: string[] = [];
  const lookups: FenceLookups = {
    async get(leaseId) {
      calls.push(`get ${leaseId}`);
      return records.get(leaseId) ?? null;
    },
    async findNewerOverlapping(lease) {
      calls.push(`findNewerOverlapping ${lease.leaseId}`);
      return [...records.values()].find((r) => r.token > lease.token && overlaps(r, lease)) ?? null;
    },
    async findActiveCovering(bucket, key) {
      calls.push(`findActiveCovering ${bucket}/${key}`);
      return [...records.values()].find((r) => isActive(r, now()) && covers(r, bucket, key)) ?? null;
    },
  };
  return { records, calls, lookups };
}

let clock: ReturnType<typeof fakeClock>;
let store: ReturnType<typeof fakeLeases>;
let nextToken: number;

beforeEach(() => {
  clock = fakeClock();
  store = fakeLeases(clock);
  nextToken = 100;
});

/** Grants a lease in the fake store and returns it with its signed token. */
function grant(
  resource: { bucket: string; key: string } | { bucket: string; prefix: string },
  ttlMs = 10_000,
): { lease: LeaseRecord; token: string; claims: TokenClaims } {
  const token = nextToken++;
  const lease: LeaseRecord = {
    leaseId: `lease-${token}`,
    ...resource,
    owner: "test",
    token,
    ttlMs,
    acquiredAt: clock(),
    expiresAt: clock() + ttlMs,
  };
  store.records.set(lease.leaseId, lease);
  const claims: TokenClaims = {
    leaseId: lease.leaseId,
    token,
    bucket: lease.bucket,
    key: lease.key,
    prefix: lease.prefix,
  };
  return { lease, token: signFencingToken(claims, keyring.active), claims };
}

function authorize(
  target: { bucket: string; key: string },
  tokenString: string | null,
  policy: FencingPolicy = "required",
) {
  return authorizeWrite({ target, tokenString, policy, keyring, leases: store.lookups, now: clock() });
}

async function refusal(p: Promise<unknown>): Promise<DomainError> {
  const e = await p.then(
    () => null,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(DomainError);
  return e as DomainError;
}

describe("authorizeWrite: signature, then scope, then lease", () => {
  it("accepts an active lease's token for its key", async () => {
    const { lease, token, claims } = grant({ bucket: "b", key: "k" });
    const auth = await authorize({ bucket: "b", key: "k" }, token);
    expect(auth).toEqual({ fenced: true, claims: { ...claims, prefix: undefined }, lease });
    if (!auth.fenced) throw new Error("unreachable");
    expect(auth.claims.token).toBe(lease.token);
    expect(store.calls).toEqual([`get ${lease.leaseId}`]);
  });

  it("accepts a prefix lease's token for any key under the prefix", async () => {
    const { token } = grant({ bucket: "b", prefix: "dir/" });
    for (const key of ["dir/a", "dir/sub/b", "dir/"]) {
      const auth = await authorize({ bucket: "b", key }, token);
      expect(auth.fenced).toBe(true);
    }
  });

  it("checks the signature first: a forged, out-of-scope token for an ended lease is InvalidFencingToken", async () => {
    const { lease } = grant({ bucket: "b", key: "k" });
    lease.releasedAt = clock();
    const forged = signFencingToken(
      { leaseId: lease.leaseId, token: lease.token, bucket: "b", key: "k" },
      foreign,
    );
    const e = await refusal(authorize({ bucket: "other", key: "x" }, forged));
    expect(e.code).toBe("InvalidFencingToken");
    expect(store.calls).toEqual([]);
  });

  it("checks the scope second: a valid token for an ended lease used elsewhere is FencingTokenScopeMismatch", async () => {
    const { lease, token } = grant({ bucket: "b", key: "k" });
    lease.releasedAt = clock();
    const e = await refusal(authorize({ bucket: "b", key: "k2" }, token));
    expect(e.code).toBe("FencingTokenScopeMismatch");
    expect(e.details).toMatchObject({ token: lease.token, leaseId: lease.leaseId });
    expect(store.calls).toEqual([]);
  });

  it("refuses every way out of scope", async () => {
    const key = grant({ bucket: "b", key: "dir/k" });
    const prefix = grant({ bucket: "b", prefix: "dir/" });
    const cases: [string, { bucket: string; key: string }][] = [
      [key.token, { bucket: "b", key: "dir/k2" }],
      [key.token, { bucket: "b", key: "dir/" }],
      [key.token, { bucket: "b", key: "dir/k/" }],
      [key.token, { bucket: "c", key: "dir/k" }],
      [prefix.token, { bucket: "b", key: "dir" }],
      [prefix.token, { bucket: "b", key: "dirx/a" }],
      [prefix.token, { bucket: "b", key: "other/dir/a" }],
      [prefix.token, { bucket: "c", key: "dir/a" }],
    ];
    for (const [token, target] of cases) {
      const e = await refusal(authorize(target, token));
      expect(e.code, JSON.stringify(target)).toBe("FencingTokenScopeMismatch");
    }
    expect(store.calls).toEqual([]);
  });

  it("checks the lease last: an unknown lease is LeaseExpired", async () => {
    const { lease, token } = grant({ bucket: "b", key: "k" });
    store.records.delete(lease.leaseId);
    const e = await refusal(authorize({ bucket: "b", key: "k" }, token));
    expect(e.code).toBe("LeaseExpired");
    expect(e.details).toMatchObject({ token: lease.token, leaseId: lease.leaseId });
  });

  it("refuses a validly signed token that disagrees with its stored lease", async () => {
    const { lease, token } = grant({ bucket: "b", key: "k" });
    store.records.set(lease.leaseId, { ...lease, token: lease.token + 1 });
    expect((await refusal(authorize({ bucket: "b", key: "k" }, token))).code).toBe("InvalidFencingToken");
    store.records.set(lease.leaseId, { ...lease, bucket: "other" });
    expect((await refusal(authorize({ bucket: "b", key: "k" }, token))).code).toBe("InvalidFencingToken");
  });
});

describe("expired vs released vs superseded", () => {
  it("is active until expiresAt and expired from expiresAt on", async () => {
    const { lease, token } = grant({ bucket: "b", key: "k" }, 1000);
    clock.advance(999);
    expect((await authorize({ bucket: "b", key: "k" }, token)).fenced).toBe(true);
    clock.advance(1);
    expect(clock()).toBe(lease.expiresAt);
    const e = await refusal(authorize({ bucket: "b", key: "k" }, token));
    expect(e.code).toBe("LeaseExpired");
    expect(e.message).toMatch(/expired/);
  });

  it("expired, nobody took it since: LeaseExpired", async () => {
    const { lease, token } = grant({ bucket: "b", key: "k" }, 1000);
    clock.advance(5000);
    const e = await refusal(authorize({ bucket: "b", key: "k" }, token));
    expect(e.code).toBe("LeaseExpired");
    expect(e.message).toMatch(/not renewed|expired/);
    expect(store.calls).toEqual([`get ${lease.leaseId}`, `findNewerOverlapping ${lease.leaseId}`]);
  });

  it("released, nobody took it since: LeaseExpired saying released", async () => {
    const { lease, token } = grant({ bucket: "b", key: "k" });
    clock.advance(10);
    lease.releasedAt = clock();
    const e = await refusal(authorize({ bucket: "b", key: "k" }, token));
    expect(e.code).toBe("LeaseExpired");
    expect(e.message).toMatch(/released/);
  });

  it("expired and taken by a newer lease: StaleFencingToken", async () => {
    const old = grant({ bucket: "b", key: "k" }, 1000);
    clock.advance(2000);
    const newer = grant({ bucket: "b", key: "k" });
    const e = await refusal(authorize({ bucket: "b", key: "k" }, old.token));
    expect(e.code).toBe("StaleFencingToken");
    expect(e.message).toContain(String(newer.lease.token));
    expect(e.details).toMatchObject({ token: old.lease.token, leaseId: old.lease.leaseId });
    expect((await authorize({ bucket: "b", key: "k" }, newer.token)).fenced).toBe(true);
  });

  it("released and taken by a newer overlapping prefix lease: StaleFencingToken", async () => {
    const old = grant({ bucket: "b", key: "dir/k" });
    old.lease.releasedAt = clock();
    grant({ bucket: "b", prefix: "dir/" });
    expect((await refusal(authorize({ bucket: "b", key: "dir/k" }, old.token))).code).toBe(
      "StaleFencingToken",
    );
  });

  it("a newer lease that does not overlap does not supersede", async () => {
    const old = grant({ bucket: "b", key: "dir/k" });
    old.lease.releasedAt = clock();
    grant({ bucket: "b", key: "dir/other" });
    grant({ bucket: "c", key: "dir/k" });
    grant({ bucket: "b", prefix: "else/" });
    expect((await refusal(authorize({ bucket: "b", key: "dir/k" }, old.token))).code).toBe("LeaseExpired");
  });
});

describe("policy", () => {
  it("required: no token is FencingTokenRequired without any lookup", async () => {
    const e = await refusal(authorize({ bucket: "b", key: "k" }, null, "required"));
    expect(e.code).toBe("FencingTokenRequired");
    expect(store.calls).toEqual([]);
  });

  it("optional: no token and no covering lease is an unfenced write", async () => {
    grant({ bucket: "b", key: "other" });
    grant({ bucket: "c", key: "k" });
    expect(await authorize({ bucket: "b", key: "k" }, null, "optional")).toEqual({
      fenced: false,
    });
    expect(store.calls).toEqual(["findActiveCovering b/k"]);
  });

  it("optional: no token while an active lease covers the key is FencingTokenRequired", async () => {
    const { lease } = grant({ bucket: "b", prefix: "dir/" });
    const e = await refusal(authorize({ bucket: "b", key: "dir/k" }, null, "optional"));
    expect(e.code).toBe("FencingTokenRequired");
    expect(e.details).toMatchObject({ leaseId: lease.leaseId });
  });

  it("optional: an expired or released covering lease no longer blocks", async () => {
    const a = grant({ bucket: "b", key: "k" }, 1000);
    clock.advance(1000);
    expect((await authorize({ bucket: "b", key: "k" }, null, "optional")).fenced).toBe(false);
    const b = grant({ bucket: "b", key: "k2" });
    b.lease.releasedAt = clock();
    expect((await authorize({ bucket: "b", key: "k2" }, null, "optional")).fenced).toBe(false);
    expect(a.lease.token).toBeLessThan(b.lease.token);
  });

  it("optional: a token, when given, is checked like under required", async () => {
    expect((await refusal(authorize({ bucket: "b", key: "k" }, "garbage", "optional"))).code).toBe(
      "InvalidFencingToken",
    );
    const { lease, token } = grant({ bucket: "b", key: "k" });
    expect((await refusal(authorize({ bucket: "b", key: "x" }, token, "optional"))).code).toBe(
      "FencingTokenScopeMismatch",
    );
    lease.releasedAt = clock();
    expect((await refusal(authorize({ bucket: "b", key: "k" }, token, "optional"))).code).toBe(
      "LeaseExpired",
    );
  });
});

describe("assertLeaseCurrent", () => {
  it("passes for an active lease and never asks for newer leases", async () => {
    const { lease, claims } = grant({ bucket: "b", key: "k" });
    await expect(
      assertLeaseCurrent({ claims, lease, leases: store.lookups, now: clock() }),
    ).resolves.toBeUndefined();
    expect(store.calls).toEqual([]);
  });

  it("refuses a lease that ended between the first check and the commit", async () => {
    const { lease, claims } = grant({ bucket: "b", key: "k" }, 1000);
    await assertLeaseCurrent({ claims, lease, leases: store.lookups, now: clock() });
    const later = clock() + 1000;
    await expect(
      assertLeaseCurrent({ claims, lease, leases: store.lookups, now: later }),
    ).rejects.toMatchObject({
      code: "LeaseExpired",
    });
    grant({ bucket: "b", key: "k" });
    await expect(
      assertLeaseCurrent({ claims, lease, leases: store.lookups, now: later }),
    ).rejects.toMatchObject({
      code: "StaleFencingToken",
    });
  });

  it("refuses a missing lease and a mismatched one", async () => {
    const { lease, claims } = grant({ bucket: "b", key: "k" });
    await expect(
      assertLeaseCurrent({ claims, lease: null, leases: store.lookups, now: clock() }),
    ).rejects.toMatchObject({
      code: "LeaseExpired",
    });
    await expect(
      assertLeaseCurrent({
        claims: { ...claims, token: claims.token + 1 },
        lease,
        leases: store.lookups,
        now: clock(),
      }),
    ).rejects.toMatchObject({ code: "InvalidFencingToken" });
  });
});

describe("claimsCover", () => {
  it("matches keys exactly and prefixes by prefix, within the bucket", () => {
    expect(claimsCover({ leaseId: "l", token: 1, bucket: "b", key: "k" }, { bucket: "b", key: "k" })).toBe(
      true,
    );
    expect(claimsCover({ leaseId: "l", token: 1, bucket: "b", key: "k" }, { bucket: "b", key: "kk" })).toBe(
      false,
    );
    expect(
      claimsCover({ leaseId: "l", token: 1, bucket: "b", prefix: "" }, { bucket: "b", key: "any" }),
    ).toBe(true);
    expect(
      claimsCover({ leaseId: "l", token: 1, bucket: "b", prefix: "" }, { bucket: "c", key: "any" }),
    ).toBe(false);
  });
});
