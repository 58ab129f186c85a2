import { randomBytes } from "node:crypto";
import type { AuditLog } from "../audit/audit-log.js";
import type { Clock } from "../core/clock.js";
import { DomainError } from "../core/errors.js";
import { leaseEventDraft } from "./lease-events.js";
import { accessDenied, type Caller, notFound } from "./lease-requests.js";
import { leaseState, type ResourceRef, resourceOf } from "./lease-rules.js";
import type { DelegateRecord, LeaseRecord, LeaseStore } from "./lease-store.js";
import type { LeaseWaiting } from "./lease-waiting.js";
import type { DelegateNotice } from "./wait-queue.js";

/** What the delegates ask of the lease service. */
type DelegatesHost = {
  store: LeaseStore;
  audit: AuditLog;
  clock: Clock;
  /** Derives a delegate credential's secret from its access key id (LeaseServiceOptions). */
  delegateSecret: ((delegateId: string) => string) | undefined;
  /** The waiting queue: its shared line tells the other replicas of delegates. */
  queue: LeaseWaiting;
  /** Refuses (and records) a caller that is not the lease's owner or an administrator. */
  checkOwns(lease: LeaseRecord, op: string, caller: Caller): Promise<void>;
  actsFor(lease: LeaseRecord, caller: Caller): boolean;
};

/**
 * Delegates of leases: access keys that may renew a lease, see its token and write with it under
 * its resource. The store keeps them; this gateway knows them all (loaded at start, kept as they
 * are created and revoked here or, through the shared wait line, in another replica).
 */
export class LeaseDelegates {
  private readonly known = new Map<string, { record: DelegateRecord; lease: ResourceRef }>();

  constructor(private readonly host: DelegatesHost) {}

  /** The lease the access key is a delegate of, if it is one. */
  leaseOf(principal: string | null): string | undefined {
    return this.known.get(principal ?? "")?.record.leaseId;
  }

  /** The delegate credential's secret, when `accessKeyId` is a delegate this gateway knows. */
  secretOf(accessKeyId: string): string | undefined {
    if (!this.known.has(accessKeyId)) return undefined;
    return this.host.delegateSecret?.(accessKeyId);
  }

  /** What a delegate may write: its lease's resource (undefined for any other access key). */
  scope(accessKeyId: string): (ResourceRef & { leaseId: string }) | undefined {
    const d = this.known.get(accessKeyId);
    return d ? { ...d.lease, leaseId: d.record.leaseId } : undefined;
  }

  /** Loads the delegates of the leases the store remembers (at start). */
  async load(): Promise<void> {
    const { store, queue } = this.host;
    // Delegates added or removed through other replicas from now on are heard of at once.
    if (queue.shared) await queue.listen(queue.shared);
    const known = new Map<string, { record: DelegateRecord; lease: ResourceRef }>();
    for (const record of await store.listDelegates()) {
      const lease = await store.get(record.leaseId);
      if (lease) known.set(record.delegateId, { record, lease: resourceOf(lease) });
    }
    // Loaded again after missed notices: those removed meanwhile go too.
    this.known.clear();
    for (const [id, d] of known) this.known.set(id, d);
  }

  /** A delegate added or removed through some replica. */
  heard(notice: DelegateNotice): void {
    if (notice.kind === "delegate-added") {
      this.known.set(notice.delegate.delegateId, { record: notice.delegate, lease: notice.lease });
    } else if (this.known.get(notice.delegateId)?.record.leaseId === notice.leaseId) {
      this.known.delete(notice.delegateId);
    }
  }

  /**
   * A delegate credential for the lease (its owner or an administrator; never a delegate): an
   * access key that may renew the lease, see its token and write with it under the lease's
   * resource, but neither release it nor delegate further. Recorded as LeaseDelegateAdded
   * (`owner` holds the delegate's access key id).
   */
  async add(leaseId: string, caller: Caller): Promise<{ delegate: DelegateRecord; secretAccessKey: string }> {
    const { store, delegateSecret: derive } = this.host;
    if (!derive) throw new DomainError("NotImplemented", "this gateway derives no delegate secrets");
    const lease = await store.get(leaseId);
    if (!lease || lease.releasedAt !== undefined) throw notFound(leaseId);
    await this.host.checkOwns(lease, "LeaseDelegateAdded", caller);
    if (leaseState(lease, this.host.clock()) !== "active") {
      throw new DomainError("LeaseLost", `lease ${leaseId} has ended`, { leaseId });
    }
    const delegate: DelegateRecord = {
      delegateId: `FGD${randomBytes(15)
        .toString("base64url")
        .toUpperCase()
        .replace(/[^A-Z0-9]/g, "X")}`,
      leaseId,
      createdBy: caller.principal ?? "gateway",
      createdAt: this.host.clock(),
    };
    await store.addDelegate(delegate);
    this.known.set(delegate.delegateId, { record: delegate, lease: resourceOf(lease) });
    // Every replica accepts the credential from now on (the store keeps it for those that start later).
    await this.host.queue.shared
      ?.announce({ kind: "delegate-added", delegate, lease: resourceOf(lease) })
      .catch(() => undefined);
    await this.host.audit.append({
      ...leaseEventDraft("LeaseDelegateAdded", lease, caller),
      owner: delegate.delegateId,
    });
    return { delegate, secretAccessKey: derive(delegate.delegateId) };
  }

  async list(leaseId: string, caller: Caller): Promise<DelegateRecord[]> {
    const lease = await this.host.store.get(leaseId);
    if (!lease) throw notFound(leaseId);
    if (!this.host.actsFor(lease, caller))
      throw accessDenied(`lease ${leaseId} belongs to another access key`);
    return this.host.store.listDelegates(leaseId);
  }

  /** Revokes a delegate at once (the lease's owner or an administrator). */
  async remove(leaseId: string, delegateId: string, caller: Caller): Promise<void> {
    const lease = await this.host.store.get(leaseId);
    if (!lease) throw notFound(leaseId);
    await this.host.checkOwns(lease, "LeaseDelegateRemoved", caller);
    const removed = await this.host.store.removeDelegate(leaseId, delegateId);
    if (!removed) throw new DomainError("NoSuchEndpoint", `lease ${leaseId} has no delegate ${delegateId}`);
    this.known.delete(delegateId);
    await this.host.queue.shared
      ?.announce({ kind: "delegate-removed", leaseId, delegateId })
      .catch(() => undefined);
    await this.host.audit.append({
      ...leaseEventDraft("LeaseDelegateRemoved", lease, caller),
      owner: delegateId,
    });
  }
}
