/**
 * Who may do what: per access key, the buckets and key prefixes it may read, write and lease, and
 * whether it is an administrator. The S3 endpoint and the lease API ask the same policy.
 *
 * - `read`: GET/HEAD objects, list objects and uploads, read bucket settings.
 * - `write`: every fenced write (Put, Copy destination, Delete, multipart), abort uploads, and,
 *   with a rule on the whole bucket (no prefix), create and delete the bucket.
 * - `lease`: acquire leases on keys and prefixes within scope; renew and release one's own.
 * Administrators may do everything, renew and release anyone's lease, and break leases.
 */

export const ACTIONS = ["read", "write", "lease"] as const;
export type Action = (typeof ACTIONS)[number];

/** One grant: actions on a bucket (`*` for every bucket), under a key prefix ("" for all keys). */
export type AccessRule = { bucket: string; prefix: string; actions: readonly Action[] };

/** What a principal may do. `all`: every action everywhere (without administrator rights). */
export type PrincipalGrants = { admin: boolean; rules: readonly AccessRule[] | "all" };

/** The part of a bucket a request touches. */
export type Scope =
  /** One object key. */
  | { key: string }
  /** Every key starting with this (a listing's prefix, a prefix lease). */
  | { prefix: string }
  /** The bucket itself (create, delete, settings). */
  | { bucket: true };

export interface AccessPolicy {
  /** Whether the access key is an administrator. Unknown keys are not. */
  isAdmin(principal: string): boolean;
  /** Whether the access key may do `action` on `scope` of `bucket`. */
  allows(principal: string, action: Action, bucket: string, scope: Scope): boolean;
  /**
   * Whether the access key may do `action` on some part of `bucket` (one of its rules names the
   * bucket and the action): what ListBuckets, HeadBucket and bucket-setting reads ask, so that a
   * key limited to a prefix still sees and probes its bucket.
   */
  allowsSomewhere(principal: string, action: Action, bucket: string): boolean;
}

/**
 * The policy of a configuration. A key that the map does not name may do nothing (it cannot have
 * authenticated anyway).
 */
export function createAccessPolicy(grants: ReadonlyMap<string, PrincipalGrants>): AccessPolicy {
  return {
    isAdmin: (principal) => grants.get(principal)?.admin === true,
    allows(principal, action, bucket, scope) {
      const g = grants.get(principal);
      if (!g) return false;
      if (g.admin || g.rules === "all") return true;
      return g.rules.some((rule) => ruleAllows(rule, action, bucket, scope));
    },
    allowsSomewhere(principal, action, bucket) {
      const g = grants.get(principal);
      if (!g) return false;
      if (g.admin || g.rules === "all") return true;
      return g.rules.some(
        (rule) => rule.actions.includes(action) && (rule.bucket === "*" || rule.bucket === bucket),
      );
    },
  };
}

function ruleAllows(rule: AccessRule, action: Action, bucket: string, scope: Scope): boolean {
  if (!rule.actions.includes(action)) return false;
  if (rule.bucket !== "*" && rule.bucket !== bucket) return false;
  if ("bucket" in scope) return rule.prefix === "";
  // A key or a prefix is in scope when it lies entirely under the rule's prefix: a listing of
  // "team-a/" is allowed by a rule on "team-a/", a listing of the whole bucket is not.
  const subject = "key" in scope ? scope.key : scope.prefix;
  return subject.startsWith(rule.prefix);
}

/** A policy where every key may do everything and is an administrator (tests, single-user setups). */
export const openPolicy: AccessPolicy = {
  isAdmin: () => true,
  allows: () => true,
  allowsSomewhere: () => true,
};
