/**
 * Commit intents (src/fence/commit.ts): beginCommit checks a write against the lease store and
 * records it in one step; a grant over an object with an intent answers `fence` instead, with a
 * token nobody is ever granted, until the intents are cleared. Part of the lease-store contract.
 */
import { describe, expect, it } from "vitest";
import type {
  CommitIntentRef,
  IntentInput,
  LeaseRecord,
  LeaseResource,
} from "../../src/leases/lease-store.js";
import { expectDomainError, type LeaseStoreContext, TTL } from "./lease-store-context.js";

type Fence = { token: number; intents: CommitIntentRef[] };

const fenced = (lease: LeaseRecord, key = lease.key!, token = lease.token): IntentInput => ({
  kind: "fenced",
  leaseId: lease.leaseId,
  token,
  bucket: lease.bucket,
  key,
});

const unfenced = (bucket: string, key: string): IntentInput => ({ kind: "unfenced", bucket, key });

const byId = (intents: readonly CommitIntentRef[]) =>
  [...intents].sort((a, b) => (a.intentId < b.intentId ? -1 : a.intentId > b.intentId ? 1 : 0));

export function describeCommitIntentContract(t: LeaseStoreContext): void {
  const attempt = (resource: LeaseResource) => t.store.tryAcquire({ resource, ttlMs: TTL, owner: "next" });

  async function expectFence(resource: LeaseResource): Promise<Fence> {
    const result = await attempt(resource);
    if (result.granted || !("fence" in result)) {
      throw new Error(`expected a fence on ${JSON.stringify(resource)}: ${JSON.stringify(result)}`);
    }
    return result.fence;
  }

  /** Begins a commit and returns the object it recorded, as a fence lists it. */
  async function begin(intent: IntentInput): Promise<CommitIntentRef> {
    const { intentId } = await t.store.beginCommit(intent);
    return { intentId, bucket: intent.bucket, key: intent.key };
  }

  describe("commit intents: beginCommit", () => {
    it("records intents under active key and prefix leases, each with its own id", async () => {
      const keyLease = await t.grant({ bucket: "b", key: "k" });
      const prefixLease = await t.grant({ bucket: "b", prefix: "p/" });
      const intents = [
        await t.store.beginCommit(fenced(keyLease)),
        await t.store.beginCommit(fenced(keyLease)),
        await t.store.beginCommit(fenced(prefixLease, "p/x/y")),
        await t.store.beginCommit(fenced(prefixLease, "p/")),
        await t.store.beginCommit(unfenced("b", "free")),
      ];
      for (const intent of intents) {
        expect(intent.intentId).toMatch(/^[A-Za-z0-9_-]{8,}$/);
        expect(Number.isSafeInteger(intent.ceiling)).toBe(true);
      }
      expect(new Set(intents.map((i) => i.intentId)).size).toBe(intents.length);
    });

    it("refuses an expired lease with LeaseExpired", async () => {
      const lease = await t.grant({ bucket: "b", key: "k" }, 1_000);
      t.clock.advance(1_000);
      const error = await expectDomainError(t.store.beginCommit(fenced(lease)), "LeaseExpired");
      expect(error.message).toMatch(/expired/);
    });

    it("refuses a released lease with LeaseExpired", async () => {
      const lease = await t.grant({ bucket: "b", prefix: "p/" });
      await t.store.release(lease.leaseId);
      const error = await expectDomainError(t.store.beginCommit(fenced(lease, "p/x")), "LeaseExpired");
      expect(error.message).toMatch(/released/);
    });

    it("refuses a lease it does not know with LeaseExpired", async () => {
      const intent: IntentInput = {
        kind: "fenced",
        leaseId: "no-such-lease",
        token: 1,
        bucket: "b",
        key: "k",
      };
      await expectDomainError(t.store.beginCommit(intent), "LeaseExpired");
    });

    it("refuses a superseded lease with StaleFencingToken, whatever the newer lease's state", async () => {
      const old = await t.grant({ bucket: "b", key: "p/k" }, 1_000);
      t.clock.advance(1_000);
      const newer = await t.grant({ bucket: "b", prefix: "p/" });
      await expectDomainError(t.store.beginCommit(fenced(old)), "StaleFencingToken");
      await t.store.release(newer.leaseId);
      await expectDomainError(t.store.beginCommit(fenced(old)), "StaleFencingToken");
    });

    it("refuses a token that is not its lease's with InvalidFencingToken", async () => {
      const other = await t.grant({ bucket: "b", key: "other" });
      const lease = await t.grant({ bucket: "b", key: "k" });
      await expectDomainError(
        t.store.beginCommit(fenced(lease, "k", lease.token + 1)),
        "InvalidFencingToken",
      );
      await expectDomainError(t.store.beginCommit(fenced(lease, "k", other.token)), "InvalidFencingToken");
    });

    it("refuses an object outside the lease with FencingTokenScopeMismatch", async () => {
      const keyLease = await t.grant({ bucket: "b", key: "k" });
      const prefixLease = await t.grant({ bucket: "b", prefix: "p/" });
      await expectDomainError(t.store.beginCommit(fenced(keyLease, "k2")), "FencingTokenScopeMismatch");
      await expectDomainError(t.store.beginCommit(fenced(prefixLease, "p")), "FencingTokenScopeMismatch");
      await expectDomainError(t.store.beginCommit(fenced(prefixLease, "q/x")), "FencingTokenScopeMismatch");
      const otherBucket: IntentInput = { ...fenced(keyLease), bucket: "b2" };
      await expectDomainError(t.store.beginCommit(otherBucket), "FencingTokenScopeMismatch");
    });

    it("refuses an unfenced write to a key an active lease covers with FencingTokenRequired", async () => {
      const keyLease = await t.grant({ bucket: "b", key: "k" }, 1_000);
      const prefixLease = await t.grant({ bucket: "b", prefix: "p/" });
      await expectDomainError(t.store.beginCommit(unfenced("b", "k")), "FencingTokenRequired");
      await expectDomainError(t.store.beginCommit(unfenced("b", "p/x")), "FencingTokenRequired");
      // Keys no active lease covers are free to write without a token.
      await t.store.beginCommit(unfenced("b", "k2"));
      await t.store.beginCommit(unfenced("b", "p"));
      await t.store.beginCommit(unfenced("b2", "k"));
      await t.store.release(prefixLease.leaseId);
      await t.store.beginCommit(unfenced("b", "p/x"));
      t.clock.advance(1_000);
      expect((await t.store.get(keyLease.leaseId))?.releasedAt).toBeUndefined();
      await t.store.beginCommit(unfenced("b", "k"));
    });

    it("records nothing when it refuses", async () => {
      const keyLease = await t.grant({ bucket: "b", key: "k" }, 1_000);
      const prefixLease = await t.grant({ bucket: "b", prefix: "p/" }, 1_000);
      await expectDomainError(
        t.store.beginCommit(fenced(keyLease, "k", keyLease.token + 1)),
        "InvalidFencingToken",
      );
      await expectDomainError(t.store.beginCommit(fenced(prefixLease, "q")), "FencingTokenScopeMismatch");
      await expectDomainError(t.store.beginCommit(unfenced("b", "p/x")), "FencingTokenRequired");
      t.clock.advance(1_000);
      await expectDomainError(t.store.beginCommit(fenced(keyLease)), "LeaseExpired");
      expect((await attempt({ bucket: "b", key: "k" })).granted).toBe(true);
      expect((await attempt({ bucket: "b", prefix: "" })).granted).toBe(false); // held by the new key lease
      expect((await attempt({ bucket: "b", prefix: "p/" })).granted).toBe(true);
      expect((await attempt({ bucket: "b", key: "q" })).granted).toBe(true);
    });
  });

  describe("commit intents: fencing a grant", () => {
    it("answers fence for the intents of an expired key lease until they are cleared", async () => {
      const lease = await t.grant({ bucket: "b", key: "k" }, 1_000);
      const intents = [await begin(fenced(lease)), await begin(fenced(lease))];
      // While the lease is active, it is what stands in the way.
      expect(await attempt({ bucket: "b", key: "k" })).toEqual({ granted: false, heldBy: lease });
      t.clock.advance(1_000);

      const fence = await expectFence({ bucket: "b", key: "k" });
      expect(byId(fence.intents)).toEqual(byId(intents));
      expect(fence.token).toBeGreaterThan(lease.token);
      const again = await expectFence({ bucket: "b", key: "k" });
      expect(byId(again.intents)).toEqual(byId(intents));
      expect(again.token).toBeGreaterThan(fence.token);

      await t.store.clearIntents(fence.intents.map((i) => i.intentId));
      const next = await t.grant({ bucket: "b", key: "k" });
      expect(next.token).toBeGreaterThan(again.token);
    });

    it("answers fence for the intents of a released lease", async () => {
      const lease = await t.grant({ bucket: "b", key: "k" });
      const intent = await begin(fenced(lease));
      await t.store.release(lease.leaseId);
      const fence = await expectFence({ bucket: "b", key: "k" });
      expect(fence.intents).toEqual([intent]);
      await t.store.clearIntents([intent.intentId]);
      expect((await attempt({ bucket: "b", key: "k" })).granted).toBe(true);
    });

    it("answers fence to a prefix resource for every intent on a key under it, and only those", async () => {
      const lease = await t.grant({ bucket: "b", prefix: "" }, 1_000);
      const under = [
        await begin(fenced(lease, "p/a")),
        await begin(fenced(lease, "p/b/c")),
        await begin(fenced(lease, "p/")),
      ];
      const elsewhere = [await begin(fenced(lease, "p")), await begin(fenced(lease, "q/x"))];
      const otherBucket = await t.grant({ bucket: "b2", key: "p/a" });
      await begin(fenced(otherBucket));
      t.clock.advance(1_000);
      under.push(await begin(unfenced("b", "p/z")));

      const fence = await expectFence({ bucket: "b", prefix: "p/" });
      expect(byId(fence.intents)).toEqual(byId(under));
      await t.store.clearIntents(fence.intents.map((i) => i.intentId));

      // The intents elsewhere in the bucket are still outstanding.
      const whole = await expectFence({ bucket: "b", prefix: "" });
      expect(byId(whole.intents)).toEqual(byId(elsewhere));
      expect(whole.token).toBeGreaterThan(fence.token);
      expect((await attempt({ bucket: "b", prefix: "p/" })).granted).toBe(true);
    });

    it("answers fence to a key resource for an intent left under an ended prefix lease", async () => {
      const lease = await t.grant({ bucket: "b", prefix: "p/" }, 1_000);
      const intent = await begin(fenced(lease, "p/a"));
      t.clock.advance(1_000);
      expect((await attempt({ bucket: "b", key: "p/b" })).granted).toBe(true);
      expect((await expectFence({ bucket: "b", key: "p/a" })).intents).toEqual([intent]);
      // A prefix over the key with the intent is held by the key lease granted meanwhile.
      expect(await attempt({ bucket: "b", prefix: "p/" })).toMatchObject({ granted: false, heldBy: {} });
    });

    it("ignores intents on other keys and in other buckets", async () => {
      const lease = await t.grant({ bucket: "b", key: "k" }, 1_000);
      await begin(fenced(lease));
      await begin(unfenced("b", "u"));
      t.clock.advance(1_000);
      for (const resource of [
        { bucket: "b", key: "k2" },
        { bucket: "b", key: "kk" },
        { bucket: "b", key: "u/" },
        { bucket: "b", prefix: "k/" },
        { bucket: "b", prefix: "v" },
        { bucket: "b2", prefix: "" },
        { bucket: "b3", key: "k" },
        { bucket: "b3", key: "u" },
      ] satisfies LeaseResource[]) {
        expect((await attempt(resource)).granted, JSON.stringify(resource)).toBe(true);
      }
    });

    it("takes a fresh token for every fence, above every token granted and never granted later", async () => {
      const lease = await t.grant({ bucket: "b", key: "k" }, 1_000);
      const intent = await begin(fenced(lease));
      const granted = [lease, await t.grant({ bucket: "b", key: "x" })];
      t.clock.advance(1_000);
      const fenceTokens: number[] = [];
      for (let i = 0; i < 3; i++) {
        const { token } = await expectFence({ bucket: "b", key: "k" });
        expect(token).toBeGreaterThan(Math.max(...granted.map((l) => l.token), ...fenceTokens));
        fenceTokens.push(token);
        granted.push(await t.grant({ bucket: "b", key: `y${i}` }));
      }
      await t.store.clearIntents([intent.intentId]);
      granted.push(await t.grant({ bucket: "b", key: "k" }));
      for (let i = 0; i < 5; i++) granted.push(await t.grant({ bucket: "b", key: `z${i}` }));
      const tokens = granted.map((l) => l.token);
      for (const token of fenceTokens) expect(tokens).not.toContain(token);
      expect(new Set(tokens).size).toBe(tokens.length);
    });

    it("fences an unfenced write's intent with a token above its ceiling", async () => {
      await t.grant({ bucket: "b", key: "other" });
      const { intentId, ceiling } = await t.store.beginCommit(unfenced("b", "k"));
      const fence = await expectFence({ bucket: "b", key: "k" });
      expect(fence.intents).toEqual([{ intentId, bucket: "b", key: "k" }]);
      expect(fence.token).toBeGreaterThan(ceiling);
      await t.store.clearIntents([intentId]);
      expect((await t.grant({ bucket: "b", key: "k" })).token).toBeGreaterThan(fence.token);
    });
  });

  describe("commit intents: endCommit and clearIntents", () => {
    it("endCommit forgets the intent: the resource is granted without a fence", async () => {
      const lease = await t.grant({ bucket: "b", key: "k" }, 1_000);
      const kept = await begin(fenced(lease));
      const ended = await begin(fenced(lease));
      await t.store.endCommit(ended.intentId);
      t.clock.advance(1_000);
      expect((await expectFence({ bucket: "b", key: "k" })).intents).toEqual([kept]);
      await t.store.endCommit(kept.intentId);
      expect((await attempt({ bucket: "b", key: "k" })).granted).toBe(true);
    });

    it("clearIntents forgets the intents named and no others", async () => {
      const a = await begin(unfenced("b", "a"));
      const b = await begin(unfenced("b", "b"));
      const c = await begin(unfenced("b", "c"));
      await t.store.clearIntents([a.intentId, c.intentId]);
      expect((await expectFence({ bucket: "b", prefix: "" })).intents).toEqual([b]);
      await t.store.clearIntents([]);
      expect((await expectFence({ bucket: "b", prefix: "" })).intents).toEqual([b]);
    });

    it("ignores ids it does not know, or no longer knows", async () => {
      const intent = await begin(unfenced("b", "k"));
      await t.store.endCommit(intent.intentId);
      await expect(t.store.endCommit(intent.intentId)).resolves.toBeUndefined();
      await expect(t.store.endCommit("no-such-intent")).resolves.toBeUndefined();
      await expect(t.store.clearIntents([intent.intentId, "no-such-intent"])).resolves.toBeUndefined();
      expect((await attempt({ bucket: "b", key: "k" })).granted).toBe(true);
    });
  });

  describe("commit intents: ceiling", () => {
    it("is the last token granted when the intent was recorded", async () => {
      const first = await t.store.beginCommit(unfenced("b", "k"));
      const a = await t.grant({ bucket: "b", key: "a" });
      expect(first.ceiling).toBeLessThan(a.token);
      const b = await t.grant({ bucket: "b", key: "b" });
      await t.store.release(b.leaseId);
      const second = await t.store.beginCommit(unfenced("b", "k2"));
      expect(second.ceiling).toBe(b.token);
      expect((await t.store.beginCommit(fenced(a))).ceiling).toBe(b.token);
      expect((await t.grant({ bucket: "b", key: "c" })).token).toBeGreaterThan(second.ceiling);
    });

    it("stays below every later grant when tokens went to fences", async () => {
      await t.store.beginCommit(unfenced("b", "k"));
      const held = await t.grant({ bucket: "b", key: "held" });
      const fence = await expectFence({ bucket: "b", key: "k" });
      const { ceiling } = await t.store.beginCommit(unfenced("b", "other"));
      expect(ceiling).toBeGreaterThanOrEqual(held.token);
      expect(ceiling).toBeGreaterThanOrEqual(fence.token);
      expect((await t.grant({ bucket: "b", key: "next" })).token).toBeGreaterThan(ceiling);
    });
  });
}
