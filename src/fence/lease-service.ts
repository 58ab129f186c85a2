import { EventEmitter } from "node:events";
import type { AuditDraft, AuditLog } from "../audit/audit-log.js";
import type { Clock } from "../core/clock.js";
import { DomainError } from "../core/errors.js";
import { leaseState } from "../leases/lease-rules.js";
import type { LeaseEventHook, LeaseRecord, LeaseResource, LeaseStore } from "../leases/lease-store.js";
import { type Keyring, signFencingToken } from "./tokens.js";

export type LeaseLimits = { minTtlMs: number; maxTtlMs: number; maxWaitMs: number };

/** A lease as clients see it (lease API, CLI). */
export type LeaseView = {
  leaseId: string;
  bucket: string;
  key?: string;
  prefix?: string;
  owner: string;
  token: number;
  fencingToken: string;
  ttlMs: number;
  acquiredAt: string;
  expiresAt: string;
  state: "active" | "expired" | "released";
};

export type AcquireRequest = {
  resource: LeaseResource;
  ttlMs: number;
  waitMs: number;
  owner: string;
};

export type Caller = { principal: string | null; requestId: string | null };

export type LeaseServiceOptions = {
  store: LeaseStore;
  audit: AuditLog;
  keyring: Keyring;
  clock: Clock;
  limits: LeaseLimits;
  /** How often a waiting acquire retries when nothing wakes it sooner. */
  pollMs?: number;
  /**
   * Appends an audit record synchronously inside the lease store's own transaction, when both
   * live in one embedded database: a lease event and its record then commit together.
   */
  appendInCommit?: (draft: AuditDraft) => void;
};

/**
 * Lease operations as the API and CLI offer them: bounds checking, waiting for a held
 * resource, signing fencing tokens, and an audit record for every lease event.
 */
export class LeaseService {
  private readonly changes = new EventEmitter();

  constructor(private readonly opts: LeaseServiceOptions) {
    this.changes.setMaxListeners(0);
  }

  get limits(): LeaseLimits {
    return this.opts.limits;
  }

  async acquire(req: AcquireRequest, caller: Caller): Promise<LeaseView> {
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
      const result = await this.opts.store.tryAcquire(
        { resource: req.resource, ttlMs: req.ttlMs, owner: req.owner },
        event.hook,
      );
      if (result.granted) {
        await event.recordIfNotYet(result.lease);
        return this.view(result.lease);
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

  async get(leaseId: string): Promise<LeaseView> {
    const lease = await this.opts.store.get(leaseId);
    if (!lease || lease.releasedAt !== undefined) throw notFound(leaseId);
    return this.view(lease);
  }

  async renew(leaseId: string, ttlMs: number | undefined, caller: Caller): Promise<LeaseView> {
    const existing = await this.opts.store.get(leaseId);
    if (!existing) throw notFound(leaseId);
    const ttl = ttlMs ?? existing.ttlMs;
    this.checkTtl(ttl);
    try {
      const event = this.event("LeaseRenewed", caller);
      const lease = await this.opts.store.renew(leaseId, ttl, event.hook);
      await event.recordIfNotYet(lease);
      return this.view(lease);
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

  async list(filter: { bucket?: string; prefix?: string }): Promise<LeaseView[]> {
    const leases = await this.opts.store.list(filter);
    return leases.map((l) => this.view(l));
  }

  /** Audits leases that ran out without being released (called periodically). */
  async sweepExpired(): Promise<number> {
    const event = this.event("LeaseExpired", { principal: null, requestId: null });
    const expired = await this.opts.store.collectExpired(event.hook);
    for (const lease of expired) await event.recordIfNotYet(lease);
    if (expired.length > 0) this.changes.emit("change");
    return expired.length;
  }

  view(lease: LeaseRecord): LeaseView {
    return {
      leaseId: lease.leaseId,
      bucket: lease.bucket,
      ...(lease.key !== undefined ? { key: lease.key } : { prefix: lease.prefix }),
      owner: lease.owner,
      token: lease.token,
      fencingToken: signFencingToken(
        {
          leaseId: lease.leaseId,
          token: lease.token,
          bucket: lease.bucket,
          key: lease.key,
          prefix: lease.prefix,
        },
        this.opts.keyring.active,
      ),
      ttlMs: lease.ttlMs,
      acquiredAt: new Date(lease.acquiredAt).toISOString(),
      expiresAt: new Date(lease.expiresAt).toISOString(),
      state: leaseState(lease, this.opts.clock()),
    };
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
   * An accepted lease event: recorded inside the store's transaction when the audit log can
   * join it (the hook), otherwise right after the store returns.
   */
  private event(op: string, caller: Caller) {
    const appendInCommit = this.opts.appendInCommit;
    const recorded = new Set<string>();
    const hook: LeaseEventHook | undefined = appendInCommit
      ? (lease) => {
          appendInCommit(this.draft(op, lease, caller));
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
