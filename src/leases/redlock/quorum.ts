import { randomInt } from "node:crypto";
import type { Redis } from "ioredis";
import type { Clock } from "../../core/clock.js";
import { DomainError } from "../../core/errors.js";
import type { Logger } from "../../core/log.js";
import { LuaScript } from "../../core/lua-source.js";
import { DEFAULT_REDIS_KEY_PREFIX } from "../../core/redis/audit-append.js";
import { openFailClosedRedis, redactUrl, warnOnErrors } from "../../core/redis-connection.js";
import type { LeaseRecord } from "../lease-store.js";
import { EPOCH_SPAN, type EpochStore, MAX_EPOCH } from "../redis-shared/epoch-store.js";
import { checkRedisSettings } from "../redis-shared/redis-settings.js";
import { DEFAULTS } from "../redis-shared/scripts.js";
import { INSTALL_FLOOR, READ_FLOOR, READ_INTENTS, SETTLE_INTENTS } from "./lua/redlock-scripts.js";

/**
 * The quorum engine of the Redlock lease store, apart from what a lease means (the store,
 * redlock-lease-store.ts, says what each operation asks and how its answers decide): the N
 * instances and their connections, which answers count toward a majority (floor(N/2) + 1), the
 * token floors and epochs (phase 1 of a token), and the merging of answers into one (votes).
 *
 * An instance whose floor is unknown (a restart changed its run id, or its data is gone) is
 * repaired: in one script it gets the floor of the others (or a new epoch), a quarantine of
 * `quarantineMs` (the longest lease TTL) and the commit intents the others hold. Until the
 * quarantine ends its answers do not count toward any majority, because it forgot leases that may
 * still be held; then its intents are settled (the others' intents copied again, from enough of
 * them that no live intent can be missing), and only then does it count again. It is checked on
 * every token operation, every (re)connect and every `checkEveryMs`.
 *
 * An instance whose eviction policy can drop lease records (../redis-shared/redis-settings.ts,
 * checked on every connect and every `checkEveryMs`) does not count either, until it is fixed.
 */

export type QuorumOptions = {
  /** The independent Redis masters (3 or 5 recommended), redis:// or rediss:// URLs. */
  urls: readonly string[];
  /** Where token epochs live durably (see ../redis-shared/epoch-store.ts). */
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
  /** A command unanswered by then fails on that instance. Default 2 s. */
  commandTimeoutMs?: number;
  /** How often every instance's run id and floor are checked besides every token operation. Default 5 s. */
  checkEveryMs?: number;
  log?: Logger;
};

/** How long a new store waits for every instance to connect before it installs floors without them. */
const STARTUP_GRACE_MS = 2_000;
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
};

export type Instance = {
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

type Floor = {
  inst: Instance;
  known: boolean;
  last: number;
  epoch: number;
  q: number;
  pending: boolean;
};

/** An answer that counts: from an instance that may vote, that answered. */
type Counted = { inst: Instance; reply: unknown };

export type Quorum = ReturnType<typeof createQuorum>;

export function createQuorum(opts: QuorumOptions) {
  if (opts.urls.length === 0) throw new Error("the Redlock lease store needs at least one Redis URL");
  const { clock } = opts;
  const P = opts.keyPrefix ?? DEFAULT_REDIS_KEY_PREFIX;
  const retainMs = opts.retainMs ?? DEFAULTS.retainMs;
  const timeoutMs = opts.commandTimeoutMs ?? 2_000;
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
    warnOnErrors(redis, opts.log, "Redlock lease store", where);
    // A new connection may be to a restarted server: its floor is checked before it counts.
    redis.on("ready", () => {
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
   * An instance whose eviction policy can drop lease records (see ../redis-shared/redis-settings.ts)
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

  /** One instance's answer to `call`; a disconnected instance is not asked. */
  async function ask(inst: Instance, call: (redis: Redis) => Promise<unknown>): Promise<Answer> {
    if (inst.redis.status !== "ready") return { inst, error: new Error(`${inst.where}: not connected`) };
    try {
      return { inst, reply: await call(inst.redis) };
    } catch (e) {
      return { inst, error: e as Error };
    }
  }

  const runOn = (inst: Instance, script: LuaScript, args: readonly (string | number)[], now: string) =>
    ask(inst, (redis) => script.run(redis, [P], [now, retainMs, ...args]));

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
  function counted(answers: Answer[]): Counted[] {
    const out: Counted[] = [];
    for (const a of answers)
      if (a.error === undefined && eligible(a.inst)) out.push({ inst: a.inst, reply: a.reply });
    return out;
  }

  /** The counted answers, or LeaseStoreUnavailable when fewer than a majority answered. */
  function majority(answers: Answer[]): Counted[] {
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
  // (a single fence is enough, see acquireOnce in redlock-lease-store.ts), the object's HCT is raised once more above a
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

  // ---- one operation at a time takes tokens in this gateway (serialized) ----

  let tokenQueue: Promise<unknown> = Promise.resolve();
  function serialized<T>(work: () => Promise<T>): Promise<T> {
    const run = tokenQueue.then(work, work);
    tokenQueue = run.catch(() => undefined);
    return run;
  }

  return {
    N,
    Q,
    unavailable,
    eligible,
    onAll,
    counted,
    majority,
    explain,
    proposeToken,
    serialized,
    /** A random pause before attempt `attempt` of an operation whose proposed token collided. */
    jitter: (attempt: number) =>
      new Promise<void>((resolve) => setTimeout(resolve, randomInt(1, 10 + 20 * Math.min(attempt, 5)))),
    checkFloors,

    /** Checks every connected instance's settings now. */
    async checkSettings() {
      await Promise.all(instances.filter((i) => i.redis.status === "ready").map(checkSettings));
    },

    /** Throws LeaseStoreUnavailable unless a majority answers PING. */
    async ping() {
      if (closed) throw unavailable("the store is closed");
      majority(await Promise.all(instances.map((inst) => ask(inst, (redis) => redis.ping()))));
    },

    /** Resolves true once a majority is connected with known floors, false after `waitMs`. */
    async ready(waitMs: number) {
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

    /** Per instance: its URL, whether it answers, and what keeps it out of the quorum. */
    describe() {
      return instances.map((i) => ({
        url: i.where,
        connected: i.redis.status === "ready",
        quarantinedUntil: i.quarantinedUntil,
        intentsPending: i.intentsPending,
        unsafe: i.unsafe,
      }));
    },

    close() {
      if (closed) return;
      closed = true;
      clearInterval(periodic);
      clearTimeout(afterGrace);
      // Not QUIT, which waits for an answer a silent Redis never gives: a shutdown must not wait.
      for (const i of instances) i.redis.disconnect();
    },
  };
}

// ---- votes: the instances' answers merged into one ----

/** The version of a lease most instances hold (ties: ended, then the later expiry). */
export function merge(records: LeaseRecord[]): LeaseRecord {
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
export function tally(lists: LeaseRecord[][]): { lease: LeaseRecord; votes: number }[] {
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
