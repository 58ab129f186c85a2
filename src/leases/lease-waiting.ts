import type { Clock } from "../core/clock.js";
import { DomainError } from "../core/errors.js";
import { randomBase64url } from "../core/random.js";
import type { LeaseObserver } from "../metrics/observe.js";
import { type AcceptedEvent, eventsOf } from "./lease-events.js";
import type { AcquireRequest, Caller, LeaseInfo } from "./lease-requests.js";
import { overlaps, resourceOf } from "./lease-rules.js";
import type { CommitIntentRef, LeaseRecord, LeaseStore } from "./lease-store.js";
import {
  type DelegateNotice,
  type SharedWaitLine,
  sharesWaiting,
  type Waiter,
  type WaitNotice,
  WaitQueue,
} from "./wait-queue.js";

/** What the waiting queue asks of the lease service. */
type WaitingHost = {
  store: LeaseStore;
  clock: Clock;
  observe: LeaseObserver | undefined;
  /** Accepted lease events (the store recorded them): counted. */
  counted(events: readonly AcceptedEvent[]): void;
  fenceIntents(token: number, intents: readonly CommitIntentRef[]): Promise<void>;
  release(leaseId: string, caller: Caller): Promise<void>;
  info(lease: LeaseRecord): LeaseInfo;
  /** Records an acquire refused because the resource stayed held. */
  refused(req: AcquireRequest, caller: Caller): Promise<void>;
  actsFor(lease: LeaseRecord, caller: Caller): boolean;
  /** A delegate added or removed through some replica. */
  delegateNotice(notice: DelegateNotice): void;
  /** Reads the delegates again (notices may have been missed). */
  reloadDelegates(): Promise<void>;
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

/**
 * Fair FIFO waiting for held resources: the acquire requests of this gateway, each resource's in
 * arrival order, and, when the store offers one (Redis), the wait queue every replica shares
 * (this gateway's waiters stay in `queue` too, but order and wake-ups come from it). A waiter
 * tries to acquire when first in line, and again when what kept it out ended.
 */
export class LeaseWaiting {
  private readonly queue = new WaitQueue<PendingAcquire>();
  private nextWaiterId = 1;
  private expiryTimer: NodeJS.Timeout | undefined;
  /** The wait queue every replica shares, when the store offers one. */
  readonly shared: SharedWaitLine | undefined;
  /** The store's release wakes the shared queue's waiters itself (SharesWaiting). */
  private readonly releaseWakes: boolean;
  private listening: Promise<void> | undefined;
  private refreshTimer: NodeJS.Timeout | undefined;

  constructor(private readonly host: WaitingHost) {
    const { store } = host;
    this.shared = sharesWaiting(store) ? store.sharedWaitLine() : undefined;
    this.releaseWakes = sharesWaiting(store) && store.releaseWakesWaiters === true;
  }

  /** Lease requests waiting in this gateway for a held resource (metrics). */
  get size(): number {
    return this.queue.size;
  }

  /**
   * Answers an acquire request (checked already): granted at once or once first in line and
   * free, or refused with LeaseHeld when its waitMs runs out; RequestTimeout if its client left.
   */
  async acquire(req: AcquireRequest, caller: Caller): Promise<LeaseInfo> {
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
    const observe = this.host.observe;
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

  /**
   * Notices were missed while the shared queue's connection was lost: the delegates are read
   * again, and this gateway's waiters now first in line try once (a lease may have ended meanwhile).
   */
  private async catchUp(shared: SharedWaitLine): Promise<void> {
    await this.host.reloadDelegates().catch(() => undefined);
    const tickets = this.queue.all().map((w) => w.ticket);
    if (tickets.length === 0) return;
    const heads = new Set(await shared.refresh(tickets).catch(() => [] as string[]));
    const mine = this.queue.all().filter((w) => heads.has(w.ticket));
    for (const w of mine) w.head = true;
    this.wake((w) => mine.includes(w));
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
  listen(shared: SharedWaitLine): Promise<void> {
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
    if (notice.kind === "delegate-added" || notice.kind === "delegate-removed") {
      this.host.delegateNotice(notice);
      return;
    }
    if (notice.kind === "resubscribed") {
      if (this.shared) void this.catchUp(this.shared);
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
    const delay = Math.max(1, first - this.host.clock());
    this.expiryTimer = setTimeout(() => {
      this.expiryTimer = undefined;
      const now = this.host.clock();
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
        const input = {
          resource: req.resource,
          ttlMs: req.ttlMs,
          owner: req.owner,
          ...(principal !== null ? { principal } : {}),
        };
        // In the shared queue, the grant's own step also checks that its ticket is first in line.
        const result = this.shared
          ? await this.shared.tryAcquireAsHead(w.ticket, input, caller)
          : await this.host.store.tryAcquire(input, caller);
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
          this.host.counted(eventsOf("LeaseAcquired", result.lease, caller, result.expired));
          if (w.aborted) {
            // Nobody is there to receive it: give it back at once, for the next waiter.
            await this.host.release(result.lease.leaseId, { principal: null, requestId: caller.requestId });
            return;
          }
          this.settle(w, () => w.resolve(this.host.info(result.lease)));
          return;
        }
        if ("fence" in result) {
          await this.host.fenceIntents(result.fence.token, result.fence.intents);
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
      await this.host.refused(req, caller);
    } catch (e) {
      this.settle(w, () => w.reject(e));
      return;
    }
    const details = held
      ? {
          heldBy: {
            // Another principal's lease id would let it be looked up, renewed or released.
            ...(this.host.actsFor(held, caller) ? { leaseId: held.leaseId } : {}),
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

  /** Leases ended: the first waiter of each resource they covered tries (one per resource). */
  ended(ended: readonly LeaseRecord[]): void {
    if (ended.length === 0) return;
    if (this.shared) {
      // Whichever replica's waiter is first in line hears it (this one's too).
      this.shared.ended(ended.map(resourceOf)).catch(() => undefined);
      return;
    }
    if (this.queue.size === 0) return;
    this.wake((w) => ended.some((lease) => overlaps(lease, w.resource)));
  }

  /** A lease was released: its resource's first waiter tries (unless the store told the shared queue). */
  released(lease: LeaseRecord): void {
    if (!(this.shared && this.releaseWakes)) this.ended([lease]);
  }

  /** How many requests wait for each resource (in this gateway, or in every replica when shared). */
  async waitingOn(leases: readonly LeaseRecord[]): Promise<number[]> {
    return this.shared
      ? await this.shared.waitingOn(leases.map(resourceOf))
      : leases.map((l) => this.queue.waitingOn(resourceOf(l)));
  }
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
