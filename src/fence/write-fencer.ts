import type { AuditDraft, AuditLog } from "../audit/audit-log.js";
import type { CommitHooks, WriteFence } from "../backends/storage-backend.js";
import type { Clock } from "../core/clock.js";
import { DomainError, StaleTokenError } from "../core/errors.js";
import type { LeaseStore } from "../leases/lease-store.js";
import {
  type AuthorizedWrite,
  assertLeaseCurrent,
  authorizeWrite,
  type BoundLease,
  type FencingPolicy,
} from "./decision.js";
import { type Keyring, type TokenClaims, verifyFencingToken } from "./tokens.js";

export type WriteContext = {
  op: string;
  bucket: string;
  key: string;
  tokenString: string | null;
  /** For a multipart part or completion sent without a token: the lease its upload is bound to. */
  bound?: BoundLease | null;
  principal: string | null;
  requestId: string;
};

export type WriteFencerOptions = {
  leases: LeaseStore;
  audit: AuditLog;
  keyring: Keyring;
  clock: Clock;
  policyFor: (bucket: string) => FencingPolicy;
  /** The object's HCT, for early refusal and for the x-fence-highest-token header. */
  highestToken: (bucket: string, key: string) => Promise<number | null>;
  /**
   * Appends an audit record synchronously inside the backend's commit transaction, when the
   * audit log and the backend share one embedded database: the accepted write and its record
   * then commit together, with one fsync.
   */
  appendInCommit?: (draft: AuditDraft) => void;
};

export type Committed = { highestToken: number | null };

const AUDITED = Symbol("fencegate.audited");

/** Whether a refused write's error has already been recorded in the audit log. */
export function wasAudited(err: unknown): boolean {
  return typeof err === "object" && err !== null && (err as Record<symbol, unknown>)[AUDITED] === true;
}

/**
 * Runs one write through the fencing rules: authorize (signature, scope, lease), refuse early
 * when the token is already below the object's HCT (before reading the body), let the backend
 * commit atomically with a last lease check just before it, and record the decision in the
 * audit log before the caller answers.
 */
export class WriteFencer {
  constructor(private readonly opts: WriteFencerOptions) {}

  async write<T extends Committed>(
    ctx: WriteContext,
    commit: (fence: WriteFence, hooks: CommitHooks, auth: AuthorizedWrite) => Promise<T>,
  ): Promise<T & { token: number | null }> {
    let auth: AuthorizedWrite | undefined;
    try {
      auth = await this.authorize(ctx);
      const fence = auth.fenced ? { token: auth.claims.token } : null;
      if (fence) await this.refuseIfBelowHighest(ctx, fence.token);
      let recordedInCommit = false;
      const appendInCommit = this.opts.appendInCommit;
      const inCommit = appendInCommit
        ? ({ highestToken }: { highestToken: number | null }) => {
            appendInCommit(this.draft(ctx, auth!, { decision: "accepted", reason: null, highestToken }));
            recordedInCommit = true;
          }
        : undefined;
      const result = await commit(fence, { beforeCommit: () => this.recheckLease(auth!), inCommit }, auth);
      if (!recordedInCommit) {
        await this.record(ctx, auth, {
          decision: "accepted",
          reason: null,
          highestToken: result.highestToken,
        });
      }
      return { ...result, token: fence?.token ?? null };
    } catch (err) {
      await this.refused(ctx, auth, err);
      throw err;
    }
  }

  /** Authorizes without committing (multipart parts, which commit nothing visible). */
  async authorize(ctx: WriteContext): Promise<AuthorizedWrite> {
    return authorizeWrite({
      target: { bucket: ctx.bucket, key: ctx.key },
      tokenString: ctx.tokenString,
      bound: ctx.bound ?? null,
      policy: this.opts.policyFor(ctx.bucket),
      keyring: this.opts.keyring,
      leases: this.opts.leases,
      now: this.opts.clock(),
    });
  }

  private async refuseIfBelowHighest(ctx: WriteContext, token: number): Promise<void> {
    const highest = await this.opts.highestToken(ctx.bucket, ctx.key);
    if (highest !== null && token < highest) throw new StaleTokenError(token, highest);
  }

  private async recheckLease(auth: AuthorizedWrite): Promise<void> {
    if (!auth.fenced) return;
    const lease = await this.opts.leases.get(auth.claims.leaseId);
    await assertLeaseCurrent({
      claims: auth.claims,
      lease,
      leases: this.opts.leases,
      now: this.opts.clock(),
    });
  }

  /**
   * Records a write refused before it reached the fencing decision (a malformed request, a
   * missing bucket, metadata too large). A refusal already recorded is not recorded twice.
   */
  async recordRefusal(ctx: Omit<WriteContext, "key"> & { key: string | null }, err: unknown): Promise<void> {
    if (wasAudited(err)) return;
    await this.refused({ ...ctx, key: ctx.key ?? "" }, undefined, err);
  }

  private async refused(ctx: WriteContext, auth: AuthorizedWrite | undefined, err: unknown): Promise<void> {
    const code = (err as { code?: unknown }).code;
    const reason = typeof code === "string" ? code : "InternalError";
    let highestToken: number | null | undefined =
      err instanceof StaleTokenError ? err.highestToken : undefined;
    if (highestToken === undefined) {
      highestToken = await this.opts.highestToken(ctx.bucket, ctx.key).catch(() => null);
    }
    if (err instanceof DomainError && highestToken !== null) err.details.highestToken = highestToken;
    await this.record(ctx, auth, { decision: "rejected", reason, highestToken });
    if (typeof err === "object" && err !== null) (err as Record<symbol, unknown>)[AUDITED] = true;
  }

  private async record(
    ctx: WriteContext,
    auth: AuthorizedWrite | undefined,
    outcome: Pick<AuditDraft, "decision" | "reason" | "highestToken">,
  ): Promise<void> {
    await this.opts.audit.append(this.draft(ctx, auth, outcome));
  }

  private draft(
    ctx: WriteContext,
    auth: AuthorizedWrite | undefined,
    outcome: Pick<AuditDraft, "decision" | "reason" | "highestToken">,
  ): AuditDraft {
    const claims = auth?.fenced ? auth.claims : verifiedClaims(ctx, this.opts.keyring);
    return {
      op: ctx.op,
      bucket: ctx.bucket,
      key: ctx.key === "" ? null : ctx.key,
      prefix: null,
      token: claims?.token ?? null,
      leaseId: claims?.leaseId ?? null,
      owner: auth?.fenced ? auth.lease.owner : null,
      principal: ctx.principal,
      requestId: ctx.requestId,
      ...outcome,
    };
  }
}

/** Claims of a token whose signature verifies; forged tokens contribute nothing to the record. */
function verifiedClaims(ctx: WriteContext, keyring: Keyring): Pick<TokenClaims, "leaseId" | "token"> | null {
  if (!ctx.tokenString) return ctx.bound ?? null;
  const verified = verifyFencingToken(ctx.tokenString, keyring);
  return verified.ok ? verified.claims : null;
}
