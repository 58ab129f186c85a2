import { describeLeaseLoss, type FenceApiErrorInit, type LeaseLossReason, LeaseLostError } from "./errors.js";
import type { AuditQuery, AuditRecord, LeaseRecord } from "./types.js";

export type AuditReader = (query: AuditQuery) => Promise<{ records: AuditRecord[] }>;

export type LeaseLossExplanation = { reason: LeaseLossReason; supersededBy?: number; by?: string | null };

/**
 * Why a lease ended, from the audit log: broken (a LeaseBroken record), released (LeaseReleased),
 * superseded (a newer lease acquired on the same key or prefix), or expired (LeaseExpired).
 * Null when the log says none of these (yet), or cannot be read.
 */
export async function explainLeaseLoss(
  audit: AuditReader,
  lease: Pick<LeaseRecord, "leaseId" | "bucket" | "key" | "prefix" | "token">,
): Promise<LeaseLossExplanation | null> {
  const ended = (op: string) =>
    audit({ leaseId: lease.leaseId, op, decision: "accepted", limit: 1 }).then((p) => p.records[0]);
  const [broken, released] = await Promise.all([ended("LeaseBroken"), ended("LeaseReleased")]);
  if (broken) return { reason: "broken", by: broken.principal };
  if (released) return { reason: "released", by: released.principal };
  const resource = lease.key !== undefined ? { key: lease.key } : { prefix: lease.prefix };
  const [grants, expired] = await Promise.all([
    audit({ bucket: lease.bucket, ...resource, op: "LeaseAcquired", decision: "accepted", limit: 1000 }),
    ended("LeaseExpired"),
  ]);
  const newer = grants.records
    .filter((r) => r.token !== null && r.token > lease.token && r.leaseId !== lease.leaseId)
    .sort((a, b) => a.token! - b.token!)[0];
  if (newer) return { reason: "superseded", supersededBy: newer.token! };
  if (expired) return { reason: "expired" };
  return null;
}

/** A LeaseLostError for `why`, in the words of describeLeaseLoss; the gateway's answer is kept. */
export function lossError(
  leaseId: string,
  why: LeaseLossExplanation | null,
  answer?: FenceApiErrorInit,
): LeaseLostError {
  const init = {
    status: answer?.status ?? 0,
    code: answer?.code ?? "LeaseExpired",
    message: "",
    body: answer?.body,
    requestId: answer?.requestId,
    ...(why ?? {}),
  };
  const error = new LeaseLostError(init);
  error.message = describeLeaseLoss(error.reason, {
    leaseId,
    supersededBy: error.supersededBy,
    by: error.by,
    cause: answer?.message,
  });
  return error;
}
