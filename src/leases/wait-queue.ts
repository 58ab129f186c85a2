import { overlaps, type ResourceRef } from "./lease-rules.js";
import type {
  AcquireInput,
  AcquireResult,
  DelegateRecord,
  LeaseEventContext,
  LeaseRecord,
  LeaseResource,
} from "./lease-store.js";

/**
 * Acquire requests waiting for a resource, in arrival order. A waiter may try only when no
 * earlier waiter still queued overlaps its resource: waiters on one resource are served strictly
 * first come, first served, and a prefix waiter is never overtaken by later key requests under it
 * (they queue behind it). When a lease ends, only the waiters at the head of their resource's
 * queue try again, so one release wakes one waiter, not a herd.
 */
export type Waiter = {
  readonly id: number;
  readonly resource: LeaseResource;
  /** The holder seen on its last attempt. */
  heldBy: LeaseRecord | null;
};

export class WaitQueue<W extends Waiter> {
  private readonly waiters: W[] = [];

  get size(): number {
    return this.waiters.length;
  }

  add(waiter: W): void {
    this.waiters.push(waiter);
  }

  /** Removes the waiter (served, gave up, or disconnected); false when it had already left. */
  remove(waiter: W): boolean {
    const i = this.waiters.indexOf(waiter);
    if (i < 0) return false;
    this.waiters.splice(i, 1);
    return true;
  }

  /** Every waiter, in arrival order. */
  all(): W[] {
    return [...this.waiters];
  }

  has(waiter: W): boolean {
    return this.waiters.includes(waiter);
  }

  /**
   * The waiters that may try now: none ahead of them in the queue overlaps their resource. One
   * pass, not a scan of the queue per waiter: a key waiter is blocked by an earlier waiter on the
   * same key (a set) or by an earlier prefix waiter over it (a list, short in practice); a prefix
   * waiter by an earlier overlapping prefix or an earlier key under it. With every request in
   * flight passing through the queue, a thousand concurrent acquires would otherwise cost a
   * million overlap checks each time the heads are asked for.
   */
  heads(): W[] {
    const heads: W[] = [];
    const keys = new Set<string>();
    const keysByBucket = new Map<string, string[]>();
    const prefixes: LeaseResource[] = [];
    for (const w of this.waiters) {
      const r = w.resource;
      let blocked = prefixes.some((p) => overlaps(p, r));
      if (!blocked) {
        blocked =
          r.key !== undefined
            ? keys.has(`${r.bucket}\u0000${r.key}`)
            : (keysByBucket.get(r.bucket) ?? []).some((k) => k.startsWith(r.prefix));
      }
      if (!blocked) heads.push(w);
      if (r.key !== undefined) {
        keys.add(`${r.bucket}\u0000${r.key}`);
        const bucketKeys = keysByBucket.get(r.bucket);
        if (bucketKeys) bucketKeys.push(r.key);
        else keysByBucket.set(r.bucket, [r.key]);
      } else prefixes.push(r);
    }
    return heads;
  }

  /** The first waiter ahead of `waiter` whose resource overlaps its resource, if any. */
  aheadOf(waiter: W): W | null {
    for (const other of this.waiters) {
      if (other === waiter) return null;
      if (overlaps(other.resource, waiter.resource)) return other;
    }
    return null;
  }

  /** How many queued waiters overlap this resource (a lease listing's queue length). */
  waitingOn(resource: LeaseResource): number {
    return this.waiters.filter((w) => overlaps(w.resource, resource)).length;
  }
}

/**
 * A wait queue shared by every gateway replica on one store (the Redis store offers it): each
 * waiter holds a ticket in arrival order across replicas, the grant goes only to a ticket first
 * in line among overlapping tickets (checked in the grant's own atomic step), and wake-ups reach
 * the replica of the waiter now first in line, whichever replica saw the lease end.
 */
export interface SharedWaitLine {
  /**
   * Queues the ticket; true when no earlier ticket overlaps its resource (it may try at once). A
   * ticket whose enqueue failed may have been queued all the same: it must be left.
   */
  enqueue(ticket: string, resource: LeaseResource): Promise<boolean>;
  /**
   * One grant attempt (LeaseStore.tryAcquire), refused (`behind`) unless the ticket is first in
   * line, in the same atomic step; a grant removes the ticket.
   */
  tryAcquireAsHead(ticket: string, input: AcquireInput, by?: LeaseEventContext): Promise<HeadAttempt>;
  /**
   * The waiter gave up or went away: its ticket leaves at once (unknown tickets are ignored, and
   * an enqueue of them still on its way queues nothing). When Redis cannot confirm it, it throws,
   * and the leave is retried in the background until Redis answers, and before this replica
   * queues any other ticket: a ticket nobody waits on never keeps requests out until its deadline.
   */
  leave(ticket: string): Promise<void>;
  /** Leases ended: the tickets first in line for what they covered are told. */
  ended(resources: readonly LeaseResource[]): Promise<void>;
  /** How many tickets, of every replica, overlap each resource. */
  waitingOn(resources: readonly LeaseResource[]): Promise<number[]>;
  /**
   * Moves the deadlines of these tickets on (a waiting replica's heartbeat); answers those now
   * first in line.
   */
  refresh(tickets: readonly string[]): Promise<string[]>;
  /** Tells every replica (this one too) that a delegate was added or removed. */
  announce(notice: DelegateNotice): Promise<void>;
  /** Calls `onNotice` for every wake-up and delegate notice; resolves once listening. */
  listen(onNotice: (notice: WaitNotice | DelegateNotice) => void): Promise<void>;
  /** A ticket not refreshed within this long is skipped (its gateway is gone). */
  readonly ticketTtlMs: number;
}

export type HeadAttempt = AcquireResult | { granted: false; behind: true };

/**
 * The tickets now first in line for a resource: after a lease on it ended ("ended": they try),
 * after a waiter ahead left ("left": those that never tried, try), or after a grant to the
 * waiter ahead ("held": they wait for `lease` to end).
 */
export type WaitNotice =
  | { kind: "ended" | "left"; tickets: string[] }
  | { kind: "held"; tickets: string[]; lease: LeaseRecord }
  /** Listening again after a lost connection: notices published meanwhile were missed. */
  | { kind: "resubscribed" };

/**
 * A delegate added or removed through one replica: every replica keeps the delegates it knows
 * (their credentials are looked up synchronously when a request is authenticated).
 */
export type DelegateNotice =
  | { kind: "delegate-added"; delegate: DelegateRecord; lease: ResourceRef }
  | { kind: "delegate-removed"; leaseId: string; delegateId: string };

/** Pool members shared by every replica (the Redis store offers it). */
export interface PoolMembership {
  /** The worker is a member for `ttlMs` more; answers every current member. */
  join(pool: string, owner: string, ttlMs: number): Promise<string[]>;
  leave(pool: string, owner: string): Promise<void>;
}

/** What a lease store shared by several gateway replicas offers for waiting and pools. */
export interface SharesWaiting {
  sharedWaitLine(): SharedWaitLine;
  sharedPoolMembership(): PoolMembership;
  /**
   * The store's release tells the shared queue's waiters now first in line itself (in the same
   * atomic step as the release): the service does not call `ended` after a release.
   */
  readonly releaseWakesWaiters?: boolean;
}

/** Whether the store offers a wait queue and pool membership shared by every replica. */
export function sharesWaiting<S extends object>(store: S): store is S & SharesWaiting {
  return typeof (store as { sharedWaitLine?: unknown }).sharedWaitLine === "function";
}
