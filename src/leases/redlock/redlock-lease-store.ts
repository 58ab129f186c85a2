import { randomBytes, randomInt } from "node:crypto";
import type { Redis } from "ioredis";
import type { Clock } from "../../core/clock.js";
import { DomainError } from "../../core/errors.js";
import type { Logger } from "../../core/log.js";
import { LuaScript } from "../../core/lua-source.js";
import { openFailClosedRedis } from "../../core/redis-connection.js";
import { leaseNotFound, lostByRelease, newLeaseId } from "../lease-rules.js";
import type {
  AcquireResult,
  BreakResult,
  CommitIntent,
  CommitIntentRef,
  DelegateRecord,
  LeaseRecord,
  LeaseStore,
} from "../lease-store.js";
import { validateAcquire, validateTtl } from "../lease-validation.js";
import { EPOCH_SPAN, type EpochStore, MAX_EPOCH } from "../redis/epoch-store.js";
import { decodeIntents, decodeLease, decodeLeases, throwIntentRefusal } from "../redis/lease-codec.js";
import { ADD_DELEGATE, LIST_DELEGATES, REMOVE_DELEGATE } from "../redis/lua/delegate-scripts.js";
import { FORGET_INTENTS, INTENTS_UNDER } from "../redis/lua/intent-scripts.js";
import {
  COLLECT_EXPIRED,
  FIND_COVERING,
  FIND_NEWER,
  GET,
  LIST,
  RELEASE,
  RENEW,
  SWEEP,
} from "../redis/lua/lease-scripts.js";
import { redactUrl } from "../redis/redis-lease-store.js";
import { checkRedisSettings } from "../redis/redis-settings.js";
import {
  ACQUIRE_AT,
  BEGIN_COMMIT_AT,
  BREAK_AT,
  DISCARD,
  INSTALL_FLOOR,
  READ_FLOOR,
  READ_INTENTS,
  RESTORE,
  SETTLE_INTENTS,
} from "./lua/redlock-scripts.js";

export type RedlockLeaseStoreOptions = {
  /** The independent Redis masters (3 or 5 recommended), redis:// or rediss:// URLs. */
  urls: readonly string[];
  /** Where token epochs live durably (see ../redis/epoch-store.ts). */
  epochs: EpochStore;
  /**
   * The clock that decides expiry on every instance (passed to each script; each instance keeps
   * a high-water mark so that time never goes back for its leases).
   */
  clock: Clock;
  /**
   * How long an instance that lost its data (restarted, its run id changed, or its floor gone)
   * stays out of the quorum: at least the longest lease TTL, so that every lease it forgot has
   * expired before it votes again.
   */
  quarantineMs: number;
  /** Every key starts with this on every instance. Default {fencegate}. */
  keyPrefix?: string;
  /** How long an ended lease stays answerable. Default 24h. */
  retainMs?: number;
  /** Minimum interval between retention sweeps (run from collectExpired). Default 1 min. */
  sweepEveryMs?: number;
  /** A command unanswered by then fails on that instance. Default 2 s. */
  commandTimeoutMs?: number;
  /** How often every instance's run id and floor are checked besides every token operation. Default 5 s. */
  checkEveryMs?: number;
  /**
   * The fixed part of the clock-drift allowance: a grant is valid only while TTL − time spent
   * acquiring − (1% of the TTL + this) is positive. Default 2 ms.
   */
  driftAllowanceMs?: number;
  /** Attempts of one acquire when proposals collide (random jitter between them). Default 10. */
  maxAttempts?: number;
  log?: Logger;
};

export type RedlockLeaseStore = LeaseStore & {
  addDelegate(delegate: DelegateRecord): Promise<void>;
  listDelegates(leaseId?: string): Promise<DelegateRecord[]>;
  removeDelegate(leaseId: string, delegateId: string): Promise<boolean>;
  breakLease(leaseId: string): Promise<BreakResult>;
  /** Resolves true once a majority is connected with known floors, false after `timeoutMs`. */
  ready(timeoutMs: number): Promise<boolean>;
  /**
   * Per instance: its URL (without password), whether it answers, its quarantine end (ms, 0 =
   * none), whether it waits for its commit intents to be settled after a loss of data, and the
   * unsafe settings that keep it out of the quorum.
   */
  instances(): {
    url: string;
    connected: boolean;
    quarantinedUntil: number;
    intentsPending: boolean;
    unsafe: string | null;
  }[];
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

const DAY_MS = 24 * 60 * 60 * 1000;
const COLLECT_LIMIT = 1000;
/** How long a new store waits for every instance to connect before it installs floors without them. */
const STARTUP_GRACE_MS = 2_000;
const SWEEP_LIMIT = 500;
/** Keys one READ_INTENTS page looks at. */
const INTENT_PAGE = 1000;
/**
 * How long an instance whose intents could not be settled (too few others answered) waits before
 * the next attempt: each reads every intent of the others, and floors are read on every grant.
 */
const SETTLE_RETRY_MS = 1_000;

const S = {
  readFloor: new LuaScript("redlock-read-floor", READ_FLOOR),
  installFloor: new LuaScript("redlock-install-floor", INSTALL_FLOOR),
  readIntents: new LuaScript("redlock-read-intents", READ_INTENTS),
  settleIntents: new LuaScript("redlock-settle-intents", SETTLE_INTENTS),
  acquire: new LuaScript("redlock-acquire", ACQUIRE_AT),
  discard: new LuaScript("redlock-discard", DISCARD),
  breakLease: new LuaScript("redlock-break", BREAK_AT),
  beginCommit: new LuaScript("redlock-begin-commit", BEGIN_COMMIT_AT),
  restore: new LuaScript("redlock-restore", RESTORE),
  renew: new LuaScript("renew", RENEW),
  release: new LuaScript("release", RELEASE),
  collectExpired: new LuaScript("collect-expired", COLLECT_EXPIRED),
  sweep: new LuaScript("sweep", SWEEP),
  get: new LuaScript("get", GET),
  list: new LuaScript("list", LIST),
  findCovering: new LuaScript("find-covering", FIND_COVERING),
  findNewer: new LuaScript("find-newer", FIND_NEWER),
  forgetIntents: new LuaScript("forget-intents", FORGET_INTENTS),
  intentsUnder: new LuaScript("intents-under", INTENTS_UNDER),
  addDelegate: new LuaScript("add-delegate", ADD_DELEGATE),
  listDelegates: new LuaScript("list-delegates", LIST_DELEGATES),
  removeDelegate: new LuaScript("remove-delegate", REMOVE_DELEGATE),
};

type Instance = {
  index: number;
  where: string;
  redis: Redis;
  /** The end of its quarantine (store clock, ms); 0 when none is known. */
  quarantinedUntil: number;
  /**
   * It lost its data and its commit intents are not settled yet (the `ip` mark of its floor): it
   * does not count, whatever its quarantine says.
   */
  intentsPending: boolean;
  /** The quarantine end for which "its intents cannot be settled yet" was last logged. */
  settleWarnedFor?: number;
  /** When (Date.now()) to try settling its intents again after too few instances answered. */
  settleRetryAt?: number;
  /** Settings that break mutual exclusion (an eviction policy), or null: it does not count while set. */
  unsafe: string | null;
};

/** One instance's answer: its reply, or the error that stands for "did not answer". */
type Answer = { inst: Instance; reply: unknown; error?: undefined } | { inst: Instance; error: Error };

type Floor = { inst: Instance; known: boolean; last: number; epoch: number; q: number; pending: boolean };

const resourceArgs = (l: Pick<LeaseRecord, "key" | "prefix">): [string, string] =>
  l.key !== undefined ? ["k", l.key] : ["p", l.prefix ?? ""];

/**
 * A lease store over N independent Redis masters, as the Redlock algorithm describes: every
 * operation goes to every instance in parallel and counts only when a majority (floor(N/2) + 1)
 * of instances that are not in quarantine agree. Each instance keeps a full copy of the lease
 * state under the one-Redis key layout (../redis/lua/prelude.ts), changed by one Lua script per
 * operation, so that each instance decides atomically for itself.
 *
 * Mutual exclusion: a grant needs a majority of instances to grant; two majorities always share
 * an instance, and that instance grants at most one of two overlapping leases while the first is
 * active. A grant is valid only while TTL − time spent acquiring − a drift allowance (1% of the
 * TTL + 2 ms) is positive; otherwise, and after every acquire that did not win a majority, the
 * lease is discarded on every instance that granted it.
 *
 * Tokens: phase 1 reads the counter of a majority and proposes t = highest + 1; phase 2 asks every
 * instance to grant with t, which it does only when its own counter is below t, setting it to t.
 * Any two grants' majorities intersect, so the later one read a counter at least the earlier's
 * token: tokens are unique and increase in grant order. A token is epoch × 2^32 + counter, with the
 * epoch in an EpochStore outside Redis: when fewer than a majority know their floor (several lost
 * their data), a new epoch is created durably and installed before anything is granted.
 *
 * An instance whose floor is unknown (a restart changed its run id, or its data is gone) is
 * repaired: in one script it gets the floor of the others (or a new epoch), a quarantine of
 * `quarantineMs` (the longest lease TTL) and the commit intents the others hold. Until the
 * quarantine ends its answers do not count toward any majority, because it forgot leases that may
 * still be held; then its intents are settled (the others' intents copied again, from enough of
 * them that no live intent can be missing), and only then does it count again. It is checked on
 * every token operation, every (re)connect and every `checkEveryMs`.
 *
 * Commit intents (rule 4): beginCommit checks the lease and records the intent on every instance,
 * and needs a majority; an acquire that finds an intent on any instance it asks answers `fence`
 * when its token was taken by a majority (granted or fenced there). A single `fence` among the
 * answers is a fence, however many instances granted: nothing is granted then. This is safe
 * because the majority that recorded the intent and the majority a grant needs share at least one
 * instance: on that instance either the intent came first (it answers `fence`, so the grant does
 * not happen) or the grant came first (the lease was then no longer current there, so beginCommit
 * could not count it). Losses of data do not break that shared instance, one loss at a time: a
 * repaired instance holds every live intent again before it counts (see "commit intents of an
 * instance that lost its data" below). A simultaneous loss of a majority loses the intents only
 * they held, as it loses the leases only they held. An intent recorded on only a minority is
 * removed again, and the commit refused. An intent that an endCommit, a clearIntents or a break's
 * fence left on some instances (they reached only the others) is never ignored: the next grant
 * over its object that reaches one of them fences it once more (an extra raise of the HCT, no
 * harm), and clears it.
 *
 * An instance whose eviction policy can drop lease records (../redis/redis-settings.ts, checked on
 * every connect and every `checkEveryMs`) does not count either, until it is fixed.
 *
 * It fails fast: a disconnected instance fails at once (no offline queue), a silent one after
 * commandTimeoutMs; without a majority every operation throws DomainError LeaseStoreUnavailable.
 */
export function createRedlockLeaseStore(opts: RedlockLeaseStoreOptions): RedlockLeaseStore {
  if (opts.urls.length === 0) throw new Error("the Redlock lease store needs at least one Redis URL");
  const P = opts.keyPrefix ?? "{fencegate}";
  const retainMs = opts.retainMs ?? DAY_MS;
  const sweepEveryMs = opts.sweepEveryMs ?? 60_000;
  const timeoutMs = opts.commandTimeoutMs ?? 2_000;
  const maxAttempts = opts.maxAttempts ?? 10;
  const clock = opts.clock;
  const N = opts.urls.length;
  const Q = Math.floor(N / 2) + 1;

  let closed = false;
  const createdAt = Date.now();
  let settled = false;
  const startupSettled = (answered: number) =>
    (settled ||= answered === N || Date.now() - createdAt >= STARTUP_GRACE_MS);
  const instances: Instance[] = opts.urls.map((url, index) => {
    const where = redactUrl(url);
    const redis = openFailClosedRedis(url, { timeoutMs });
    const inst: Instance = { index, where, redis, quarantinedUntil: 0, intentsPending: false, unsafe: null };
    let lastError = "";
    redis.on("error", (e: Error) => {
      if (e.message !== lastError) opts.log?.warn({ err: e.message, redis: where }, "Redlock lease store");
      lastError = e.message;
    });
    // A new connection may be to a restarted server: its floor is checked before it counts.
    redis.on("ready", () => {
      lastError = "";
      // A moment later, so that instances connecting together are checked together.
      checkSettings(inst);
      setTimeout(() => {
        if (!closed) checkFloors().catch(() => undefined);
      }, 100).unref();
    });
    return inst;
  });
  const where = instances.map((i) => i.where).join(", ");

  const unavailable = (why: string) =>
    new DomainError("LeaseStoreUnavailable", `the Redlock lease store (${where}) is unavailable: ${why}`);

  /** Whether an instance's answers count toward a majority now. */
  const eligible = (inst: Instance) =>
    inst.quarantinedUntil <= clock() && !inst.intentsPending && inst.unsafe === null;

  /**
   * An instance whose eviction policy can drop lease records (see ../redis/redis-settings.ts)
   * does not count toward any majority until it is fixed. A check that fails (a timeout) keeps
   * the verdict it had.
   */
  function checkSettings(inst: Instance): Promise<void> {
    return checkRedisSettings(inst.redis).then(
      (report) => {
        const unsafe = report.unsafe.length > 0 ? report.unsafe.join("; ") : null;
        if (unsafe !== inst.unsafe && unsafe !== null) {
          opts.log?.error(
            { redis: inst.where },
            `Redlock lease store: unsafe, left out of the quorum: ${unsafe}`,
          );
        }
        inst.unsafe = unsafe;
      },
      () => undefined,
    );
  }

  async function runOn(
    inst: Instance,
    script: LuaScript,
    args: readonly (string | number)[],
    now: string,
  ): Promise<Answer> {
    if (inst.redis.status !== "ready") return { inst, error: new Error(`${inst.where}: not connected`) };
    try {
      return { inst, reply: await script.run(inst.redis, [P], [now, retainMs, ...args]) };
    } catch (e) {
      return { inst, error: e as Error };
    }
  }

  /** Runs a script on every instance (or `only`) in parallel, with one `now` for all. */
  function onAll(
    script: LuaScript,
    args: readonly (string | number)[] | ((inst: Instance) => readonly (string | number)[]),
    only: readonly Instance[] = instances,
  ): Promise<Answer[]> {
    if (closed) return Promise.reject(unavailable("the store is closed"));
    const now = String(clock());
    return Promise.all(
      only.map((inst) => runOn(inst, script, typeof args === "function" ? args(inst) : args, now)),
    );
  }

  /** The answers that count: from instances out of quarantine, that answered. */
  function counted(answers: Answer[]): { inst: Instance; reply: unknown }[] {
    const out: { inst: Instance; reply: unknown }[] = [];
    for (const a of answers)
      if (a.error === undefined && eligible(a.inst)) out.push({ inst: a.inst, reply: a.reply });
    return out;
  }

  /** The counted answers, or LeaseStoreUnavailable when fewer than a majority answered. */
  function majority(answers: Answer[]): { inst: Instance; reply: unknown }[] {
    const ok = counted(answers);
    if (ok.length >= Q) return ok;
    throw unavailable(explain(answers));
  }

  function explain(answers: Answer[]): string {
    const parts = answers.map((a) => {
      if (a.error) return `${a.inst.where}: ${a.error.message}`;
      if (a.inst.unsafe !== null) return `${a.inst.where}: unsafe settings: ${a.inst.unsafe}`;
      if (a.inst.quarantinedUntil > clock()) {
        return `${a.inst.where}: in quarantine until ${new Date(a.inst.quarantinedUntil).toISOString()} (it lost its data)`;
      }
      if (a.inst.intentsPending) {
        return `${a.inst.where}: out of the quorum until the commit intents it lost are restored from the other instances (it lost its data)`;
      }
      return `${a.inst.where}: ok`;
    });
    return `a majority (${Q} of ${N}) of the Redis instances must answer; ${parts.join("; ")}`;
  }

  // ---- floors, epochs and quarantine ----

  let checking: Promise<Floor[]> | null = null;

  async function readFloors(): Promise<Floor[]> {
    const answers = await onAll(S.readFloor, []);
    const floors: Floor[] = [];
    for (const a of answers) {
      if (a.error) continue;
      const [status, last, epoch, q, , pending] = a.reply as string[];
      const floor = {
        inst: a.inst,
        known: status === "ok",
        last: Number(last),
        epoch: Number(epoch),
        q: Number(q),
        pending: pending === "1",
      };
      if (floor.known) {
        a.inst.quarantinedUntil = floor.q;
        a.inst.intentsPending = floor.pending;
      }
      floors.push(floor);
    }
    return floors;
  }

  /**
   * Every reachable instance's floor, installed where it was unknown. Concurrent callers share
   * one check.
   */
  function floors(): Promise<Floor[]> {
    checking ??= readAndRepair().finally(() => {
      checking = null;
    });
    return checking;
  }

  async function readAndRepair(): Promise<Floor[]> {
    for (let round = 0; round < 4; round++) {
      const read = await readFloors();
      const known = read.filter((f) => f.known);
      const unknown = read.filter((f) => !f.known);
      // Nothing is installed without a majority answering, nor before every instance answered
      // once (or STARTUP_GRACE_MS passed): at start-up the instances connect one by
      // one, and one that connects late would otherwise look like one that lost its data.
      if (unknown.length === 0 || read.length < Q || !startupSettled(read.length)) {
        await settleDue(read);
        return read;
      }
      if (known.length >= Q) {
        // A majority knows its floor: their highest counter is at or above every token granted
        // (every grant's majority shares an instance with them). The newcomer lost leases that
        // may still be held: it stays out of the quorum for the longest TTL. It lost commit
        // intents too: it gets those the others hold in the same step as its floor.
        const last = Math.max(...known.map((f) => f.last));
        const epoch = Math.max(...known.map((f) => f.epoch));
        const { intents } = await intentsOf(known.map((f) => f.inst));
        const q = clock() + opts.quarantineMs;
        await onAll(
          S.installFloor,
          [epoch, last, q, ...intents],
          unknown.map((f) => f.inst),
        );
        for (const f of unknown) {
          f.inst.quarantinedUntil = q;
          f.inst.intentsPending = true;
          opts.log?.warn(
            { redis: f.inst.where, until: new Date(q).toISOString(), intents: intents.length / 6 },
            "Redlock lease store: an instance lost its data (restarted or emptied); it stays out of the quorum until its quarantine ends and its commit intents are settled",
          );
        }
      } else {
        await installNewEpoch(read);
      }
    }
    throw unavailable("the token floors keep changing (are the Redis instances restarting?)");
  }

  /**
   * Fewer than a majority know their floor: counters may all be behind tokens already granted.
   * A new epoch, created durably, puts every token from now on above all of them.
   */
  async function installNewEpoch(read: Floor[]): Promise<void> {
    let epoch: number;
    let first: boolean;
    try {
      const highest = await opts.epochs.highest();
      epoch = highest + 1;
      for (;;) {
        if (epoch > MAX_EPOCH) throw new Error("every epoch is used up");
        if (await opts.epochs.create(epoch)) break;
        epoch++;
      }
      first = highest === -1 && epoch === 0;
    } catch (e) {
      throw unavailable(
        `the token floor is unknown and the epoch store cannot advance it: ${(e as Error).message}`,
      );
    }
    // The very first epoch of a deployment follows no loss: no quarantine, and no intent anywhere.
    const q = first ? 0 : clock() + opts.quarantineMs;
    // Those that lost their data get whatever intents the others still hold (fewer than a
    // majority know their floor here: their settling at the end of the quarantine decides).
    const lost = read.filter((f) => !f.known);
    const { intents } =
      q > 0 && lost.length > 0
        ? await intentsOf(read.filter((f) => f.known).map((f) => f.inst))
        : { intents: [] };
    await onAll(
      S.installFloor,
      [epoch, epoch * EPOCH_SPAN, q, ...intents],
      read.map((f) => f.inst),
    );
    for (const f of lost) {
      if (q === 0) continue;
      f.inst.quarantinedUntil = q;
      f.inst.intentsPending = true;
    }
    opts.log?.info({ epoch, redis: where }, "Redlock lease store: token epoch");
  }

  // ---- commit intents of an instance that lost its data ----
  //
  // A commit intent counts only when a majority recorded it (beginCommit), so that it shares an
  // instance with the majority of any later grant. An instance that loses its data loses its
  // copies, and two such losses, one at a time, could leave a majority of repaired instances that
  // know nothing of an intent the third still holds. So a repaired instance counts again only
  // once it holds every intent the others hold, copied in two steps:
  //
  // 1. with its floor, in the same script (INSTALL_FLOOR): the union of the intents of the
  //    instances whose floor is known;
  // 2. at the end of its quarantine (SETTLE_INTENTS), the union again, read then from at least
  //    N − Q + 1 other instances that are not waiting for their own intents (or from every
  //    instance, when all answer: after a loss of a majority nothing more can be known). Until
  //    that step succeeds, its floor carries the mark `ip` and it counts toward no majority, on
  //    every replica of the gateway (the mark lives in the instance, not here).
  //
  // Why that is enough: with one instance lost at a time, a live intent is still held by at least
  // Q − 1 of the N − 1 others, and any N − Q + 1 of them include one of those.
  //
  // An intent recorded while the repair runs is never needed on the repaired instance: beginCommit
  // counts an instance only while it counts toward a majority, which a repaired instance does
  // only after step 2; such an intent was therefore recorded by a majority of other instances,
  // which every later grant's majority meets. Step 2 also comes late enough to catch an intent
  // whose recording had reached the lost instance before its loss (and was counted there) but
  // reached the others only after step 1 had read them: the others answered beginCommit within
  // its command timeout, far shorter than a quarantine.
  //
  // An intent forgotten while the repair runs (endCommit, or clearIntents after a fence) may be
  // copied back by a step that read it just before: it stays on the repaired instance alone. It is
  // never ignored: the next acquire over its object that reaches that instance answers `fence`
  // (a single fence is enough, see acquireOnce), the object's HCT is raised once more above a
  // token nobody holds, and clearIntents removes it everywhere. It costs that one extra fence, and
  // until then a few bytes in Redis, as an intent left by a gateway that crashed mid-commit does.

  /**
   * The union of the commit intents `from` hold (six values each, as READ_INTENTS lists them),
   * and which of them answered. An instance that does not answer in full counts as not answering.
   */
  async function intentsOf(from: readonly Instance[]): Promise<{ answered: Instance[]; intents: string[] }> {
    const read = await Promise.all(
      from.map(async (inst) => {
        const found = new Map<string, string[]>();
        let cursor = "0";
        do {
          const a = await runOn(inst, S.readIntents, [cursor, INTENT_PAGE], String(clock()));
          if (a.error) return null;
          const [next, flat] = a.reply as [string, unknown[]];
          for (let i = 0; i + 5 < flat.length; i += 6) {
            found.set(String(flat[i]), flat.slice(i, i + 6).map(String));
          }
          cursor = String(next);
        } while (cursor !== "0");
        return { inst, found };
      }),
    );
    const union = new Map<string, string[]>();
    const answered: Instance[] = [];
    for (const r of read) {
      if (r === null) continue;
      answered.push(r.inst);
      for (const [id, intent] of r.found) union.set(id, intent);
    }
    return { answered, intents: [...union.values()].flat() };
  }

  /** Step 2 for every instance whose quarantine is over and whose intents are not settled yet. */
  async function settleDue(read: Floor[]): Promise<void> {
    const now = clock();
    for (const f of read) {
      if (!f.known || !f.pending || f.q > now || Date.now() < (f.inst.settleRetryAt ?? 0)) continue;
      const others = read.filter((o) => o.known && o.inst !== f.inst);
      const { answered, intents } = await intentsOf(others.map((o) => o.inst));
      const settledSources = others.filter((o) => !o.pending && answered.includes(o.inst)).length;
      const everyone = read.length === N && answered.length === others.length;
      if (settledSources < N - Q + 1 && !everyone) {
        f.inst.settleRetryAt = Date.now() + SETTLE_RETRY_MS;
        if (f.inst.settleWarnedFor !== f.q) {
          f.inst.settleWarnedFor = f.q;
          opts.log?.warn(
            { redis: f.inst.where, answered: answered.map((i) => i.where) },
            `Redlock lease store: an instance that lost its data stays out of the quorum until ${N - Q + 1} other instances tell it their commit intents`,
          );
        }
        continue;
      }
      const [a] = await onAll(S.settleIntents, intents, [f.inst]);
      if (a && a.error === undefined && (a.reply as unknown[])[0] === "settled") {
        f.pending = false;
        f.inst.intentsPending = false;
        opts.log?.info(
          { redis: f.inst.where, intents: intents.length / 6 },
          "Redlock lease store: an instance that lost its data has its commit intents back and counts again",
        );
      }
    }
  }

  async function checkFloors(): Promise<void> {
    await floors();
  }

  const afterGrace = setTimeout(() => {
    if (!closed) checkFloors().catch(() => undefined);
  }, STARTUP_GRACE_MS + 10);
  afterGrace.unref();
  const periodic = setInterval(() => {
    if (closed) return;
    checkFloors().catch(() => undefined);
    for (const inst of instances) if (inst.redis.status === "ready") checkSettings(inst);
  }, opts.checkEveryMs ?? 5_000);
  periodic.unref();

  /**
   * Phase 1 of a token: the highest counter of a majority of known floors, plus one. Starts a
   * new epoch when the counter would leave the current one.
   */
  async function proposeToken(): Promise<number> {
    for (let round = 0; round < 3; round++) {
      const known = (await floors()).filter((f) => f.known);
      if (known.length < Q) throw unavailable(explainFloors(known));
      const t = Math.max(...known.map((f) => f.last)) + 1;
      const epoch = Math.max(...known.map((f) => f.epoch));
      if (t < (epoch + 1) * EPOCH_SPAN) return t;
      await installNewEpoch(known);
    }
    throw unavailable("could not install a new token epoch");
  }

  function explainFloors(known: Floor[]): string {
    const ok = new Set(known.map((f) => f.inst));
    const parts = instances.map((i) => `${i.where}: ${ok.has(i) ? "ok" : "no answer"}`);
    return `a majority (${Q} of ${N}) of the Redis instances must answer; ${parts.join("; ")}`;
  }

  // ---- one operation at a time takes tokens in this gateway ----

  let tokenQueue: Promise<unknown> = Promise.resolve();
  function serialized<T>(work: () => Promise<T>): Promise<T> {
    const run = tokenQueue.then(work, work);
    tokenQueue = run.catch(() => undefined);
    return run;
  }

  const jitter = (attempt: number) =>
    new Promise<void>((resolve) => setTimeout(resolve, randomInt(1, 10 + 20 * Math.min(attempt, 5))));

  /** The version of a lease most instances hold (ties: ended, then the later expiry). */
  function merge(records: LeaseRecord[]): LeaseRecord {
    const groups = new Map<string, { lease: LeaseRecord; votes: number }>();
    for (const l of records) {
      const k = JSON.stringify(l, Object.keys(l).sort());
      const g = groups.get(k);
      if (g) g.votes++;
      else groups.set(k, { lease: l, votes: 1 });
    }
    return [...groups.values()].sort(
      (a, b) =>
        b.votes - a.votes ||
        Number(b.lease.endedAt !== undefined) - Number(a.lease.endedAt !== undefined) ||
        b.lease.expiresAt - a.lease.expiresAt,
    )[0]!.lease;
  }

  /** Leases by id with the instances that reported them, in token order. */
  function tally(lists: LeaseRecord[][]): { lease: LeaseRecord; votes: number }[] {
    const byId = new Map<string, LeaseRecord[]>();
    for (const list of lists) {
      for (const l of list) {
        const all = byId.get(l.leaseId);
        if (all) all.push(l);
        else byId.set(l.leaseId, [l]);
      }
    }
    return [...byId.values()]
      .map((all) => ({ lease: merge(all), votes: all.length }))
      .sort((a, b) => a.lease.token - b.lease.token);
  }

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
    const [kind, s] = resourceArgs(input.resource);
    const id = newLeaseId();
    const args = [kind, input.resource.bucket, s, input.owner, input.ttlMs, id, input.principal ?? "", t];
    const answers = await onAll(S.acquire, args);
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
    await onAll(S.sweep, [SWEEP_LIMIT]);
  }
  let lastSweepAt = Number.NEGATIVE_INFINITY;

  const store: RedlockLeaseStore = {
    kind: "redlock",

    async tryAcquire(input) {
      validateAcquire(input);
      return await serialized(async () => {
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
    },

    async get(leaseId) {
      const found = majority(await onAll(S.get, [leaseId]))
        .map((a) => decodeLease(a.reply))
        .filter((l): l is LeaseRecord => l !== null);
      return found.length > 0 ? merge(found) : null;
    },

    async renew(leaseId, ttlMs) {
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
        return lease;
      }
      if (by("notfound").length >= Q) throw leaseNotFound(leaseId);
      const broken = by("broken").length;
      const released = by("released").length + broken;
      const expired = by("expired");
      if (released > 0 && released + expired.length + by("notfound").length >= Q) {
        throw lostByRelease(leaseId, broken > 0);
      }
      if (expired.length > 0 && released + expired.length + by("notfound").length >= Q) {
        const at = new Date(Number((expired[0]!.reply as unknown[])[1])).toISOString();
        throw new DomainError("LeaseLost", `lease ${leaseId} expired at ${at}`, {
          leaseId,
          reason: "expired",
        });
      }
      throw unavailable(`the renewal did not reach a majority in time: ${explain(answers)}`);
    },

    async release(leaseId) {
      const answers = await onAll(S.release, [leaseId]);
      const ok = counted(answers);
      const ended = ok.filter((a) => ["released", "expired"].includes(String((a.reply as unknown[])[0])));
      const notfound = ok.filter((a) => (a.reply as unknown[])[0] === "notfound");
      if (ended.length > 0 && ended.length + notfound.length >= Q) {
        const released = ended.filter((a) => (a.reply as unknown[])[0] === "released");
        const pick = released.length * 2 >= ended.length ? released : ended;
        return merge(pick.map((a) => decodeLease((a.reply as unknown[])[1])!));
      }
      if (notfound.length >= Q) throw leaseNotFound(leaseId);
      throw unavailable(explain(answers));
    },

    breakLease(leaseId) {
      return serialized(async () => {
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
          const r = JSON.parse(json) as Record<string, string>;
          const k = `${r.leaseId} ${r.delegateId}`;
          const v = votes.get(k);
          if (v) v.votes++;
          else {
            const d = {
              delegateId: r.delegateId!,
              leaseId: r.leaseId!,
              createdBy: r.createdBy!,
              createdAt: Number(r.createdAt),
            };
            votes.set(k, { d, votes: 1, at });
          }
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

    async list({ bucket, prefix }) {
      const args = [
        bucket ?? "",
        bucket === undefined ? "0" : "1",
        prefix ?? "",
        prefix === undefined ? "0" : "1",
      ];
      const ok = majority(await onAll(S.list, args));
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
      const ok = majority(await onAll(S.collectExpired, [COLLECT_LIMIT]));
      // Each instance reports an expiry once; the call that saw a majority report it reports it.
      // The one-Redis script answers {'ok', leases, seq} (older versions: the leases alone).
      const leasesOf = (r: unknown) => decodeLeases(Array.isArray(r) && r[0] === "ok" ? r[1] : r);
      const reported = tally(ok.map((a) => leasesOf(a.reply)))
        .filter((v) => v.votes >= Q)
        .map((v) => v.lease);
      await maybeSweep().catch(() => undefined);
      return reported;
    },

    async beginCommit(intent): Promise<CommitIntent> {
      const intentId = randomBytes(12).toString("base64url");
      const fenced = intent.kind === "fenced";
      // An unfenced write's ceiling: the highest counter of a majority, raised to on every instance
      // that records the intent, so that every later token is above it.
      const ceiling = fenced ? 0 : (await proposeToken()) - 1;
      const args = [
        intentId,
        intent.kind,
        intent.bucket,
        intent.key,
        fenced ? intent.leaseId : "",
        fenced ? intent.token : 0,
        ceiling,
      ];
      const answers = await onAll(S.beginCommit, args);
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
      if (closed) throw unavailable("the store is closed");
      const answers: Answer[] = await Promise.all(
        instances.map(async (inst): Promise<Answer> => {
          if (inst.redis.status !== "ready") return { inst, error: new Error("not connected") };
          try {
            return { inst, reply: await inst.redis.ping() };
          } catch (e) {
            return { inst, error: e as Error };
          }
        }),
      );
      majority(answers);
    },

    async close() {
      if (closed) return;
      closed = true;
      clearInterval(periodic);
      clearTimeout(afterGrace);
      // Not QUIT, which waits for an answer a silent Redis never gives: a shutdown must not wait.
      for (const i of instances) i.redis.disconnect();
    },

    async ready(waitMs) {
      const deadline = Date.now() + waitMs;
      for (;;) {
        if (instances.filter((i) => i.redis.status === "ready").length >= Q) {
          try {
            const known = (await floors()).filter((f) => f.known && eligible(f.inst));
            if (known.length >= Q) return true;
          } catch {
            // not yet
          }
        }
        if (Date.now() >= deadline || closed) return false;
        await new Promise((r) => setTimeout(r, 50));
      }
    },

    instances() {
      return instances.map((i) => ({
        url: i.where,
        connected: i.redis.status === "ready",
        quarantinedUntil: i.quarantinedUntil,
        intentsPending: i.intentsPending,
        unsafe: i.unsafe,
      }));
    },

    checkFloors,

    async checkSettings() {
      await Promise.all(instances.filter((i) => i.redis.status === "ready").map(checkSettings));
    },

    async sweep() {
      lastSweepAt = Date.now();
      const ok = majority(await onAll(S.sweep, [SWEEP_LIMIT]));
      return Math.max(0, ...ok.map((a) => Number(a.reply)));
    },
  };

  return store;
}

/** A lease as the fields of its Redis hash (the reverse of decodeLease). */
function encodeLease(l: LeaseRecord): Record<string, string> {
  const f: Record<string, string> = {
    id: l.leaseId,
    b: l.bucket,
    o: l.owner,
    tok: String(l.token),
    ttl: String(l.ttlMs),
    acq: String(l.acquiredAt),
    exp: String(l.expiresAt),
  };
  if (l.key !== undefined) f.k = l.key;
  else f.p = l.prefix ?? "";
  if (l.principal !== undefined) f.pr = l.principal;
  if (l.releasedAt !== undefined) f.rel = String(l.releasedAt);
  if (l.brokenAt !== undefined) f.brk = String(l.brokenAt);
  if (l.endedAt !== undefined) f.end = String(l.endedAt);
  return f;
}
