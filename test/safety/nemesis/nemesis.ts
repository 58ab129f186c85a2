/**
 * The nemesis of a run: faults on a seeded schedule, each bounded in time so that the system can
 * make progress between them. Two lanes run side by side, so that faults also overlap:
 *
 * - the network lane: chaos on the store's commit requests and reads of the objects' state
 *   (holds, delays, lost answers, late answers, resets, duplicates), chaos on every store request
 *   at a lower rate, every commit held in the network for a while (then let through, late), chaos
 *   on Redis commands (delays, lost and late answers, resets);
 * - the process lane: a replica stopped (SIGSTOP) for longer than the longest lease TTL and
 *   resumed; Redis killed (kill -9) and restarted from its append-only file.
 *
 * Each lane takes its kinds in a shuffled order, every kind once per round, so that a short run
 * still sees each of them. The seed fixes the kinds, their order, durations, victims and the
 * proxies' own random choices; the timing of real processes does the rest.
 */
import { type FaultAction, seededRandom as seeded } from "../../support/fault-rules.js";
import { sleep } from "../../support/wait.js";
import type { Cluster } from "./cluster.js";

export type NemesisKind =
  | "store-commit-chaos"
  | "store-chaos"
  | "store-commit-hold"
  | "redis-chaos"
  | "replica-pause"
  | "redis-kill";

export const NEMESIS_KINDS: readonly NemesisKind[] = [
  "store-commit-chaos",
  "store-chaos",
  "store-commit-hold",
  "redis-chaos",
  "replica-pause",
  "redis-kill",
];

const NETWORK_LANE: NemesisKind[] = ["store-commit-chaos", "store-chaos", "store-commit-hold", "redis-chaos"];
// Replica pauses are what fencing exists for: twice per round.
const PROCESS_LANE: NemesisKind[] = ["replica-pause", "redis-kill", "replica-pause"];

/** One fault as it happened, for the run's report. */
export type NemesisEvent = { kind: NemesisKind; startedAt: number; endedAt: number; detail: string };

export type NemesisOptions = {
  /** The longest lease TTL the clients ask for: a replica pause lasts longer. */
  maxTtlMs: number;
  /** The store timeout of the replicas: the chaos's delays straddle it. */
  storeTimeoutMs: number;
  redisTimeoutMs: number;
  /** Milliseconds since the run began (the history's clock). */
  now: () => number;
};

export class Nemesis {
  readonly events: NemesisEvent[] = [];
  private readonly stopped = new Set<number>();
  private redisDown = false;

  constructor(
    private readonly cluster: Cluster,
    private readonly random: () => number,
    private readonly opts: NemesisOptions,
  ) {}

  /** Runs both lanes until `over()` says the run is over; every fault is healed when it resolves. */
  async run(over: () => boolean): Promise<void> {
    // Each lane draws from its own generator, seeded from the run's: their schedules do not shift
    // when the other lane's timing changes.
    const network = seeded(Math.floor(this.random() * 2 ** 32));
    const processes = seeded(Math.floor(this.random() * 2 ** 32));
    // A lane that fails stops the other one too: no fault is left running unattended.
    let failed = false;
    const stop = () => failed || over();
    const lanes = await Promise.allSettled(
      [
        this.lane(NETWORK_LANE, network, stop, [300, 1_500]),
        this.lane(PROCESS_LANE, processes, stop, [1_500, 4_000]),
      ].map((lane) =>
        lane.catch((e: unknown) => {
          failed = true;
          throw e;
        }),
      ),
    );
    await this.heal();
    for (const lane of lanes) if (lane.status === "rejected") throw lane.reason;
  }

  /** Every fault off: proxies calm and empty-handed, replicas running, Redis up. */
  async heal(): Promise<void> {
    this.cluster.store.proxy.calm();
    this.cluster.redisProxy.calm();
    this.disarm();
    for (const i of this.stopped) this.resume(i);
    if (this.redisDown) await this.restartRedis();
  }

  /** Faults injected so far, by kind: the nemesis's episodes and the proxies' actions. */
  counts(): {
    episodes: Record<string, number>;
    store: Record<string, number>;
    redis: Record<string, number>;
  } {
    const episodes: Record<string, number> = Object.fromEntries(NEMESIS_KINDS.map((k) => [k, 0]));
    for (const e of this.events) episodes[e.kind] = (episodes[e.kind] ?? 0) + 1;
    const tally = (seen: Array<{ action: string }>) => {
      const out: Record<string, number> = {};
      for (const s of seen) if (s.action !== "forward") out[s.action] = (out[s.action] ?? 0) + 1;
      return out;
    };
    return {
      episodes,
      store: tally(this.cluster.store.proxy.seen),
      redis: tally(this.cluster.redisProxy.seen),
    };
  }

  private async lane(
    kinds: NemesisKind[],
    random: () => number,
    over: () => boolean,
    gap: [number, number],
  ): Promise<void> {
    let round: NemesisKind[] = [];
    while (!over()) {
      if (round.length === 0) round = shuffle(kinds, random);
      const kind = round.shift()!;
      const startedAt = this.opts.now();
      const detail = await this.inject(kind, random);
      this.events.push({ kind, startedAt, endedAt: this.opts.now(), detail });
      if (over()) break;
      await sleep(between(random, gap[0], gap[1]));
    }
  }

  /** One-shot and hold rules armed by the episode under way (cancelled at its end, or by heal). */
  private readonly armed = new Set<{ cancel(): void }>();

  private arm<R extends { cancel(): void }>(rule: R): R {
    this.armed.add(rule);
    return rule;
  }

  private disarm(): void {
    for (const rule of this.armed) rule.cancel();
    this.armed.clear();
  }

  private async inject(kind: NemesisKind, random: () => number): Promise<string> {
    const { store, redisProxy, replicas } = this.cluster;
    const timeout = this.opts.storeTimeoutMs;
    const lasting = between(random, 1_500, 4_000);
    switch (kind) {
      case "store-commit-chaos":
      case "store-chaos": {
        const commits = kind === "store-commit-chaos";
        const seed = Math.floor(random() * 2 ** 32);
        const probability = commits ? 0.5 : 0.1;
        const actions = storeActions(timeout);
        // The commits, and the reads of the objects' state a write makes around its commit.
        const match = commits ? this.cluster.objectState : undefined;
        if (match) {
          // The first requests of the episode get one of each fault (holds come from the chaos
          // and the hold episodes), the others the chaos's draw.
          for (const action of shuffle(
            actions.filter((a) => a.kind !== "hold"),
            random,
          )) {
            this.arm(store.proxy.on(match, action));
          }
        }
        store.proxy.chaos({
          seed,
          probability,
          // Delays on both sides of the replicas' store timeout.
          actions,
          holdMs: Math.round(between(random, timeout, timeout * 3)),
          ...(match ? { match } : {}),
        });
        await sleep(lasting);
        store.proxy.calm();
        this.disarm();
        return `seed ${seed}, p=${probability}, ${Math.round(lasting)} ms`;
      }
      case "store-commit-hold": {
        // Every commit stuck in the network from the next one on, long enough for the writes that
        // sent one to give up (answered unknown), then let through together, late.
        const rule = this.arm(
          store.proxy.on(this.cluster.commits, { kind: "hold" }, { times: Number.POSITIVE_INFINITY }),
        );
        const holding = between(random, 4_500, 6_500);
        const caught = await Promise.race([rule.reached.then(() => true), sleep(10_000).then(() => false)]);
        if (caught) await sleep(holding);
        this.disarm();
        return caught
          ? `${rule.count} commits held for ${Math.round(holding)} ms`
          : "no commit came within 10 s";
      }
      case "redis-chaos": {
        const seed = Math.floor(random() * 2 ** 32);
        const actions = redisActions(this.opts.redisTimeoutMs);
        for (const action of shuffle(actions, random))
          this.arm(redisProxy.on({ command: "EVALSHA" }, action));
        redisProxy.chaos({ seed, probability: 0.15, actions });
        await sleep(lasting);
        redisProxy.calm();
        this.disarm();
        return `seed ${seed}, p=0.15, ${Math.round(lasting)} ms`;
      }
      case "replica-pause": {
        const victim = Math.floor(random() * replicas.length);
        const ms = this.opts.maxTtlMs + between(random, 300, 1_500);
        process.kill(replicas[victim]!.child.pid!, "SIGSTOP");
        this.stopped.add(victim);
        await sleep(ms);
        this.resume(victim);
        return `r${victim} stopped for ${Math.round(ms)} ms`;
      }
      case "redis-kill": {
        const down = between(random, 200, 1_500);
        this.redisDown = true;
        await this.cluster.redis.kill9();
        await sleep(down);
        await this.restartRedis();
        return `down for ${Math.round(down)} ms`;
      }
    }
  }

  private resume(i: number): void {
    try {
      process.kill(this.cluster.replicas[i]!.child.pid!, "SIGCONT");
    } catch {}
    this.stopped.delete(i);
  }

  private async restartRedis(): Promise<void> {
    // restart() starts redis-server on the same port and directory: it reloads the AOF.
    for (let attempt = 1; ; attempt++) {
      try {
        this.cluster.redis = await this.cluster.redis.restart();
        this.redisDown = false;
        return;
      } catch (e) {
        if (attempt >= 5) throw e;
        await sleep(200);
      }
    }
  }
}

function storeActions(timeoutMs: number): FaultAction[] {
  return [
    { kind: "hold" },
    { kind: "delay", ms: Math.round(timeoutMs * 0.3) },
    { kind: "delay", ms: Math.round(timeoutMs * 1.5) },
    { kind: "drop-answer" },
    { kind: "delay-answer", ms: Math.round(timeoutMs * 0.3) },
    { kind: "delay-answer", ms: Math.round(timeoutMs * 1.5) },
    { kind: "reset" },
    { kind: "duplicate" },
  ];
}

/** TCP neither duplicates nor replays a command, and the replicas' clients never resend one. */
function redisActions(timeoutMs: number): FaultAction[] {
  return [
    { kind: "delay", ms: Math.round(timeoutMs * 0.3) },
    { kind: "delay", ms: Math.round(timeoutMs * 1.5) },
    { kind: "drop-answer" },
    { kind: "delay-answer", ms: Math.round(timeoutMs * 1.5) },
    { kind: "reset" },
  ];
}

export const between = (random: () => number, lo: number, hi: number): number => lo + random() * (hi - lo);

export function shuffle<T>(items: readonly T[], random: () => number): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}
