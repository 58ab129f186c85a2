import { overlaps } from "./lease-rules.js";
import type { LeaseRecord, LeaseResource } from "./lease-store.js";

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

  has(waiter: W): boolean {
    return this.waiters.includes(waiter);
  }

  /** The waiters that may try now: none ahead of them in the queue overlaps their resource. */
  heads(): W[] {
    const heads: W[] = [];
    for (let i = 0; i < this.waiters.length; i++) {
      const w = this.waiters[i]!;
      if (this.aheadOf(w) === null) heads.push(w);
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
