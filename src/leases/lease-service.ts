import { EventEmitter } from "node:events";
import type { AuditDraft, AuditLog } from "../audit/audit-log.js";
import type { Clock } from "../core/clock.js";
import { DomainError } from "../core/errors.js";
import { type LeaseState, leaseState } from "./lease-rules.js";
import type {
  AcquireResult,
  CommitIntentRef,
  LeaseEventHook,
  LeaseRecord,
  LeaseResource,
  LeaseStore,
} from "./lease-store.js";

export type LeaseLimits = { minTtlMs: number; maxTtlMs: number; maxWaitMs: number };

/** A lease and its state at the instant it was read. */
export type LeaseInfo = LeaseRecord & { state: LeaseState };

export type AcquireRequest = {
  resource: LeaseResource;
  ttlMs: number;
  waitMs: number;
  owner: string;
};

export type Caller = { principal: string | null; requestId: string | null };

/**
 * Raises an object's HCT to at least `token` in the storage backend (StorageBackend
 * .raiseHighestToken): how a grant fences the commit intents of ended leases.
 */
export type ObjectFencer = (bucket: string, key: string, token: number) => Promise<unknown>;

export type LeaseServiceOptions = {
  store: LeaseStore;
  audit: AuditLog;
  clock: Clock;
  limits: LeaseLimits;
  fenceObject: ObjectFencer;
  /** How often a waiting acquire retries when nothing wakes it sooner. */
  pollMs?: number;
};

/**
 * Lease operations as the API offers them: bounds checking, waiting for a held resource,
 * fencing commits left in flight by ended leases, and an audit record for every lease event
 * (inside the store's own step when the audit log shares its domain, right after it otherwise).
 */
export class LeaseService {
  private readonly changes = new EventEmitter();
  private readonly joinsAudit: boolean;

  constructor(private readonly opts: LeaseServiceOptions) {
    this.changes.setMaxListeners(0);
    const { store, audit } = opts;
    this.joinsAudit = store.domain !== undefined && store.domain === audit.domain && !!audit.appendInStep;
  }

  get limits(): LeaseLimits {
    return this.opts.limits;
  }

  async acquire(req: AcquireRequest, caller: Caller): Promise<LeaseInfo> {
    this.checkTtl(req.ttlMs);
    if (!Number.isInteger(req.waitMs) || req.waitMs < 0 || req.waitMs > this.opts.limits.maxWaitMs) {
      throw new DomainError(
        "InvalidRequest",
        `waitMs must be a whole number from 0 to ${this.opts.limits.maxWaitMs}`,
      );
    }
    const deadline = this.opts.clock() + req.waitMs;
    for (;;) {
      const event = this.event("LeaseAcquired", caller);
      const result: AcquireResult = await this.opts.store.tryAcquire(
        { resource: req.resource, ttlMs: req.ttlMs, owner: req.owner },
        event.hook,
      );
      if (result.granted) {
        await event.recordIfNotYet(result.lease);
        return this.info(result.lease);
      }
      if ("fence" in result) {
        await this.fenceIntents(result.fence.token, result.fence.intents);
        continue;
      }
      const now = this.opts.clock();
      if (now >= deadline) {
        const held = result.heldBy;
        await this.recordFor("LeaseAcquired", req.resource, caller, {
          decision: "rejected",
          reason: "LeaseHeld",
          owner: req.owner,
        });
        throw new DomainError("LeaseHeld", "an active lease on an overlapping resource is held", {
          heldBy: {
            leaseId: held.leaseId,
            bucket: held.bucket,
            ...(held.key !== undefined ? { key: held.key } : { prefix: held.prefix }),
            owner: held.owner,
            token: held.token,
            expiresAt: new Date(held.expiresAt).toISOString(),
          },
        });
      }
      const untilExpiry = Math.max(1, result.heldBy.expiresAt - now);
      await this.waitForChange(Math.min(deadline - now, untilExpiry, this.opts.pollMs ?? 100));
    }
  }

  async get(leaseId: string): Promise<LeaseInfo> {
    const lease = await this.opts.store.get(leaseId);
    if (!lease || lease.releasedAt !== undefined) throw notFound(leaseId);
    return this.info(lease);
  }

  async renew(leaseId: string, ttlMs: number | undefined, caller: Caller): Promise<LeaseInfo> {
    const existing = await this.opts.store.get(leaseId);
    if (!existing) throw notFound(leaseId);
    const ttl = ttlMs ?? existing.ttlMs;
    this.checkTtl(ttl);
    try {
      const event = this.event("LeaseRenewed", caller);
      const lease = await this.opts.store.renew(leaseId, ttl, event.hook);
      await event.recordIfNotYet(lease);
      return this.info(lease);
    } catch (e) {
      if (e instanceof DomainError && e.code === "LeaseLost") {
        await this.record("LeaseRenewed", existing, caller, { decision: "rejected", reason: "LeaseLost" });
      }
      throw e;
    }
  }

  async release(leaseId: string, caller: Caller): Promise<void> {
    const event = this.event("LeaseReleased", caller);
    const lease = await this.opts.store.release(leaseId, event.hook);
    await event.recordIfNotYet(lease);
    this.changes.emit("change");
  }

  async list(filter: { bucket?: string; prefix?: string }): Promise<LeaseInfo[]> {
    const leases = await this.opts.store.list(filter);
    return leases.map((l) => this.info(l));
  }

  /** Audits leases that ran out without being released (called periodically). */
  async sweepExpired(): Promise<number> {
    const event = this.event("LeaseExpired", { principal: null, requestId: null });
    const expired = await this.opts.store.collectExpired(event.hook);
    for (const lease of expired) await event.recordIfNotYet(lease);
    if (expired.length > 0) this.changes.emit("change");
    return expired.length;
  }

  info(lease: LeaseRecord): LeaseInfo {
    return { ...lease, state: leaseState(lease, this.opts.clock()) };
  }

  /**
   * Commits of ended leases may still land on these objects: raise their HCT to a token nobody
   * holds, so that each such commit is refused, then forget the intents.
   */
  private async fenceIntents(token: number, intents: readonly CommitIntentRef[]): Promise<void> {
    await Promise.all(intents.map((i) => this.opts.fenceObject(i.bucket, i.key, token)));
    await this.opts.store.clearIntents(intents.map((i) => i.intentId));
  }

  private checkTtl(ttlMs: number): void {
    const { minTtlMs, maxTtlMs } = this.opts.limits;
    if (!Number.isInteger(ttlMs) || ttlMs < minTtlMs || ttlMs > maxTtlMs) {
      throw new DomainError("InvalidRequest", `ttlMs must be a whole number from ${minTtlMs} to ${maxTtlMs}`);
    }
  }

  private waitForChange(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.changes.off("change", done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.changes.on("change", done);
    });
  }

  /**
   * An accepted lease event: recorded inside the store's step when the audit log shares its
   * domain, otherwise right after the store returns.
   */
  private event(op: string, caller: Caller) {
    const recorded = new Set<string>();
    const appendInStep = this.joinsAudit ? this.opts.audit.appendInStep : undefined;
    const hook: LeaseEventHook | undefined = appendInStep
      ? (lease) => {
          appendInStep(this.draft(op, lease, caller));
          recorded.add(lease.leaseId);
        }
      : undefined;
    return {
      hook,
      recordIfNotYet: async (lease: LeaseRecord) => {
        if (!recorded.has(lease.leaseId)) await this.record(op, lease, caller);
      },
    };
  }

  private async record(
    op: string,
    lease: LeaseRecord,
    caller: Caller,
    outcome: Pick<AuditDraft, "decision" | "reason"> = { decision: "accepted", reason: null },
  ): Promise<void> {
    await this.opts.audit.append(this.draft(op, lease, caller, outcome));
  }

  private draft(
    op: string,
    lease: LeaseRecord,
    caller: Caller,
    outcome: Pick<AuditDraft, "decision" | "reason"> = { decision: "accepted", reason: null },
  ): AuditDraft {
    return {
      op,
      bucket: lease.bucket,
      key: lease.key ?? null,
      prefix: lease.prefix ?? null,
      token: lease.token,
      leaseId: lease.leaseId,
      owner: lease.owner,
      principal: caller.principal,
      requestId: caller.requestId,
      highestToken: null,
      ...outcome,
    };
  }

  private async recordFor(
    op: string,
    resource: LeaseResource,
    caller: Caller,
    outcome: Pick<AuditDraft, "decision" | "reason" | "owner">,
  ): Promise<void> {
    await this.opts.audit.append({
      op,
      bucket: resource.bucket,
      key: resource.key ?? null,
      prefix: resource.prefix ?? null,
      token: null,
      leaseId: null,
      principal: caller.principal,
      requestId: caller.requestId,
      highestToken: null,
      ...outcome,
    });
  }
}

function notFound(leaseId: string): DomainError {
  return new DomainError("LeaseNotFound", `no lease ${leaseId}`);
}
