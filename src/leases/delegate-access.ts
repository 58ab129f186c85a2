import type { AccessPolicy } from "../access/access-policy.js";
import { covers, type ResourceRef } from "./lease-rules.js";

/**
 * The access policy with lease delegates added: a delegate's access key may read and write under
 * its lease's resource (with the lease's fencing token, which the fencing core checks), and
 * nothing else: no leasing, no bucket operations, never an administrator. Every other access
 * key is answered by `policy`.
 */
export function withDelegates(
  policy: AccessPolicy,
  delegateScope: (accessKeyId: string) => ResourceRef | undefined,
): AccessPolicy {
  const mayTouch = (action: string) => action === "read" || action === "write";
  return {
    isAdmin: (principal) => policy.isAdmin(principal),
    allows(principal, action, bucket, scope) {
      const lease = delegateScope(principal);
      if (!lease) return policy.allows(principal, action, bucket, scope);
      if (!mayTouch(action) || "bucket" in scope) return false;
      if ("key" in scope) return covers(lease, bucket, scope.key);
      return (
        lease.bucket === bucket && lease.key === undefined && scope.prefix.startsWith(lease.prefix ?? "")
      );
    },
    allowsSomewhere(principal, action, bucket) {
      const lease = delegateScope(principal);
      if (!lease) return policy.allowsSomewhere(principal, action, bucket);
      return mayTouch(action) && lease.bucket === bucket;
    },
  };
}
