import type { AuditDraft, AuditLog } from "../audit/audit-log.js";
import type { Logger } from "../core/log.js";
import type { LeaseStore } from "../leases/lease-store.js";
import type { OutcomeUnknownError, Settled } from "./commit-driver.js";
import { unknownKey } from "./write-notes.js";

/**
 * Writes whose outcome is unknown, until the gateway has learnt it.
 *
 * A write whose commit was sent and whose answer never came was answered "unknown" and recorded
 * with decision "unknown"; its commit intent stays in the lease store, so that a lease granted
 * meanwhile fences the object first. Here, in the background, the gateway learns what happened
 * (OutcomeUnknownError.settle(): the write's id in the object's history, or a touch that makes
 * sure it can no longer land), records the outcome under the same requestId, and only then ends
 * the intent. While the store cannot tell, it tries again, less and less often. A gateway that
 * stops before it knows leaves the intent: the next grant on the object fences it.
 */
type OutcomesOptions = {
  audit: AuditLog;
  leases: LeaseStore;
  log?: Logger;
  /** The first pause between attempts, doubled up to `maxRetryMs`. Defaults 200 ms and 5 s. */
  retryMs?: number;
  maxRetryMs?: number;
};

type Pending = {
  error: OutcomeUnknownError;
  /** The record of the unknown decision, as written: the outcome's record is the same but for it. */
  draft: AuditDraft;
  intentId: string | undefined;
  /** The key of the outcome's record (AuditLog.appendOnce): recorded once, by whoever learns it. */
  once: string;
  /**
   * The "unknown" record may be missing (its append failed): it is appended before the outcome's,
   * so that the log says what the client heard before it says how the write ended.
   */
  unrecorded: boolean;
  done: Promise<void>;
};

export class Outcomes {
  private readonly pending = new Set<Pending>();
  private closed = false;
  private readonly wake = new Set<() => void>();

  constructor(private readonly opts: OutcomesOptions) {}

  /** How many writes wait for their outcome (health, metrics). */
  get size(): number {
    return this.pending.size;
  }

  /**
   * Starts learning the outcome of a write answered "unknown" and recorded as `draft`
   * (`unrecorded`: the log may not have taken that record).
   */
  track(
    error: OutcomeUnknownError,
    draft: AuditDraft,
    intentId: string | undefined,
    once: string,
    unrecorded = false,
  ): void {
    if (this.closed) return;
    const entry = { error, draft, intentId, once, unrecorded } as Pending;
    entry.done = this.run(entry).finally(() => this.pending.delete(entry));
    this.pending.add(entry);
  }

  /** Resolves once every write tracked so far has its outcome recorded (tests, shutdown). */
  async settled(): Promise<void> {
    while (this.pending.size > 0) await Promise.all([...this.pending].map((p) => p.done));
  }

  /** Stops trying; what is still unknown keeps its commit intent (the next grant fences it). */
  close(): void {
    this.closed = true;
    for (const wake of this.wake) wake();
  }

  private async run(entry: Pending): Promise<void> {
    const { log } = this.opts;
    let pause = this.opts.retryMs ?? 200;
    const maxPause = this.opts.maxRetryMs ?? 5_000;
    for (let attempt = 1; !this.closed; attempt++) {
      let outcome: Settled;
      try {
        outcome = await entry.error.settle();
      } catch (err) {
        if (attempt === 1 || attempt % 10 === 0) {
          log?.warn(
            { err, ...entry.error.ref, requestId: entry.draft.requestId, attempt },
            "the outcome of a write is still unknown; trying again",
          );
        }
        await this.sleep(pause);
        pause = Math.min(maxPause, pause * 2);
        continue;
      }
      try {
        const { time: _time, ...draft } = entry.draft;
        // Once, and not after the outcome's record (a grant may have recorded the outcome already).
        if (entry.unrecorded) await this.opts.audit.appendOnce(draft, unknownKey(entry.once), entry.once);
        entry.unrecorded = false;
        await this.opts.audit.appendOnce(
          {
            ...draft,
            decision: outcome === "landed" ? "accepted" : "rejected",
            reason: outcome === "landed" ? null : "ServiceUnavailable",
            highestToken: outcome === "landed" ? draft.token : null,
          },
          entry.once,
        );
      } catch (err) {
        // The outcome is known but not recorded: try again (settling again is harmless).
        log?.warn({ err, requestId: entry.draft.requestId }, "the audit log did not take a write's outcome");
        await this.sleep(pause);
        continue;
      }
      log?.info(
        { ...entry.error.ref, requestId: entry.draft.requestId, outcome },
        "learnt the outcome of a write whose answer was lost",
      );
      if (entry.intentId) await this.opts.leases.endCommit(entry.intentId).catch(() => undefined);
      return;
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wake.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      timer.unref();
      this.wake.add(done);
    });
  }
}
