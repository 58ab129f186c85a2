import { randomBytes } from "node:crypto";
import { LuaScript } from "../../core/lua-source.js";
import type { LeaseEvent } from "../../metrics/observe.js";
import { eventsOf, expiries, recordAfter } from "../lease-events.js";
import { leaseNotFound, lostByExpiry, lostByRelease, newLeaseId } from "../lease-rules.js";
import type {
  AcquireResult,
  CommitIntent,
  CommitIntentRef,
  DelegateRecord,
  LeaseEventContext,
  LeaseEvents,
  LeaseRecord,
  LeaseStore,
} from "../lease-store.js";
import { validateAcquire, validateTtl } from "../lease-validation.js";
import {
  acquireArgs,
  decodeDelegate,
  decodeIntents,
  decodeLease,
  decodeLeases,
  encodeLease,
  intentArgs,
  listArgs,
  resourceArgs,
  throwIntentRefusal,
} from "../redis-shared/lease-codec.js";
import { RELEASE } from "../redis-shared/lua/lease-scripts.js";
import { DEFAULTS, SHARED_SCRIPTS } from "../redis-shared/scripts.js";
import { ACQUIRE_AT, BEGIN_COMMIT_AT, BREAK_AT, DISCARD, RESTORE } from "./lua/redlock-scripts.js";
import { createQuorum, type Instance, merge, type Quorum, type QuorumOptions, tally } from "./quorum.js";

type RedlockLeaseStoreOptions = QuorumOptions & {
  /** Records the store's lease events, right after each change has reached its majority. */
  events?: LeaseEvents;
  /** Minimum interval between retention sweeps (run from collectExpired). Default 1 min. */
  sweepEveryMs?: number;
  /**
   * The fixed part of the clock-drift allowance: a grant is valid only while TTL − time spent
   * acquiring − (1% of the TTL + this) is positive. Default 2 ms.
   */
  driftAllowanceMs?: number;
  /** Attempts of one acquire when proposals collide (random jitter between them). Default 10. */
  maxAttempts?: number;
};

export type RedlockLeaseStore = LeaseStore & {
  /** Resolves true once a majority is connected with known floors, false after `timeoutMs`. */
  ready(timeoutMs: number): Promise<boolean>;
  /**
   * Per instance: its URL (without password), whether it answers, its quarantine end (ms, 0 =
   * none), whether it waits for its commit intents to be settled after a loss of data, and the
   * unsafe settings that keep it out of the quorum.
   */
  instances(): ReturnType<Quorum["describe"]>;
  /**
   * Reads every instance's floor now, installing it (with the live commit intents) where it is
   * unknown, and settling the intents of instances whose quarantine is over (also runs by itself).
   */
  checkFloors(): Promise<void>;
  /** Checks every connected instance's settings now (also on every connect and every checkEveryMs). */
  checkSettings(): Promise<void>;
  /** Forgets ended leases older than retainMs on every instance. */
  sweep(): Promise<number>;
};

const S = {
  ...SHARED_SCRIPTS,
  acquire: new LuaScript("redlock-acquire", ACQUIRE_AT),
  discard: new LuaScript("redlock-discard", DISCARD),
  breakLease: new LuaScript("redlock-break", BREAK_AT),
  beginCommit: new LuaScript("redlock-begin-commit", BEGIN_COMMIT_AT),
  restore: new LuaScript("redlock-restore", RESTORE),
  release: new LuaScript("release", RELEASE),
};

/**
 * A lease store over N independent Redis masters, as the Redlock algorithm describes: every
 * operation goes to every instance in parallel and counts only when a majority (floor(N/2) + 1)
 * of instances that are not in quarantine agree. Each instance keeps a full copy of the lease
 * state under the one-Redis key layout (../redis-shared/lua/prelude.ts), changed by one Lua script
 * per operation, so that each instance decides atomically for itself.
 *
 * Mutual exclusion: a grant needs a majority of instances to grant; two majorities always share
 * an instance, and that instance grants at most one of two overlapping leases while the first is
 * active. A grant is valid only while TTL − time spent acquiring − a drift allowance (1% of the
 * TTL + 2 ms) is positive; otherwise, and after every acquire that did not win a majority, the
 * lease is discarded on every instance that granted it.
 *
 * Whose answers count (quarantine, repair, settings), floors and epochs: quorum.ts.
 *
 * Tokens: phase 1 reads the counter of a majority and proposes t = highest + 1; phase 2 asks every
 * instance to grant with t, which it does only when its own counter is below t, setting it to t.
 * Any two grants' majorities intersect, so the later one read a counter at least the earlier's
 * token: tokens are unique and increase in grant order. A token is epoch × 2^32 + counter, with the
 * epoch in an EpochStore outside Redis: when fewer than a majority know their floor (several lost
 * their data), a new epoch is created durably and installed before anything is granted.
 *
 * Commit intents (rule 4): beginCommit checks the lease and records the intent on every instance,
 * and needs a majority; an acquire that finds an intent on any instance it asks answers `fence`
 * when its token was taken by a majority (granted or fenced there). A single `fence` among the
 * answers is a fence, however many instances granted: nothing is granted then. This is safe
 * because the majority that recorded the intent and the majority a grant needs share at least one
 * instance: on that instance either the intent came first (it answers `fence`, so the grant does
 * not happen) or the grant came first (the lease was then no longer current there, so beginCommit
 * could not count it). Losses of data do not break that shared instance, one loss at a time: a
 * repaired instance holds every live intent again before it counts ("commit intents of an instance
 * that lost its data" in quorum.ts). A simultaneous loss of a majority loses the intents only they
 * held, as it loses the leases only they held. An intent recorded on only a minority is
 * removed again, and the commit refused. An intent that an endCommit, a clearIntents or a break's
 * fence left on some instances (they reached only the others) is never ignored: the next grant
 * over its object that reaches one of them fences it once more (an extra raise of the HCT, no
 * harm), and clears it.
 *
 * It fails fast: a disconnected instance fails at once (no offline queue), a silent one after
 * commandTimeoutMs; without a majority every operation throws DomainError LeaseStoreUnavailable.
 */
export function createRedlockLeaseStore(opts: RedlockLeaseStoreOptions): RedlockLeaseStore {
  const sweepEveryMs = opts.sweepEveryMs ?? DEFAULTS.sweepEveryMs;
  const maxAttempts = opts.maxAttempts ?? 10;
  const clock = opts.clock;
  const quorum = createQuorum(opts);
  const { Q, onAll, counted, majority, explain, unavailable, eligible, proposeToken, serialized, jitter } =
    quorum;
  const checkFloors = quorum.checkFloors;

  // Elapsed time on the injected clock (a fake clock in tests does not move by itself).
  const driftFixedMs = opts.driftAllowanceMs ?? 2;
  const validityLeft = (ttlMs: number, startedAt: number) =>
    ttlMs - (clock() - startedAt) - (Math.floor(ttlMs * 0.01) + driftFixedMs);

  async function discard(leaseId: string, on: Instance[]): Promise<void> {
    if (on.length > 0) await onAll(S.discard, [leaseId], on);
  }

  async function acquireOnce(
    input: Parameters<LeaseStore["tryAcquire"]>[0],
  ): Promise<AcquireResult | { retry: string; heldBy?: LeaseRecord }> {
    const startedAt = clock();
    const t = await proposeToken();
    const id = newLeaseId();
    const answers = await onAll(S.acquire, [...acquireArgs(input, id), t]);
    const granted: { inst: Instance; lease: LeaseRecord; expired: LeaseRecord[] }[] = [];
    const held: LeaseRecord[] = [];
    const intents: CommitIntentRef[] = [];
    let fenced = 0;
    let stale = 0;
    let floorUnknown = false;
    // Where the lease may exist: granted, or no answer (a late script may still run there; the
    // discard, sent on the same connection, runs after it).
    const grantedAnywhere: Instance[] = [];
    for (const a of answers) {
      if (a.error) {
        if (a.inst.redis.status === "ready") grantedAnywhere.push(a.inst);
        continue;
      }
      const reply = a.reply as unknown[];
      if (reply[0] === "granted") grantedAnywhere.push(a.inst);
      if (reply[0] === "epoch") floorUnknown = true;
      if (!eligible(a.inst)) continue;
      if (reply[0] === "granted") {
        granted.push({ inst: a.inst, lease: decodeLease(reply[1])!, expired: decodeLeases(reply[2]) });
      } else if (reply[0] === "held") {
        held.push(decodeLease(reply[1])!);
      } else if (reply[0] === "fence") {
        fenced++;
        intents.push(...decodeIntents(reply[1]));
      } else if (reply[0] === "stale") {
        stale++;
      }
    }
    // One instance answering `fence` is enough to stop the grant, however many granted: it holds
    // an intent the others do not (they lost it with their data, or an endCommit or clearIntents
    // reached only them), and only a fence tells the intent's object and this grant apart.
    if (granted.length >= Q && fenced === 0) {
      if (validityLeft(input.ttlMs, startedAt) > 0) {
        const expired = tally(granted.map((g) => g.expired)).map((e) => e.lease);
        return { granted: true, lease: merge(granted.map((g) => g.lease)), expired };
      }
      await discard(id, grantedAnywhere);
      return { retry: "the grant took longer than its TTL allows (slow instances or clock drift)" };
    }
    // Not granted: the lease is undone wherever it was granted.
    await discard(id, grantedAnywhere);
    // The fence token is t, taken by every instance that granted or fenced: by a majority here,
    // so that no later grant can be given it.
    if (fenced > 0 && fenced + granted.length >= Q) {
      const unique = new Map(intents.map((i) => [i.intentId, i]));
      return { granted: false, fence: { token: t, intents: [...unique.values()] } };
    }
    const holders = tally(held.map((l) => [l]));
    const best = holders.sort((a, b) => b.votes - a.votes || a.lease.token - b.lease.token)[0];
    if (best && best.votes >= Q) return { granted: false, heldBy: best.lease };
    if (floorUnknown) checkFloors().catch(() => undefined);
    if (counted(answers).length < Q) throw unavailable(explain(answers));
    // Held by a minority and no collision to wait out: trying again changes nothing until it expires.
    if (best && stale === 0) return { granted: false, heldBy: best.lease };
    if (best) return { retry: "a minority holds a lease in the way", heldBy: best.lease };
    return { retry: "another grant took the proposed token" };
  }

  async function maybeSweep(): Promise<void> {
    const now = Date.now();
    if (now - lastSweepAt < sweepEveryMs && now >= lastSweepAt) return;
    lastSweepAt = now;
    await onAll(S.sweep, [DEFAULTS.sweepLimit]);
  }
  let lastSweepAt = Number.NEGATIVE_INFINITY;

  /** Records a change's accepted events (after its majority), and answers its lease. */
  async function recorded(
    op: LeaseEvent,
    lease: LeaseRecord,
    by: LeaseEventContext | undefined,
    expired?: LeaseRecord[],
  ): Promise<LeaseRecord> {
    await recordAfter(opts.events, eventsOf(op, lease, by, expired));
    return lease;
  }

  const store: RedlockLeaseStore = {
    kind: "redlock",

    async tryAcquire(input, by) {
      validateAcquire(input);
      const result = await serialized(async (): Promise<AcquireResult> => {
        let lastHeld: LeaseRecord | undefined;
        let why = "";
        for (let attempt = 0; attempt < maxAttempts; attempt++) {
          if (attempt > 0) await jitter(attempt);
          const result = await acquireOnce(input);
          if (!("retry" in result)) return result;
          why = result.retry;
          lastHeld = result.heldBy ?? lastHeld;
        }
        // Only a minority holds something in the way: it stands until it expires.
        if (lastHeld) return { granted: false, heldBy: lastHeld };
        throw unavailable(`no majority agreed after ${maxAttempts} attempts: ${why}`);
      });
      if (result.granted) await recorded("LeaseAcquired", result.lease, by, result.expired);
      return result;
    },

    async get(leaseId) {
      const found = majority(await onAll(S.get, [leaseId]))
        .map((a) => decodeLease(a.reply))
        .filter((l): l is LeaseRecord => l !== null);
      return found.length > 0 ? merge(found) : null;
    },

    async renew(leaseId, ttlMs, who) {
      validateTtl(ttlMs);
      const startedAt = clock();
      const answers = await onAll(S.renew, [leaseId, ttlMs]);
      const ok = counted(answers);
      const by = (status: string) => ok.filter((a) => (a.reply as unknown[])[0] === status);
      const renewed = by("ok");
      if (renewed.length >= Q && validityLeft(ttlMs, startedAt) > 0) {
        const lease = merge(renewed.map((a) => decodeLease((a.reply as unknown[])[1])!));
        // Instances that lost the lease (one back from a loss of data) get it again, so that they
        // too stand in the way of an overlapping grant.
        const missing = answers.filter(
          (a) => a.error === undefined && (a.reply as unknown[])[0] === "notfound",
        );
        if (missing.length > 0) {
          const fields = Object.entries(encodeLease(lease)).flat();
          await onAll(
            S.restore,
            fields,
            missing.map((a) => a.inst),
          ).catch(() => undefined);
        }
        return recorded("LeaseRenewed", lease, who);
      }
      if (by("notfound").length >= Q) throw leaseNotFound(leaseId);
      const broken = by("broken").length;
      const released = by("released").length + broken;
      const expired = by("expired");
      if (released > 0 && released + expired.length + by("notfound").length >= Q) {
        throw lostByRelease(leaseId, broken > 0);
      }
      if (expired.length > 0 && released + expired.length + by("notfound").length >= Q) {
        throw lostByExpiry(leaseId, Number((expired[0]!.reply as unknown[])[1]));
      }
      throw unavailable(`the renewal did not reach a majority in time: ${explain(answers)}`);
    },

    async release(leaseId, by) {
      const answers = await onAll(S.release, [leaseId]);
      const ok = counted(answers);
      const ended = ok.filter((a) => ["released", "expired"].includes(String((a.reply as unknown[])[0])));
      const notfound = ok.filter((a) => (a.reply as unknown[])[0] === "notfound");
      if (ended.length > 0 && ended.length + notfound.length >= Q) {
        const released = ended.filter((a) => (a.reply as unknown[])[0] === "released");
        const pick = released.length * 2 >= ended.length ? released : ended;
        return recorded("LeaseReleased", merge(pick.map((a) => decodeLease((a.reply as unknown[])[1])!)), by);
      }
      if (notfound.length >= Q) throw leaseNotFound(leaseId);
      throw unavailable(explain(answers));
    },

    async breakLease(leaseId, by) {
      const broke = await serialized(async () => {
        // Ended wherever an attempt broke it; the fence token must be taken by a majority in one
        // attempt (broken or notfound answers both took it).
        const broken: LeaseRecord[] = [];
        const intents = new Map<string, CommitIntentRef>();
        let why = "";
        for (let attempt = 0; attempt < maxAttempts; attempt++) {
          if (attempt > 0) await jitter(attempt);
          const t = await proposeToken();
          const answers = await onAll(S.breakLease, [leaseId, t]);
          let took = 0;
          for (const a of counted(answers)) {
            const reply = a.reply as unknown[];
            if (reply[0] === "broken") {
              took++;
              broken.push(decodeLease(reply[1])!);
              for (const i of decodeIntents(reply[2])) intents.set(i.intentId, i);
            } else if (reply[0] === "notfound") {
              took++;
            }
          }
          if (took >= Q) {
            if (broken.length === 0) throw leaseNotFound(leaseId);
            return { lease: merge(broken), fence: { token: t, intents: [...intents.values()] } };
          }
          if (counted(answers).length < Q) throw unavailable(explain(answers));
          why = "another grant took the proposed token";
        }
        throw unavailable(`no majority agreed after ${maxAttempts} attempts: ${why}`);
      });
      await recorded("LeaseBroken", broke.lease, by);
      return broke;
    },

    async addDelegate(d) {
      const answers = await onAll(S.addDelegate, [d.leaseId, d.delegateId, d.createdBy, d.createdAt]);
      const ok = majority(answers);
      const added = ok.filter((a) => a.reply === "ok").length;
      if (added >= Q) return;
      // Undone where it was added, so that a minority does not keep it.
      await onAll(S.removeDelegate, [d.leaseId, d.delegateId]);
      if (ok.filter((a) => a.reply === "notfound").length >= Q) throw leaseNotFound(d.leaseId);
      throw unavailable(explain(answers));
    },

    async listDelegates(leaseId) {
      const ok = majority(await onAll(S.listDelegates, [leaseId ?? ""]));
      const votes = new Map<string, { d: DelegateRecord; votes: number; at: number }>();
      for (const a of ok) {
        (a.reply as Array<string | null>).forEach((json, at) => {
          if (json === null) return;
          const d = decodeDelegate(json);
          const k = `${d.leaseId} ${d.delegateId}`;
          const v = votes.get(k);
          if (v) v.votes++;
          else votes.set(k, { d, votes: 1, at });
        });
      }
      return [...votes.values()]
        .filter((v) => v.votes >= Q)
        .sort((a, b) => a.d.createdAt - b.d.createdAt || a.at - b.at)
        .map((v) => v.d);
    },

    async removeDelegate(leaseId, delegateId) {
      const ok = majority(await onAll(S.removeDelegate, [leaseId, delegateId]));
      return ok.some((a) => Number(a.reply) === 1);
    },

    async list(filter) {
      const ok = majority(await onAll(S.list, listArgs(filter)));
      return tally(ok.map((a) => decodeLeases(a.reply)))
        .filter((v) => v.votes >= Q)
        .map((v) => v.lease);
    },

    async findActiveCovering(bucket, key) {
      const ok = majority(await onAll(S.findCovering, [bucket, key]));
      const found = tally(ok.map((a) => [decodeLease(a.reply)].filter((l): l is LeaseRecord => l !== null)));
      return found.find((v) => v.votes >= Q)?.lease ?? null;
    },

    async findNewerOverlapping(lease) {
      const [kind, s] = resourceArgs(lease);
      const ok = majority(await onAll(S.findNewer, [kind, lease.bucket, s, lease.token]));
      const found = tally(ok.map((a) => [decodeLease(a.reply)].filter((l): l is LeaseRecord => l !== null)));
      // A newer lease a majority knows; failing that, any (calling a lease superseded is the safe side).
      return found.find((v) => v.votes >= Q)?.lease ?? found[0]?.lease ?? null;
    },

    async collectExpired() {
      const ok = majority(await onAll(S.collectExpired, [DEFAULTS.collectLimit]));
      // Each instance reports an expiry once; the call that saw a majority report it reports it.
      // The one-Redis script answers {'ok', leases, seq} (older versions: the leases alone).
      const leasesOf = (r: unknown) => decodeLeases(Array.isArray(r) && r[0] === "ok" ? r[1] : r);
      const reported = tally(ok.map((a) => leasesOf(a.reply)))
        .filter((v) => v.votes >= Q)
        .map((v) => v.lease);
      await recordAfter(opts.events, expiries(reported));
      await maybeSweep().catch(() => undefined);
      return reported;
    },

    async beginCommit(intent): Promise<CommitIntent> {
      const intentId = randomBytes(12).toString("base64url");
      const fenced = intent.kind === "fenced";
      // An unfenced write's ceiling: the highest counter of a majority, raised to on every instance
      // that records the intent, so that every later token is above it.
      const ceiling = fenced ? 0 : (await proposeToken()) - 1;
      const answers = await onAll(S.beginCommit, [...intentArgs(intentId, intent), ceiling]);
      const ok = counted(answers);
      const recorded = ok.filter((a) => (a.reply as unknown[])[0] === "ok");
      if (recorded.length >= Q) {
        // A fenced write's ceiling is not used by the commit; it is the highest counter seen.
        const seen = Math.max(...recorded.map((a) => Number((a.reply as unknown[])[1])));
        return { intentId, ceiling: fenced ? seen : ceiling };
      }
      // Not on a majority: removed wherever it was recorded, and the commit refused.
      await onAll(S.forgetIntents, [intentId]).catch(() => undefined);
      if (answers.some((a) => a.error === undefined && (a.reply as unknown[])[0] === "epoch")) {
        checkFloors().catch(() => undefined);
      }
      const refused = ok.find((a) => (a.reply as unknown[])[0] === "refused");
      if (refused) throwIntentRefusal(intent, refused.reply as unknown[]);
      throw unavailable(explain(answers));
    },

    async endCommit(intentId) {
      majority(await onAll(S.forgetIntents, [intentId]));
    },

    async clearIntents(intentIds) {
      if (intentIds.length > 0) majority(await onAll(S.forgetIntents, intentIds));
    },

    async intentsUnder(resource) {
      // An intent was recorded on a majority, which shares an instance with any majority that
      // answers here; every answer counts (listing one too many only costs a touch).
      const [kind, s] = resourceArgs(resource);
      const ok = majority(await onAll(S.intentsUnder, [kind, resource.bucket, s]));
      const all = new Map(ok.flatMap((a) => decodeIntents(a.reply)).map((i) => [i.intentId, i]));
      return [...all.values()];
    },

    async ping() {
      await quorum.ping();
    },

    async close() {
      quorum.close();
    },

    ready: (waitMs) => quorum.ready(waitMs),
    instances: () => quorum.describe(),
    checkFloors,
    checkSettings: () => quorum.checkSettings(),

    async sweep() {
      lastSweepAt = Date.now();
      const ok = majority(await onAll(S.sweep, [DEFAULTS.sweepLimit]));
      return Math.max(0, ...ok.map((a) => Number(a.reply)));
    },
  };

  return store;
}
