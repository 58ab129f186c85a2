/**
 * What the fault proxies (fault-proxy.ts for HTTP stores, redis-fault-proxy.ts for Redis) share:
 * the actions, the rules that pick requests for them, holds, and the seeded random mode.
 *
 * A rule takes the requests its match accepts, in arrival order, up to `times` of them (default
 * 1); rules are tried in the order they were added and the first one with takes left wins. A
 * request no rule takes goes to the random mode when it is on (`chaos`), else it is forwarded.
 */
import type { Socket } from "node:net";

/** What a proxy does with one request (each proxy's header says what each means on its wire). */
export type FaultAction =
  | { kind: "forward" }
  | { kind: "hold" }
  | { kind: "delay"; ms: number }
  | { kind: "drop-answer" }
  | { kind: "delay-answer"; ms: number }
  | { kind: "reset" }
  | { kind: "duplicate" };

export type FaultKind = FaultAction["kind"];

export type RuleOptions = {
  /** How many requests the rule takes (default 1; `Infinity` for all of them). */
  times?: number;
};

export type FaultRule<Info> = {
  /**
   * Resolves with the first request the rule took: once it is held for "hold" (its body read in
   * full), as soon as it arrives for the other actions.
   */
  readonly reached: Promise<Info>;
  /** How many requests the rule has taken so far. */
  readonly count: number;
  /** How many of them it holds right now. */
  readonly held: number;
  /** Forwards every request it holds now; one it takes later is held until the next release(). */
  release(): void;
  /** Disarms the rule: it takes no more requests, and what it holds is released. */
  cancel(): void;
};

export type ChaosOptions<Match> = {
  /** The same seed gives the same sequence of actions for the same sequence of requests. */
  seed: number;
  /** The chance (0 to 1) that a matching request gets an action drawn from `actions`. */
  probability: number;
  actions: FaultAction[];
  /** Which requests it applies to (default: every request no rule took). */
  match?: Match;
  /** How long a random hold lasts before it is released by itself (default 1000 ms). */
  holdMs?: number;
};

/** What the rules decided for one request. */
export type Decision = {
  action: FaultAction;
  /**
   * For "hold": call once the request is ready to go (body read); resolves true when it is
   * released, false when the proxy closed meanwhile (then it is never forwarded).
   */
  hold(): Promise<boolean>;
};

type Gate = { waiting: Array<(go: boolean) => void> };

type RuleState<Match, Info> = Gate & {
  match: Match;
  action: FaultAction;
  times: number;
  count: number;
  active: boolean;
  reach: (info: Info) => void;
  reachedOnce: boolean;
};

const FORWARD: FaultAction = { kind: "forward" };

/**
 * Mulberry32: a tiny, well-mixed 32-bit PRNG. Its whole state is one number, so a run is replayed
 * from its seed.
 */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/**
 * The rules of one proxy. `matches(match, request)` says whether a rule's match accepts a
 * request; `Info` is what `reached` resolves with.
 */
export class FaultRules<Match, Info> {
  private rules: RuleState<Match, Info>[] = [];
  private random:
    | (Gate & { options: ChaosOptions<Match>; next: () => number; timers: Set<NodeJS.Timeout> })
    | null = null;
  private closed = false;

  constructor(private readonly matches: (match: Match, info: Info) => boolean) {}

  add(match: Match, action: FaultAction, options: RuleOptions = {}): FaultRule<Info> {
    let reach!: (info: Info) => void;
    const reached = new Promise<Info>((resolve) => {
      reach = resolve;
    });
    const state: RuleState<Match, Info> = {
      match,
      action,
      times: options.times ?? 1,
      count: 0,
      active: true,
      waiting: [],
      reach,
      reachedOnce: false,
    };
    this.rules.push(state);
    return {
      reached,
      get count() {
        return state.count;
      },
      get held() {
        return state.waiting.length;
      },
      release: () => open(state, true),
      cancel: () => {
        state.active = false;
        open(state, true);
      },
    };
  }

  /** Picks the action for a request, counting it against the rule that takes it. */
  decide(info: Info): Decision {
    for (const rule of this.rules) {
      if (!rule.active || rule.count >= rule.times || !this.matches(rule.match, info)) continue;
      rule.count++;
      const reachNow = () => {
        if (rule.reachedOnce) return;
        rule.reachedOnce = true;
        rule.reach(info);
      };
      if (rule.action.kind !== "hold") reachNow();
      return {
        action: rule.action,
        hold: () => {
          if (this.closed) return Promise.resolve(false);
          // A rule cancelled meanwhile (or released before the body was in) lets it go at once.
          if (!rule.active) return Promise.resolve(true);
          const held = wait(rule);
          reachNow();
          return held;
        },
      };
    }
    const random = this.random;
    if (random && (random.options.match === undefined || this.matches(random.options.match, info))) {
      // Two draws per request, whatever the outcome, so that request n always gets the same pair.
      const roll = random.next();
      const pick = random.next();
      const { actions, probability } = random.options;
      if (roll < probability && actions.length > 0) {
        const action = actions[Math.floor(pick * actions.length)]!;
        return {
          action,
          hold: () => {
            if (this.closed) return Promise.resolve(false);
            if (this.random !== random) return Promise.resolve(true);
            const held = wait(random);
            const timer = setTimeout(() => {
              random.timers.delete(timer);
              // Releases the oldest hold: each one lasts about holdMs.
              random.waiting.shift()?.(true);
            }, random.options.holdMs ?? 1_000);
            random.timers.add(timer);
            return held;
          },
        };
      }
    }
    return { action: FORWARD, hold: () => Promise.resolve(!this.closed) };
  }

  /** Turns the random mode on (replacing a previous one, whose holds are released). */
  chaos(options: ChaosOptions<Match>): void {
    this.calm();
    this.random = { options, next: seededRandom(options.seed), waiting: [], timers: new Set() };
  }

  /** Turns the random mode off and releases what it holds. */
  calm(): void {
    const random = this.random;
    this.random = null;
    if (!random) return;
    for (const timer of random.timers) clearTimeout(timer);
    open(random, true);
  }

  /** Forgets every rule and the random mode; what they hold is released. */
  clear(): void {
    for (const rule of this.rules.splice(0)) {
      rule.active = false;
      open(rule, true);
    }
    this.calm();
  }

  /** What is held now is never forwarded; what comes later is no longer held. */
  close(): void {
    this.closed = true;
    for (const rule of this.rules) {
      rule.active = false;
      open(rule, false);
    }
    if (this.random) {
      for (const timer of this.random.timers) clearTimeout(timer);
      open(this.random, false);
      this.random = null;
    }
  }
}

function wait(gate: Gate): Promise<boolean> {
  return new Promise<boolean>((resolve) => gate.waiting.push(resolve));
}

function open(gate: Gate, go: boolean): void {
  for (const resolve of gate.waiting.splice(0)) resolve(go);
}

/** A TCP reset (RST) where the socket allows it, else a plain close. */
export function resetSocket(socket: Socket): void {
  if (socket.destroyed) return;
  try {
    socket.resetAndDestroy();
  } catch {
    socket.destroy();
  }
}
