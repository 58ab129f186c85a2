import { randomBytes } from "node:crypto";
import { type AccessPolicy, openPolicy } from "../access/access-policy.js";
import type { AuditDraft, AuditLog } from "../audit/audit-log.js";
import type { Clock } from "../core/clock.js";
import { DomainError } from "../core/errors.js";
import { randomBase64url } from "../core/random.js";
import type { LeaseEvent, LeaseObserver } from "../metrics/observe.js";
import { type LeaseState, leaseState, overlaps, type ResourceRef, resourceOf } from "./lease-rules.js";
import type {
  CommitIntentRef,
  DelegateRecord,
  LeaseEventContext,
  LeaseEventHook,
  LeaseRecord,
  LeaseResource,
  LeaseSideEvent,
  LeaseStore,
} from "./lease-store.js";
import {
  type DelegateNotice,
  type PoolMembership,
  type SharedWaitLine,
  type SharesWaiting,
  type Waiter,
  type WaitNotice,
  WaitQueue,
} from "./wait-queue.js";

export type LeaseLimits = { minTtlMs: number; maxTtlMs: number; maxWaitMs: number };

/** A lease and its state at the instant it was read; in listings, its resource's queue length. */
export type LeaseInfo = LeaseRecord & { state: LeaseState; waiters?: number };

export type AcquireRequest = {
  resource: LeaseResource;
  ttlMs: number;
  waitMs: number;
  owner: string;
  /** The client's request: once aborted (it disconnected), the waiter leaves the queue at once. */
  signal?: AbortSignal;
};

/** An acquire request in the wait queue, until it is answered. */
type PendingAcquire = Waiter & {
  /** Its place in the wait queue shared by every replica (when the store offers one). */
  ticket: string;
  /**
   * May try now: always with the in-process queue (its heads decide); in the shared queue, once
   * its ticket was seen first in line among overlapping tickets.
   */
  head: boolean;
  req: AcquireRequest;
  caller: Caller;
  resolve(lease: LeaseInfo): void;
  reject(error: unknown): void;
  /** A tryAcquire for it is under way. */
  trying: boolean;
  /**
   * Wake-ups that came while it was trying: asked again once the attempt has answered (with the
   * holder it saw), so that one that still picks it makes it try once more.
   */
  wokenWhileTrying: Array<(w: PendingAcquire) => boolean>;
  timedOut: boolean;
  aborted: boolean;
  /** It found its resource held or others queued before it, and will wait (metrics). */
  waited: boolean;
  /** Undoes its timer and abort listener once it is answered. */
  cleanup: Array<() => void>;
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
 * Lease operations as the API offers them: bounds checking, waiting for a held resource,
 * fencing commits left in flight by ended leases, and an audit record for every lease event
 * (inside the store's own step when the audit log shares its domain or the store records lease
 * events itself, right after it otherwise).
 */
export class LeaseService {
  private readonly queue = new WaitQueue<PendingAcquire>();
  private nextWaiterId = 1;
  private expiryTimer: NodeJS.Timeout | undefined;
  /**
   * The wait queue every replica shares, when the store offers one (Redis): this gateway's
   * waiters stay in `queue` too, but order and wake-ups come from it.
   */
  private readonly shared: SharedWaitLine | undefined;
  /** The store's release wakes the shared queue's waiters itself (SharesWaiting). */
  private readonly releaseWakes: boolean;
  private listening: Promise<void> | undefined;
  private refreshTimer: NodeJS.Timeout | undefined;
  /** Delegates this gateway knows (loaded at start, kept as they are created and revoked). */
  private readonly delegates = new Map<string, { record: DelegateRecord; lease: ResourceRef }>();
  private readonly joinsAudit: boolean;
  /** The store appends the records of its accepted lease events itself, in the same step. */
  private readonly storeRecords: boolean;

  constructor(private readonly opts: LeaseServiceOptions) {
    const { store, audit } = opts;
    this.joinsAudit = store.domain !== undefined && store.domain === audit.domain && !!audit.appendInStep;
    this.storeRecords = !this.joinsAudit && (store.recordsEventsIn?.(audit) ?? false);
    const sharing = (store as Partial<SharesWaiting>).sharedWaitLine;
    this.shared = typeof sharing === "function" ? sharing.call(store) : undefined;
    this.releaseWakes = (store as Partial<SharesWaiting>).releaseWakesWaiters === true;
  }

  /** Pool members shared by every replica, when the store offers it (Pools keeps its own otherwise). */
  poolMembership(): PoolMembership | undefined {
    const store = this.opts.store as Partial<SharesWaiting>;
    return typeof store.sharedPoolMembership === "function" ? store.sharedPoolMembership() : undefined;
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
    return (
      this.owns(lease, caller) || this.delegates.get(caller.principal ?? "")?.record.leaseId === lease.leaseId
    );
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
    if (!this.delegates.has(accessKeyId)) return undefined;
    return this.opts.delegateSecret?.(accessKeyId);
  }

  /** What a delegate may write: its lease's resource (undefined for any other access key). */
  delegateScope(accessKeyId: string): (ResourceRef & { leaseId: string }) | undefined {
    const d = this.delegates.get(accessKeyId);
    return d ? { ...d.lease, leaseId: d.record.leaseId } : undefined;
  }

  /** Loads the delegates of the leases the store remembers (at start). */
  async loadDelegates(): Promise<void> {
    const store = this.opts.store;
    // Delegates added or removed through other replicas from now on are heard of at once.
    if (this.shared) await this.listen(this.shared);
    if (!store.listDelegates) return;
    const known = new Map<string, { record: DelegateRecord; lease: ResourceRef }>();
    for (const record of await store.listDelegates()) {
      const lease = await store.get(record.leaseId);
      if (lease) known.set(record.delegateId, { record, lease: resourceOf(lease) });
    }
    // Loaded again after missed notices: those removed meanwhile go too.
    this.delegates.clear();
    for (const [id, d] of known) this.delegates.set(id, d);
  }

  /**
   * Notices were missed while the shared queue's connection was lost: the delegates are read
   * again, and this gateway's waiters now first in line try once (a lease may have ended meanwhile).
   */
  private async catchUp(shared: SharedWaitLine): Promise<void> {
    await this.loadDelegates().catch(() => undefined);
    const tickets = this.queue.all().map((w) => w.ticket);
    if (tickets.length === 0) return;
    const heads = new Set(await shared.refresh(tickets).catch(() => [] as string[]));
    const mine = this.queue.all().filter((w) => heads.has(w.ticket));
    for (const w of mine) w.head = true;
    this.wake((w) => mine.includes(w));
  }

  /**
   * A delegate credential for the lease (its owner or an administrator; never a delegate): an
   * access key that may renew the lease, see its token and write with it under the lease's
   * resource, but neither release it nor delegate further. Recorded as LeaseDelegateAdded
   * (`owner` holds the delegate's access key id).
   */
  async addDelegate(
    leaseId: string,
    caller: Caller,
  ): Promise<{ delegate: DelegateRecord; secretAccessKey: string }> {
    const store = this.opts.store;
    const derive = this.opts.delegateSecret;
    if (!store.addDelegate || !derive) {
      throw new DomainError("NotImplemented", `the ${store.kind} lease store does not keep delegates`);
    }
    const lease = await store.get(leaseId);
    if (!lease || lease.releasedAt !== undefined) throw notFound(leaseId);
    await this.checkOwns(lease, "LeaseDelegateAdded", caller);
    if (leaseState(lease, this.opts.clock()) !== "active") {
      throw new DomainError("LeaseLost", `lease ${leaseId} has ended`, { leaseId });
    }
    const delegate: DelegateRecord = {
      delegateId: `FGD${randomBytes(15)
        .toString("base64url")
        .toUpperCase()
        .replace(/[^A-Z0-9]/g, "X")}`,
      leaseId,
      createdBy: caller.principal ?? "gateway",
      createdAt: this.opts.clock(),
    };
    await store.addDelegate(delegate);
    this.delegates.set(delegate.delegateId, { record: delegate, lease: resourceOf(lease) });
    // Every replica accepts the credential from now on (the store keeps it for those that start later).
    await this.shared
      ?.announce({ kind: "delegate-added", delegate, lease: resourceOf(lease) })
      .catch(() => undefined);
    await this.opts.audit.append({
      ...this.draft("LeaseDelegateAdded", lease, caller),
      owner: delegate.delegateId,
    });
    return { delegate, secretAccessKey: derive(delegate.delegateId) };
  }

  async listDelegates(leaseId: string, caller: Caller): Promise<DelegateRecord[]> {
    const lease = await this.opts.store.get(leaseId);
    if (!lease) throw notFound(leaseId);
    if (!this.actsFor(lease, caller)) throw accessDenied(`lease ${leaseId} belongs to another access key`);
    return (await this.opts.store.listDelegates?.(leaseId)) ?? [];
  }

  /** Revokes a delegate at once (the lease's owner or an administrator). */
  async removeDelegate(leaseId: string, delegateId: string, caller: Caller): Promise<void> {
    const lease = await this.opts.store.get(leaseId);
    if (!lease) throw notFound(leaseId);
    await this.checkOwns(lease, "LeaseDelegateRemoved", caller);
    const removed = (await this.opts.store.removeDelegate?.(leaseId, delegateId)) ?? false;
    if (!removed) throw new DomainError("NoSuchEndpoint", `lease ${leaseId} has no delegate ${delegateId}`);
    this.delegates.delete(delegateId);
    await this.shared?.announce({ kind: "delegate-removed", leaseId, delegateId }).catch(() => undefined);
    await this.opts.audit.append({ ...this.draft("LeaseDelegateRemoved", lease, caller), owner: delegateId });
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
      await this.recordFor("LeaseAcquired", req.resource, caller, {
        decision: "rejected",
        reason: "AccessDenied",
        owner: req.owner,
      });
      throw accessDenied(`may not lease ${describe(req.resource)}`);
    }
    if (req.signal?.aborted) throw gone();
    const asked = performance.now();
    let pending: PendingAcquire | undefined;
    const answer = new Promise<LeaseInfo>((resolve, reject) => {
      const waiter: PendingAcquire = {
        id: this.nextWaiterId++,
        ticket: randomBase64url(12),
        head: this.shared === undefined,
        resource: req.resource,
        heldBy: null,
        req,
        caller,
        resolve,
        reject,
        trying: false,
        wokenWhileTrying: [],
        timedOut: false,
        aborted: false,
        waited: false,
        cleanup: [],
      };
      pending = waiter;
      this.queue.add(waiter);
      // Waiting is measured by a timer, on the monotonic clock: a wall clock step neither cuts
      // it short nor stretches it.
      if (req.waitMs > 0) {
        const timer = setTimeout(() => this.timeOut(waiter), req.waitMs);
        waiter.cleanup.push(() => clearTimeout(timer));
      }
      if (req.signal) {
        const signal = req.signal;
        const onAbort = () => this.abandon(waiter);
        signal.addEventListener("abort", onAbort, { once: true });
        waiter.cleanup.push(() => signal.removeEventListener("abort", onAbort));
      }
      if (this.shared) {
        void this.enqueueShared(this.shared, waiter);
        return;
      }
      if (this.queue.aheadOf(waiter)) {
        // Earlier waiters come first; one that will not wait does not jump the queue.
        if (req.waitMs === 0) void this.giveUp(waiter);
        else waiter.waited = true;
        return;
      }
      // First in line for its resource: it tries at once (the heads need not be listed for that).
      void this.attempt(waiter);
    });
    const observe = this.opts.observe;
    if (!observe) return answer;
    const waited = (outcome: "granted" | "timeout" | "error") => {
      if (pending?.waited) observe.waited(outcome, (performance.now() - asked) / 1000);
    };
    return answer.then(
      (lease) => {
        waited("granted");
        return lease;
      },
      (e: unknown) => {
        waited(e instanceof DomainError && e.code === "LeaseHeld" ? "timeout" : "error");
        throw e;
      },
    );
  }

  /** Takes the waiter's ticket in the shared queue; it tries at once if first in line. */
  private async enqueueShared(shared: SharedWaitLine, w: PendingAcquire): Promise<void> {
    let first: boolean;
    try {
      await this.listen(shared);
      first = await shared.enqueue(w.ticket, w.req.resource);
    } catch (e) {
      if (this.queue.remove(w)) this.settle(w, () => w.reject(e));
      void this.afterLeave(w);
      return;
    }
    // It gave up or went away meanwhile: its ticket, queued after that, leaves too.
    if (!this.queue.has(w)) return void this.afterLeave(w);
    this.keepTicketsAlive(shared);
    if (first) w.head = true;
    if (!w.head) {
      // Earlier waiters come first; one that will not wait does not jump the queue.
      if (w.req.waitMs === 0) void this.giveUp(w);
      else w.waited = true;
      return;
    }
    // (A wake-up that named it before this answer came has made it try already; a notice that
    // it is first behind a holder has made one that will not wait give up: see onNotice.)
    if (!w.trying && w.heldBy === null) this.wake((x) => x === w);
  }

  /** Hears the shared queue's wake-ups and the other replicas' delegates (from the first need on). */
  private listen(shared: SharedWaitLine): Promise<void> {
    this.listening ??= shared
      .listen((notice) => this.onNotice(notice))
      .catch((e: unknown) => {
        this.listening = undefined;
        throw e;
      });
    return this.listening;
  }

  /**
   * A wake-up from the shared queue: this gateway's waiters it names are now first in line. Or a
   * delegate added or removed through some replica.
   */
  private onNotice(notice: WaitNotice | DelegateNotice): void {
    if (notice.kind === "delegate-added") {
      this.delegates.set(notice.delegate.delegateId, { record: notice.delegate, lease: notice.lease });
      return;
    }
    if (notice.kind === "resubscribed") {
      if (this.shared) void this.catchUp(this.shared);
      return;
    }
    if (notice.kind === "delegate-removed") {
      if (this.delegates.get(notice.delegateId)?.record.leaseId === notice.leaseId) {
        this.delegates.delete(notice.delegateId);
      }
      return;
    }
    const named = new Set(notice.tickets);
    const mine = this.queue.all().filter((w) => named.has(w.ticket));
    if (mine.length === 0) return;
    for (const w of mine) w.head = true;
    if (notice.kind === "held") {
      // They wait for the new holder: its expiry is their wake-up time. A request that will not
      // wait gives up instead (unless an attempt of its own is under way and will decide): it
      // has no deadline to end that wait. The notice can come before the answer to its ticket's
      // enqueue (another Redis connection), so this is the one place that sees it in time.
      for (const w of mine) if (w.heldBy === null) w.heldBy = notice.lease;
      for (const w of mine) if (w.req.waitMs === 0 && !w.trying) void this.giveUp(w);
      this.scheduleExpiryWake();
      return;
    }
    const woken = new Set(mine);
    this.wake((w) => woken.has(w) && (notice.kind === "ended" || w.heldBy === null));
  }

  /**
   * Refreshes this gateway's tickets while any waits, so that they are not taken for a dead
   * gateway's. The same heartbeat finds the waiters that came first in line because a dead
   * gateway's ticket ahead of them ran out (nobody else tells them): those that never tried, try.
   */
  private keepTicketsAlive(shared: SharedWaitLine): void {
    if (this.refreshTimer) return;
    this.refreshTimer = setInterval(
      () => {
        const tickets = this.queue.all().map((w) => w.ticket);
        if (tickets.length === 0) {
          clearInterval(this.refreshTimer);
          this.refreshTimer = undefined;
          return;
        }
        shared.refresh(tickets).then(
          (heads) => this.onNotice({ kind: "left", tickets: heads }),
          () => undefined,
        );
      },
      Math.max(1, Math.floor(shared.ticketTtlMs / 3)),
    );
    this.refreshTimer.unref();
  }

  /** The waiters that may try now. */
  private heads(): PendingAcquire[] {
    return this.shared ? this.queue.all().filter((w) => w.head) : this.queue.heads();
  }

  /**
   * A waiter left the queue (answered with an error, gave up, went away): those now first in
   * line are told (the shared queue tells them, in whichever replica they wait).
   */
  private async afterLeave(w: PendingAcquire): Promise<void> {
    if (this.shared) await this.shared.leave(w.ticket).catch(() => undefined);
    else this.wake(newHeads);
  }

  /**
   * Tries the waiters at the head of their resource's queue that `filter` picks. Heads never
   * overlap one another, so their attempts run side by side (each is one atomic step of the
   * store, which checks for overlapping leases itself): a grant on one key does not wait for the
   * fsync of a grant on another. A head already trying keeps the wake-up and asks it once its
   * attempt has found the resource held (what woke it may have ended that holder after the
   * attempt read it); asked now, it would judge by the state before the attempt's answer.
   */
  private wake(filter: (w: PendingAcquire) => boolean): void {
    for (const w of this.heads()) {
      if (w.trying) w.wokenWhileTrying.push(filter);
      else if (filter(w)) void this.attempt(w);
    }
    this.scheduleExpiryWake();
  }

  /**
   * The only timer besides each waiter's deadline: at the earliest expiry among the holders that
   * keep head waiters out, those waiters try again (no polling: a holder that renewed is simply
   * seen with its new expiry).
   */
  private scheduleExpiryWake(): void {
    if (this.expiryTimer) clearTimeout(this.expiryTimer);
    this.expiryTimer = undefined;
    // Nobody waits for a holder (the common case): nothing to list.
    if (!this.queue.all().some((w) => w.heldBy !== null)) return;
    let first = Number.POSITIVE_INFINITY;
    for (const w of this.heads()) if (w.heldBy) first = Math.min(first, w.heldBy.expiresAt);
    if (first === Number.POSITIVE_INFINITY) return;
    const delay = Math.max(1, first - this.opts.clock());
    this.expiryTimer = setTimeout(() => {
      this.expiryTimer = undefined;
      const now = this.opts.clock();
      this.wake((w) => w.heldBy !== null && w.heldBy.expiresAt <= now);
    }, delay);
    this.expiryTimer.unref();
  }

  private async attempt(w: PendingAcquire): Promise<void> {
    try {
      await this.tryAsHead(w);
    } finally {
      this.scheduleExpiryWake();
    }
  }

  private async tryAsHead(w: PendingAcquire): Promise<void> {
    const { req, caller } = w;
    const { principal } = caller;
    w.trying = true;
    try {
      for (;;) {
        w.wokenWhileTrying = [];
        const event = this.event("LeaseAcquired", caller);
        const input = {
          resource: req.resource,
          ttlMs: req.ttlMs,
          owner: req.owner,
          ...(principal !== null ? { principal } : {}),
        };
        // In the shared queue, the grant's own step also checks that its ticket is first in line.
        const result = this.shared
          ? await this.shared.tryAcquireAsHead(w.ticket, input, event.context)
          : await this.opts.store.tryAcquire(input, event.hook, event.context);
        if ("behind" in result) {
          if (wokenAgain(w)) continue;
          w.head = false;
          if (w.req.waitMs > 0) w.waited = true;
          break;
        }
        if (result.granted) {
          this.queue.remove(w);
          // Those now first in line wait for this lease: its expiry is their wake-up time (the
          // shared queue tells them itself, in the grant's step).
          // (The heads are listed only when some waiter overlaps the lease at all.)
          const overlapping = (x: PendingAcquire) => overlaps(x.resource, result.lease);
          if (!this.shared && this.queue.all().some(overlapping)) {
            for (const x of this.queue.heads())
              if (x.heldBy === null && overlapping(x)) x.heldBy = result.lease;
          }
          // Expiries this grant saw are recorded before it, in token order.
          for (const lapsed of result.expired ?? []) await event.recordIfNotYet(lapsed, "LeaseExpired");
          await event.recordIfNotYet(result.lease);
          if (w.aborted) {
            // Nobody is there to receive it: give it back at once, for the next waiter.
            await this.release(result.lease.leaseId, { principal: null, requestId: caller.requestId });
            return;
          }
          this.settle(w, () => w.resolve(this.info(result.lease)));
          return;
        }
        if ("fence" in result) {
          await this.fenceIntents(result.fence.token, result.fence.intents);
          continue;
        }
        w.heldBy = result.heldBy;
        if (w.req.waitMs > 0) w.waited = true;
        if (wokenAgain(w)) continue;
        break;
      }
    } catch (e) {
      this.queue.remove(w);
      this.settle(w, () => w.reject(e));
      void this.afterLeave(w);
      return;
    } finally {
      w.trying = false;
    }
    if (w.aborted) this.abandon(w);
    else if (w.req.waitMs === 0 || w.timedOut) await this.giveUp(w);
  }

  private timeOut(w: PendingAcquire): void {
    w.timedOut = true;
    if (!w.trying) void this.giveUp(w);
  }

  /** The client went away (its request was aborted): leave the queue at once. */
  private abandon(w: PendingAcquire): void {
    w.aborted = true;
    if (w.trying || !this.queue.remove(w)) return;
    // Answered once its ticket is gone: nobody sees it queued after it was answered.
    void this.afterLeave(w).then(() => this.settle(w, () => w.reject(gone())));
  }

  /** Still held when the waiter's time is up: LeaseHeld, recorded, and the queue moves on. */
  private async giveUp(w: PendingAcquire): Promise<void> {
    if (!this.queue.remove(w)) return;
    await this.afterLeave(w);
    const { req, caller } = w;
    const held = w.heldBy ?? this.queue.aheadOf(w)?.heldBy ?? null;
    try {
      await this.recordFor("LeaseAcquired", req.resource, caller, {
        decision: "rejected",
        reason: "LeaseHeld",
        owner: req.owner,
      });
    } catch (e) {
      this.settle(w, () => w.reject(e));
      return;
    }
    const details = held
      ? {
          heldBy: {
            // Another principal's lease id would let it be looked up, renewed or released.
            ...(this.actsFor(held, caller) ? { leaseId: held.leaseId } : {}),
            bucket: held.bucket,
            ...(held.key !== undefined ? { key: held.key } : { prefix: held.prefix }),
            owner: held.owner,
            token: held.token,
            expiresAt: new Date(held.expiresAt).toISOString(),
          },
        }
      : {};
    const message = held
      ? "an active lease on an overlapping resource is held"
      : "earlier requests are waiting for an overlapping resource";
    this.settle(w, () => w.reject(new DomainError("LeaseHeld", message, details)));
  }

  private settle(w: PendingAcquire, answer: () => void): void {
    for (const undo of w.cleanup.splice(0)) undo();
    answer();
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
      const event = this.event("LeaseRenewed", caller);
      const lease = await this.opts.store.renew(leaseId, ttl, event.hook, event.context);
      await event.recordIfNotYet(lease);
      return this.info(lease);
    } catch (e) {
      if (e instanceof DomainError && e.code === "LeaseLost") {
        await this.record("LeaseRenewed", existing, caller, { decision: "rejected", reason: "LeaseLost" });
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
    const event = this.event("LeaseReleased", caller);
    let lease: LeaseRecord;
    try {
      lease = await this.opts.store.release(leaseId, event.hook, event.context);
    } catch (e) {
      // Seen to expire between the read and the release (by the sweep, or a grant): done.
      const now =
        e instanceof DomainError && e.code === "LeaseNotFound" ? await this.opts.store.get(leaseId) : null;
      if (now && now.releasedAt === undefined && now.endedAt !== undefined) return;
      throw e;
    }
    await event.recordIfNotYet(lease, lease.releasedAt === undefined ? "LeaseExpired" : undefined);
    // A shared queue's store may have told the waiters in the release's own step.
    if (!(this.shared && this.releaseWakes)) this.wakeAfterEnd([lease]);
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
      await this.record("LeaseBroken", existing, caller, { decision: "rejected", reason: "AccessDenied" });
      throw accessDenied("is not an administrator: only administrators break leases");
    }
    const store = this.opts.store;
    if (!store.breakLease) {
      throw new DomainError("NotImplemented", `the ${store.kind} lease store cannot break leases`);
    }
    const event = this.event("LeaseBroken", caller);
    const { lease, fence } = await store.breakLease(leaseId, event.hook, event.context);
    await event.recordIfNotYet(lease, lease.releasedAt === undefined ? "LeaseExpired" : undefined);
    // A lease that had expired unnoticed ended by expiry; the administrator's act is recorded too.
    if (lease.releasedAt === undefined && !event.context) await this.record("LeaseBroken", lease, caller);
    if (lease.releasedAt === undefined) this.opts.observe?.event("LeaseBroken", lease.token);
    if (lease.key !== undefined) await this.opts.fenceObject(lease.bucket, lease.key, fence.token);
    await this.fenceIntents(fence.token, fence.intents);
    this.wakeAfterEnd([lease]);
    return { lease: this.info(lease), floorToken: fence.token };
  }

  /**
   * Active leases, each with the number of requests queued for its resource (in this gateway, or
   * in every replica with a shared queue).
   */
  async list(filter: { bucket?: string; prefix?: string }): Promise<LeaseInfo[]> {
    const leases = await this.opts.store.list(filter);
    const counts = this.shared
      ? await this.shared.waitingOn(leases.map(resourceOf))
      : leases.map((l) => this.queue.waitingOn(resourceOf(l)));
    return leases.map((l, i) => ({ ...this.info(l), waiters: counts[i] ?? 0 }));
  }

  /** Lease requests waiting in this gateway for a held resource (metrics). */
  waiting(): number {
    return this.queue.size;
  }

  /** Audits leases that ran out without being released (called periodically). */
  async sweepExpired(): Promise<number> {
    const event = this.event("LeaseExpired", { principal: null, requestId: null });
    const expired = await this.opts.store.collectExpired(event.hook, event.context);
    for (const lease of expired) await event.recordIfNotYet(lease);
    this.wakeAfterEnd(expired);
    return expired.length;
  }

  /** Leases ended: the first waiter of each resource they covered tries (one per resource). */
  private wakeAfterEnd(ended: readonly LeaseRecord[]): void {
    if (ended.length === 0) return;
    if (this.shared) {
      // Whichever replica's waiter is first in line hears it (this one's too).
      this.shared.ended(ended.map(resourceOf)).catch(() => undefined);
      return;
    }
    if (this.queue.size === 0) return;
    this.wake((w) => ended.some((lease) => overlaps(lease, w.resource)));
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
    await this.record(op, lease, caller, { decision: "rejected", reason: "AccessDenied" });
    throw accessDenied(`lease ${lease.leaseId} belongs to another access key`);
  }

  /** Refuses (and records) a caller that is not the lease's owner or an administrator. */
  private async checkOwns(lease: LeaseRecord, op: string, caller: Caller): Promise<void> {
    if (this.owns(lease, caller)) return;
    await this.record(op, lease, caller, { decision: "rejected", reason: "AccessDenied" });
    const delegate = this.delegates.get(caller.principal ?? "")?.record.leaseId === lease.leaseId;
    throw accessDenied(
      delegate
        ? "is a delegate of the lease: delegates renew it and write with it, never release or delegate it"
        : `lease ${lease.leaseId} belongs to another access key`,
    );
  }

  private checkTtl(ttlMs: number): void {
    const { minTtlMs, maxTtlMs } = this.opts.limits;
    if (!Number.isInteger(ttlMs) || ttlMs < minTtlMs || ttlMs > maxTtlMs) {
      throw new DomainError("InvalidRequest", `ttlMs must be a whole number from ${minTtlMs} to ${maxTtlMs}`);
    }
  }

  /**
   * An accepted lease event: recorded inside the store's step when the audit log shares its
   * domain (a hook), by the store's own step when it records lease events itself (a context: the
   * Redis store with the audit log in the same Redis), otherwise right after the store returns.
   */
  private event(op: string, caller: Caller) {
    const recorded = new Set<string>();
    const appendInStep = this.joinsAudit ? this.opts.audit.appendInStep : undefined;
    // An expiry seen by someone's call is nobody's doing: no principal, no request.
    const callerOf = (side?: LeaseSideEvent): Caller =>
      side ? { principal: null, requestId: null } : caller;
    const hook: LeaseEventHook | undefined = appendInStep
      ? (lease, side) => {
          appendInStep(this.draft(side ?? op, lease, callerOf(side)));
          recorded.add(`${side ?? op} ${lease.leaseId}`);
        }
      : undefined;
    const context: LeaseEventContext | undefined = this.storeRecords
      ? { op, principal: caller.principal, requestId: caller.requestId }
      : undefined;
    return {
      hook,
      context,
      recordIfNotYet: async (lease: LeaseRecord, side?: LeaseSideEvent) => {
        if (!context && !recorded.has(`${side ?? op} ${lease.leaseId}`)) {
          await this.record(side ?? op, lease, callerOf(side));
        }
        const happened = side ?? op;
        if (isLeaseEvent(happened)) this.opts.observe?.event(happened, lease.token);
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
    if (outcome.decision === "rejected") this.opts.observe?.refused(op, outcome.reason);
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
    if (outcome.decision === "rejected") this.opts.observe?.refused(op, outcome.reason);
  }
}

const LEASE_EVENTS: ReadonlySet<string> = new Set<LeaseEvent>([
  "LeaseAcquired",
  "LeaseRenewed",
  "LeaseReleased",
  "LeaseExpired",
  "LeaseBroken",
]);
const isLeaseEvent = (op: string): op is LeaseEvent => LEASE_EVENTS.has(op);

function scopeOf(resource: { key?: string | undefined; prefix?: string | undefined }) {
  return resource.key !== undefined ? { key: resource.key } : { prefix: resource.prefix ?? "" };
}

function describe(resource: LeaseResource): string {
  return resource.key !== undefined
    ? `key ${JSON.stringify(resource.key)} in bucket ${resource.bucket}`
    : `prefix ${JSON.stringify(resource.prefix)} in bucket ${resource.bucket}`;
}

function accessDenied(message: string): DomainError {
  return new DomainError("AccessDenied", `Access Denied: this access key ${message}`);
}

/**
 * After a waiter left: those that became first in line for their resource and never tried. A
 * waiter that already tried is first in line since then (only earlier waiters ever leave), and
 * waits for its holder's end, not for this.
 */
const newHeads = (w: { heldBy: LeaseRecord | null }): boolean => w.heldBy === null;

/** Whether a wake-up that came during the waiter's attempt still picks it, now that it answered. */
const wokenAgain = (w: PendingAcquire): boolean => w.wokenWhileTrying.some((wake) => wake(w));

/** The answer to a request whose client went away; nobody receives it. */
function gone(): DomainError {
  return new DomainError("RequestTimeout", "the client closed the request while it was waiting");
}

function notFound(leaseId: string): DomainError {
  return new DomainError("LeaseNotFound", `no lease ${leaseId}`);
}
