import { encodeCursor } from "../audit/audit-cursor.js";
import type { AuditLog, AuditQuery, AuditRecord } from "../audit/audit-log.js";
import type { Logger } from "../core/log.js";

type TailOptions = {
  audit: AuditLog;
  now: () => number;
  log: Logger;
  /** How often the log is asked for new records while someone listens (default 500 ms). */
  pollMs?: number;
  /** How far back the first records a listener gets reach (default 15 min). */
  backlogMs?: number;
  /** Records kept for a new listener (default 200). */
  keep?: number;
};

type Listener = (records: AuditRecord[]) => void;

/** Pages one poll reads at most (1,000 records each); a longer backlog is read on later polls. */
const PAGES_PER_POLL = 5;

/**
 * The newest audit records, for every console that listens: one loop polls the audit log (the
 * shared one, so every replica's decisions show) from the last record it saw, while at least one
 * console listens, and hands new records to each. Keeps the most recent ones for a console that
 * starts listening.
 */
export class AuditTail {
  private readonly listeners = new Set<Listener>();
  private readonly recent: AuditRecord[] = [];
  private cursor: string | undefined;
  private since: string | undefined;
  private timer: NodeJS.Timeout | undefined;
  private polling: Promise<void> | undefined;
  private closed = false;
  private running = false;
  private readonly pollMs: number;
  private readonly keep: number;

  constructor(private readonly opts: TailOptions) {
    this.pollMs = opts.pollMs ?? 500;
    this.keep = opts.keep ?? 200;
  }

  /** Adds a listener; resolves with the recent records it starts from (then new ones follow). */
  async listen(listener: Listener): Promise<{ recent: AuditRecord[]; stop: () => void }> {
    if (this.closed) return { recent: [], stop: () => undefined };
    if (!this.running) {
      // Not polling since the last listener left: catch up first, so the backlog is current.
      this.running = true;
      await this.pollOnce();
      this.schedule();
    }
    // The snapshot and the subscription in one synchronous step: no record falls between them.
    this.listeners.add(listener);
    const stop = () => {
      this.listeners.delete(listener);
      if (this.listeners.size === 0) this.pause();
    };
    return { recent: [...this.recent], stop };
  }

  close(): void {
    this.closed = true;
    this.listeners.clear();
    this.pause();
  }

  private pause(): void {
    this.running = false;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private schedule(): void {
    if (this.closed || !this.running) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.pollOnce().finally(() => this.schedule());
    }, this.pollMs);
    this.timer.unref();
  }

  private pollOnce(): Promise<void> {
    this.polling ??= this.read().finally(() => {
      this.polling = undefined;
    });
    return this.polling;
  }

  private async read(): Promise<void> {
    if (this.cursor === undefined && this.since === undefined) {
      this.since = new Date(this.opts.now() - (this.opts.backlogMs ?? 15 * 60_000)).toISOString();
    }
    const found: AuditRecord[] = [];
    try {
      for (let page = 0; page < PAGES_PER_POLL; page++) {
        const query: AuditQuery = { limit: 1000 };
        if (this.cursor !== undefined) query.cursor = this.cursor;
        else query.since = this.since;
        const answer = await this.opts.audit.query(query);
        found.push(...answer.records);
        const last = answer.records.at(-1);
        // A page's nextCursor may lie beyond its last record (a log that stopped at its budget).
        if (answer.nextCursor !== null) this.cursor = answer.nextCursor;
        else if (last !== undefined) this.cursor = encodeCursor(last.seq);
        if (answer.nextCursor === null) break;
      }
    } catch (err) {
      this.opts.log.warn({ err }, "console: reading the audit log failed");
    }
    if (found.length === 0) return;
    this.recent.push(...found);
    if (this.recent.length > this.keep) this.recent.splice(0, this.recent.length - this.keep);
    for (const listener of this.listeners) listener(found);
  }
}
