import { DomainError } from "../core/errors.js";
import { groupKey, parseGroupKey } from "./lease-rules.js";
import type { Caller, LeaseInfo, LeaseService } from "./lease-service.js";
import type { LeaseResource } from "./lease-store.js";
import type { PoolMembership } from "./wait-queue.js";

type PoolConfig = { bucket: string; prefix: string; groups: number };

type ClaimResult = {
  pool: string;
  owner: string;
  /** Groups divided by the active workers. */
  fairShare: number;
  workers: number;
  /** How many groups this worker holds once it settled (floor or ceiling of the fair share). */
  target: number;
  groups: Array<{ group: number; lease: LeaseInfo }>;
};

/**
 * Ownership groups: a worker claims a fair share of a pool's groups, one lease per group. Each
 * claim is also the worker's heartbeat: it renews the worker's group leases, gives back groups
 * above its share (release, so another worker can claim them) and takes free ones up to its
 * share. Handover is always release then re-claim, and every group is an ordinary lease, so no
 * group ever has two owners. Workers are the ones that claimed within their TTL (in this gateway,
 * or in any replica when the lease store shares membership: Redis), and those holding group
 * leases; shares are the floor or ceiling of groups / workers, the ceilings going to the first
 * workers by name.
 */
export class Pools {
  private readonly members = new Map<string, Map<string, number>>();
  private readonly shared: PoolMembership | undefined;

  constructor(
    private readonly service: LeaseService,
    private readonly pools: Readonly<Record<string, PoolConfig>>,
  ) {
    this.shared = service.poolMembership();
  }

  /** Refuses an ordinary lease that would share keys with a pool's groups without overlapping them. */
  checkOrdinary(resource: LeaseResource): void {
    for (const [name, pool] of Object.entries(this.pools)) {
      if (pool.bucket !== resource.bucket) continue;
      const inside =
        resource.key !== undefined
          ? resource.key.startsWith(pool.prefix)
          : resource.prefix.startsWith(pool.prefix) && resource.prefix !== pool.prefix;
      if (inside) {
        throw new DomainError(
          "InvalidRequest",
          `keys under "${pool.prefix}" in bucket ${pool.bucket} belong to pool ${name} and are leased by group: ` +
            `claim groups with POST /_fence/v1/pools/${name}/claims (or lease the whole prefix "${pool.prefix}")`,
        );
      }
    }
  }

  async claim(name: string, owner: string, ttlMs: number, caller: Caller): Promise<ClaimResult> {
    const pool = this.pool(name);
    const members = await this.join(name, owner, ttlMs);
    const held = await this.groupLeases(pool);
    const workers = new Set([...members, ...[...held.values()].map((l) => l.owner)]);
    const ranked = [...workers].sort();
    const base = Math.floor(pool.groups / ranked.length);
    const target = base + (ranked.indexOf(owner) < pool.groups % ranked.length ? 1 : 0);

    const mine = [...held.entries()].filter(([, l]) => l.owner === owner).sort(([a], [b]) => a - b);
    const kept: Array<{ group: number; lease: LeaseInfo }> = [];
    for (const [group, lease] of mine) {
      if (kept.length >= target) {
        await this.service.release(lease.leaseId, caller); // above its share: handed back
        continue;
      }
      try {
        kept.push({ group, lease: await this.service.renew(lease.leaseId, ttlMs, caller) });
      } catch (e) {
        if (!(e instanceof DomainError && (e.code === "LeaseLost" || e.code === "LeaseNotFound"))) throw e;
      }
    }
    for (let group = 0; group < pool.groups && kept.length < target; group++) {
      if (held.has(group)) continue;
      const resource = { bucket: pool.bucket, key: groupKey(pool.prefix, group, pool.groups) };
      try {
        kept.push({
          group,
          lease: await this.service.acquire({ resource, ttlMs, waitMs: 0, owner }, caller),
        });
      } catch (e) {
        if (!(e instanceof DomainError && e.code === "LeaseHeld")) throw e;
      }
    }
    return {
      pool: name,
      owner,
      fairShare: pool.groups / ranked.length,
      workers: ranked.length,
      target,
      groups: kept,
    };
  }

  /** The worker leaves: its group leases are released for the others to claim. */
  async leave(name: string, owner: string, caller: Caller): Promise<number> {
    const pool = this.pool(name);
    if (this.shared) await this.shared.leave(name, owner);
    else this.membersOf(name).delete(owner);
    let released = 0;
    for (const lease of (await this.groupLeases(pool)).values()) {
      if (lease.owner !== owner) continue;
      await this.service.release(lease.leaseId, caller);
      released++;
    }
    return released;
  }

  private pool(name: string): PoolConfig {
    const pool = this.pools[name];
    if (!pool) throw new DomainError("NoSuchEndpoint", `no pool ${name} is configured`);
    return pool;
  }

  /** The worker is a member for `ttlMs` more; answers the pool's current members. */
  private async join(name: string, owner: string, ttlMs: number): Promise<string[]> {
    if (this.shared) return this.shared.join(name, owner, ttlMs);
    const now = performance.now();
    const members = this.membersOf(name);
    members.set(owner, now + ttlMs);
    for (const [m, until] of members) if (until < now) members.delete(m);
    return [...members.keys()];
  }

  private membersOf(name: string): Map<string, number> {
    let m = this.members.get(name);
    if (!m) {
      m = new Map();
      this.members.set(name, m);
    }
    return m;
  }

  /** The pool's active group leases, by group. */
  private async groupLeases(pool: PoolConfig): Promise<Map<number, LeaseInfo>> {
    const byGroup = new Map<number, LeaseInfo>();
    for (const lease of await this.service.list({ bucket: pool.bucket, prefix: pool.prefix })) {
      const g = lease.key !== undefined ? parseGroupKey(lease.key) : null;
      if (g && g.prefix === pool.prefix && g.groups === pool.groups) byGroup.set(g.group, lease);
    }
    return byGroup;
  }
}
