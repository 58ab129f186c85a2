import { type AccessPolicy, openPolicy } from "../access/access-policy.js";
import type { AuditLog } from "../audit/audit-log.js";
import type { Clock } from "../core/clock.js";
import { DomainError } from "../core/errors.js";
import type { LeaseObserver } from "../metrics/observe.js";
import { LeaseDelegates } from "./lease-delegates.js";
import { type AcceptedEvent, eventsOf, expiries, leaseEventDraft } from "./lease-events.js";
import {
  type AcquireRequest,
  accessDenied,
  type Caller,
  type LeaseInfo,
  notFound,
} from "./lease-requests.js";
import { leaseState, type ResourceRef } from "./lease-rules.js";
import type {
  CommitIntentRef,
  DelegateRecord,
  LeaseRecord,
  LeaseResource,
  LeaseStore,
} from "./lease-store.js";
import { LeaseWaiting } from "./lease-waiting.js";
import { type PoolMembership, sharesWaiting } from "./wait-queue.js";

type LeaseLimits = { minTtlMs: number; maxTtlMs: number; maxWaitMs: number };

export type { Caller, LeaseInfo } from "./lease-requests.js";

/**
 * Raises an object's HCT to at least `token` in the storage backend (StorageBackend
 * .raiseHighestToken): how a grant fences the commit intents of ended leases.
 */
type ObjectFencer = (bucket: string, key: string, token: number) => Promise<unknown>;

type LeaseServiceOptions = {
  store: LeaseStore;
  audit: AuditLog;
  clock: Clock;
  limits: LeaseLimits;
  fenceObject: ObjectFencer;
  /**
   * Who may lease what, and who is an administrator. Default: everyone may do everything. A
   * caller without a principal (the gateway itself) is never refused.
   */
  access?: AccessPolicy;
  /**
   * The secret of a delegate credential, derived from its access key id with a key only the
   * gateways hold (so that it is never stored). Without it, delegates cannot be created.
   */
  delegateSecret?: (delegateId: string) => string;
  /** Told of lease events, refusals and waits (metrics). */
  observe?: LeaseObserver;
};

/**
 * Lease operations as the API offers them: bounds checking, waiting for a held resource (the
 * queue, lease-waiting.ts), fencing commits left in flight by ended leases, delegates
 * (lease-delegates.ts), and an audit record for every refused request (the store records the
 * accepted lease events itself: LeaseEvents).
 */
export class LeaseService {
  /** Requests waiting for a held resource, in this gateway or in the queue every replica shares. */
  private readonly queue: LeaseWaiting;
  private readonly delegates: LeaseDelegates;

  constructor(private readonly opts: LeaseServiceOptions) {
    const { store, audit } = opts;
    this.queue = new LeaseWaiting({
      store,
      clock: opts.clock,
      observe: opts.observe,
      counted: (events) => this.counted(events),
      fenceIntents: (token, intents) => this.fenceIntents(token, intents),
      release: (leaseId, caller) => this.release(leaseId, caller),
      info: (lease) => this.info(lease),
      refused: (req, caller) => this.refused("LeaseAcquired", req, caller, "LeaseHeld"),
      actsFor: (lease, caller) => this.actsFor(lease, caller),
      delegateNotice: (notice) => this.delegates.heard(notice),
      reloadDelegates: () => this.delegates.load(),
    });
    this.delegates = new LeaseDelegates({
      store,
      audit,
      clock: opts.clock,
      delegateSecret: opts.delegateSecret,
      queue: this.queue,
      checkOwns: (lease, op, caller) => this.checkOwns(lease, op, caller),
      actsFor: (lease, caller) => this.actsFor(lease, caller),
    });
  }

  /** Pool members shared by every replica, when the store offers it (Pools keeps its own otherwise). */
  poolMembership(): PoolMembership | undefined {
    const { store } = this.opts;
    return sharesWaiting(store) ? store.sharedPoolMembership() : undefined;
  }

  get limits(): LeaseLimits {
    return this.opts.limits;
  }

  private get access(): AccessPolicy {
    return this.opts.access ?? openPolicy;
  }

  /**
   * Whether the caller acts for the lease: the access key that acquired it, or an administrator
   * (or the gateway itself). Only such a caller sees the lease's fencing token, renews or
   * releases it. A lease granted before principals were kept is anyone's who may lease it.
   */
  actsFor(lease: LeaseRecord, caller: Caller): boolean {
    return this.owns(lease, caller) || this.delegates.leaseOf(caller.principal) === lease.leaseId;
  }

  /** Acts for the lease and is not a delegate: may also release it and delegate it. */
  private owns(lease: LeaseRecord, caller: Caller): boolean {
    const { principal } = caller;
    if (principal === null || this.access.isAdmin(principal)) return true;
    if (lease.principal !== undefined) return lease.principal === principal;
    return this.access.allows(principal, "lease", lease.bucket, scopeOf(lease));
  }

  /** The delegate credential's secret, when `accessKeyId` is a delegate this gateway knows. */
  delegateSecretOf(accessKeyId: string): string | undefined {
    return this.delegates.secretOf(accessKeyId);
  }

  /** What a delegate may write: its lease's resource (undefined for any other access key). */
  delegateScope(accessKeyId: string): (ResourceRef & { leaseId: string }) | undefined {
    return this.delegates.scope(accessKeyId);
  }

  /** Loads the delegates of the leases the store remembers (at start). */
  loadDelegates(): Promise<void> {
    return this.delegates.load();
  }

  /**
   * A delegate credential for the lease (its owner or an administrator; never a delegate): an
   * access key that may renew the lease, see its token and write with it under the lease's
   * resource, but neither release it nor delegate further. Recorded as LeaseDelegateAdded
   * (`owner` holds the delegate's access key id).
   */
  addDelegate(
    leaseId: string,
    caller: Caller,
  ): Promise<{ delegate: DelegateRecord; secretAccessKey: string }> {
    return this.delegates.add(leaseId, caller);
  }

  listDelegates(leaseId: string, caller: Caller): Promise<DelegateRecord[]> {
    return this.delegates.list(leaseId, caller);
  }

  /** Revokes a delegate at once (the lease's owner or an administrator). */
  removeDelegate(leaseId: string, delegateId: string, caller: Caller): Promise<void> {
    return this.delegates.remove(leaseId, delegateId, caller);
  }

  async acquire(req: AcquireRequest, caller: Caller): Promise<LeaseInfo> {
    this.checkTtl(req.ttlMs);
    if (!Number.isInteger(req.waitMs) || req.waitMs < 0 || req.waitMs > this.opts.limits.maxWaitMs) {
      throw new DomainError(
        "InvalidRequest",
        `waitMs must be a whole number from 0 to ${this.opts.limits.maxWaitMs}`,
      );
    }
    const { principal } = caller;
    if (
      principal !== null &&
      !this.access.allows(principal, "lease", req.resource.bucket, scopeOf(req.resource))
    ) {
      await this.refused("LeaseAcquired", req, caller, "AccessDenied");
      throw accessDenied(`this access key may not lease ${describe(req.resource)}`);
    }
    return this.queue.acquire(req, caller);
  }

  async get(leaseId: string): Promise<LeaseInfo> {
    const lease = await this.opts.store.get(leaseId);
    if (!lease || lease.releasedAt !== undefined) throw notFound(leaseId);
    return this.info(lease);
  }

  async renew(leaseId: string, ttlMs: number | undefined, caller: Caller): Promise<LeaseInfo> {
    const existing = await this.opts.store.get(leaseId);
    if (!existing) throw notFound(leaseId);
    await this.checkActsFor(existing, "LeaseRenewed", caller);
    const ttl = ttlMs ?? existing.ttlMs;
    this.checkTtl(ttl);
    try {
      const lease = await this.opts.store.renew(leaseId, ttl, caller);
      this.counted(eventsOf("LeaseRenewed", lease, caller));
      return this.info(lease);
    } catch (e) {
      if (e instanceof DomainError && e.code === "LeaseLost") {
        await this.refused("LeaseRenewed", existing, caller, "LeaseLost");
      }
      throw e;
    }
  }

  /**
   * Ends the lease. A lease released after it had expired ended by expiry: its LeaseExpired event
   * is recorded (once, by whoever sees it first), never a LeaseReleased.
   */
  async release(leaseId: string, caller: Caller): Promise<void> {
    const existing = await this.opts.store.get(leaseId);
    if (!existing || existing.releasedAt !== undefined) throw notFound(leaseId);
    await this.checkOwns(existing, "LeaseReleased", caller);
    if (existing.endedAt !== undefined) return; // expired, and its expiry already recorded
    let lease: LeaseRecord;
    try {
      lease = await this.opts.store.release(leaseId, caller);
    } catch (e) {
      // Seen to expire between the read and the release (by the sweep, or a grant): done.
      const now =
        e instanceof DomainError && e.code === "LeaseNotFound" ? await this.opts.store.get(leaseId) : null;
      if (now && now.releasedAt === undefined && now.endedAt !== undefined) return;
      throw e;
    }
    this.counted(eventsOf("LeaseReleased", lease, caller));
    // A shared queue's store may have told the waiters in the release's own step.
    this.queue.released(lease);
  }

  /**
   * Breaks a lease (administrators only): ends it whoever holds it, and raises the fencing floor
   * of what it covered before answering, so that the old holder's next write is refused even
   * though nobody else has written. For a key lease, the object's HCT is raised to a fresh token
   * nobody holds; for a prefix lease, the floor is the ended lease itself, which every write
   * under it is checked against atomically with its commit (judgeLease), kept while any lease
   * overlapping it is remembered. Either way, commits of the lease already in flight (its commit
   * intents) are fenced the same way before the answer.
   */
  async breakLease(leaseId: string, caller: Caller): Promise<{ lease: LeaseInfo; floorToken: number }> {
    const existing = await this.opts.store.get(leaseId);
    if (!existing || existing.releasedAt !== undefined) throw notFound(leaseId);
    const { principal } = caller;
    if (principal !== null && !this.access.isAdmin(principal)) {
      await this.refused("LeaseBroken", existing, caller, "AccessDenied");
      throw accessDenied("this access key is not an administrator: only administrators break leases");
    }
    // A lease that had expired unnoticed ended by expiry; the administrator's act is recorded too.
    const { lease, fence } = await this.opts.store.breakLease(leaseId, caller);
    this.counted(eventsOf("LeaseBroken", lease, caller));
    if (lease.key !== undefined) await this.opts.fenceObject(lease.bucket, lease.key, fence.token);
    await this.fenceIntents(fence.token, fence.intents);
    this.queue.ended([lease]);
    return { lease: this.info(lease), floorToken: fence.token };
  }

  /**
   * Active leases, each with the number of requests queued for its resource (in this gateway, or
   * in every replica with a shared queue).
   */
  async list(filter: { bucket?: string; prefix?: string }): Promise<LeaseInfo[]> {
    const leases = await this.opts.store.list(filter);
    const counts = await this.queue.waitingOn(leases);
    return leases.map((l, i) => ({ ...this.info(l), waiters: counts[i] ?? 0 }));
  }

  /** Lease requests waiting in this gateway for a held resource (metrics). */
  waiting(): number {
    return this.queue.size;
  }

  /** Audits leases that ran out without being released (called periodically). */
  async sweepExpired(): Promise<number> {
    const expired = await this.opts.store.collectExpired();
    this.counted(expiries(expired));
    this.queue.ended(expired);
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

  private async checkActsFor(lease: LeaseRecord, op: string, caller: Caller): Promise<void> {
    if (this.actsFor(lease, caller)) return;
    await this.refused(op, lease, caller, "AccessDenied");
    throw accessDenied(`lease ${lease.leaseId} belongs to another access key`);
  }

  /** Refuses (and records) a caller that is not the lease's owner or an administrator. */
  private async checkOwns(lease: LeaseRecord, op: string, caller: Caller): Promise<void> {
    if (this.owns(lease, caller)) return;
    await this.refused(op, lease, caller, "AccessDenied");
    const delegate = this.delegates.leaseOf(caller.principal) === lease.leaseId;
    throw accessDenied(
      delegate
        ? "this access key is a delegate of the lease: delegates renew it and write with it, never release or delegate it"
        : `lease ${lease.leaseId} belongs to another access key`,
    );
  }

  private checkTtl(ttlMs: number): void {
    const { minTtlMs, maxTtlMs } = this.opts.limits;
    if (!Number.isInteger(ttlMs) || ttlMs < minTtlMs || ttlMs > maxTtlMs) {
      throw new DomainError("InvalidRequest", `ttlMs must be a whole number from ${minTtlMs} to ${maxTtlMs}`);
    }
  }

  /** Accepted lease events (the store recorded them): counted (metrics). */
  private counted(events: readonly AcceptedEvent[]): void {
    for (const e of events) this.opts.observe?.event(e.op, e.lease.token);
  }

  /** Records a refused request (nothing changed) about a lease, or an acquire about its resource. */
  private async refused(op: string, about: LeaseRecord | AcquireRequest, caller: Caller, reason: string) {
    const subject =
      "leaseId" in about ? about : { ...about.resource, owner: about.owner, token: null, leaseId: null };
    await this.opts.audit.append({ ...leaseEventDraft(op, subject, caller), decision: "rejected", reason });
    this.opts.observe?.refused(op, reason);
  }
}

function scopeOf(resource: { key?: string | undefined; prefix?: string | undefined }) {
  return resource.key !== undefined ? { key: resource.key } : { prefix: resource.prefix ?? "" };
}

function describe(resource: LeaseResource): string {
  return resource.key !== undefined
    ? `key ${JSON.stringify(resource.key)} in bucket ${resource.bucket}`
    : `prefix ${JSON.stringify(resource.prefix)} in bucket ${resource.bucket}`;
}
