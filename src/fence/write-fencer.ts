import type { AuditDraft, AuditLog } from "../audit/audit-log.js";
import type { Clock } from "../core/clock.js";
import { DomainError, highestTokenOf, isDomainError, StaleTokenError } from "../core/errors.js";
import type { TxDomain } from "../core/tx.js";
import { judgeLease, judgeUnfenced } from "../leases/lease-rules.js";
import type { CommitIntent, LeaseStore } from "../leases/lease-store.js";
import type { FenceObserver } from "../metrics/observe.js";
import {
  type CommitOutcome,
  checkWriteConditions,
  type Fence,
  type FencedCommit,
  type StagedWrite,
  type TransactionSink,
  type WriteConditions,
} from "./commit.js";
import { OutcomeUnknownError } from "./commit-driver.js";
import type { EarlyState } from "./commit-port.js";
import { type AuthorizedWrite, authorizeWrite, type FencingPolicy } from "./decision.js";
import { assertUploadFence } from "./multipart-rules.js";
import type { Outcomes } from "./outcomes.js";
import { type Keyring, type TokenClaims, verifyFencingToken } from "./tokens.js";
import { encodeNote, outcomeKey, recordLanded, unknownKey } from "./write-notes.js";

export type WriteContext = {
  op: string;
  bucket: string;
  key: string;
  tokenString: string | null;
  /** For a multipart part or completion: the upload and the lease it is bound to. */
  upload?: { uploadId: string; token: number | null; leaseId: string | null };
  conditions?: WriteConditions;
  principal: string | null;
  requestId: string;
  /** Aborted when the client goes away. */
  signal?: AbortSignal;
  /** The fenced transaction the write joins (x-fence-transaction), if any. */
  transactionId?: string | null;
};

/** How a write joins a fenced transaction (src/transactions/transactions.ts). */
interface TransactionJoin {
  /** The transaction's sink, or the refusal (not found, ended, another lease or bucket). */
  sinkFor(
    id: string,
    claims: { leaseId: string; token: number } | null,
    bucket: string,
    key: string,
  ): TransactionSink;
  /**
   * What a read carrying the transaction sees of a key: its staged write, or null (nothing
   * staged there, or the transaction is no longer open: the read sees what any read sees).
   */
  stagedRead(
    id: string,
    bucket: string,
    key: string,
    caller: { principal: string | null; requestId: string | null },
  ): StagedWrite | null;
}

/** What the fencing core needs to know about the object before it reads a body. */
type ObjectWriteState = { highestToken: number | null; etag: string | null; early?: EarlyState };

type WriteFencerOptions = {
  leases: LeaseStore;
  audit: AuditLog;
  keyring: Keyring;
  clock: Clock;
  policyFor: (bucket: string) => FencingPolicy;
  /** The object's HCT and ETag (the backend's writeState); throws NoSuchBucket. */
  writeState: (bucket: string, key: string) => Promise<ObjectWriteState>;
  /** The object's HCT for a refusal's x-fence-highest-token, when the refusal does not carry it. */
  highestToken: (bucket: string, key: string) => Promise<number | null>;
  /**
   * The atomic-step domain of the backend that holds this bucket, if it has one
   * (StorageBackend.domain); buckets may live in different backends.
   */
  domainOf: (bucket: string) => TxDomain | undefined;
  /** Where writes answered "unknown" go until their outcome is learnt and recorded. */
  outcomes?: Outcomes;
  /** This gateway, named in the notes of its writes (write-notes.ts). */
  gatewayId?: string;
  /** Told of every decision once it is made (metrics). */
  observe?: FenceObserver;
};

type Committed = { highestToken: number | null };

const AUDITED = Symbol("fencegate.audited");

/** How many keys of its own accepted records a gateway remembers (WriteFencer.recorded). */
const RECORDED_KEPT = 4_096;

function markAudited(err: unknown): unknown {
  if (typeof err === "object" && err !== null) (err as Record<symbol, unknown>)[AUDITED] = true;
  return err;
}

/** Whether a refused write's error has already been recorded in the audit log. */
function wasAudited(err: unknown): boolean {
  return typeof err === "object" && err !== null && (err as Record<symbol, unknown>)[AUDITED] === true;
}

/**
 * Runs one write through the fencing rules:
 * 1. the object's write state (NoSuchBucket first, as S3 answers);
 * 2. authorization: the token's signature, its scope, its lease (or the policy for no token);
 * 3. early refusal of a token already below the HCT, or of failed write conditions, before the
 *    body is read;
 * 4. the commit, handed to the backend as a FencedCommit: the lease is checked again atomically
 *    with it, inside the backend's step when the lease store shares its domain, or through a
 *    commit intent otherwise (src/fence/commit.ts);
 * 5. the decision in the audit log before the caller answers: inside the commit's step when the
 *    log shares the backend's domain, right after the commit otherwise. A decision the log could
 *    not take is answered with 503, never as if it had been recorded.
 */
export class WriteFencer {
  /** Where writes that carry a transaction go; none: such writes are refused. */
  transactions: TransactionJoin | undefined;
  /**
   * The keys (outcomeKey) of the accepted records this gateway appended lately: a write over one
   * of them need not record its predecessor again (FencedCommit.predecessor).
   */
  private readonly recorded = new Set<string>();

  constructor(private readonly opts: WriteFencerOptions) {}

  private remember(once: string): void {
    this.recorded.add(once);
    if (this.recorded.size > RECORDED_KEPT) this.recorded.delete(this.recorded.values().next().value!);
  }

  /** Which parts of the decision can run inside the atomic step of this bucket's backend. */
  private joins(bucket: string): { leases: boolean; audit: boolean } {
    const domain = this.opts.domainOf(bucket);
    const { leases, audit } = this.opts;
    return {
      leases: domain !== undefined && domain === leases.domain && leases.inDomain !== undefined,
      audit: domain !== undefined && domain === audit.domain && audit.appendInStep !== undefined,
    };
  }

  async write<T extends Committed>(
    ctx: WriteContext,
    run: (commit: FencedCommit, auth: AuthorizedWrite) => Promise<T>,
  ): Promise<T & { token: number | null }> {
    let auth: AuthorizedWrite | undefined;
    let intent: CommitIntent | undefined;
    let settled = false;
    let committed = false;
    try {
      const state = await this.opts.writeState(ctx.bucket, ctx.key);
      const joins = this.joins(ctx.bucket);
      auth = await this.authorize(ctx);
      const authorized = auth;
      const token = authorized.fenced ? authorized.claims.token : null;
      if (ctx.upload) assertUploadFence(ctx.upload, token === null ? null : { token });
      const transaction = ctx.transactionId
        ? this.joinTransaction(ctx.transactionId, ctx, authorized)
        : undefined;
      if (token !== null && state.highestToken !== null && token < state.highestToken) {
        throw new StaleTokenError(token, state.highestToken);
      }
      const conditions = ctx.conditions ?? {};
      // A state the backend remembered (not read just now) may be stale, and one read without a
      // look for a foreign object at the key may lack its ETag: the conditions are then decided
      // by the commit only, on a complete read. (An HCT never goes down: a token
      // below a remembered HCT is below the stored one too.)
      const unsure = state.early?.observed.cached || state.early?.observed.etagUnknown;
      if (!unsure) checkWriteConditions(conditions, state.etag);

      let fence: Fence = token === null ? null : { token };
      if (!authorized.fenced && !joins.leases) {
        // An unfenced write across stores holds its intent from before the body on: a lease
        // granted meanwhile fences the object above the ceiling, and the commit is refused.
        intent = await this.opts.leases.beginCommit({ kind: "unfenced", bucket: ctx.bucket, key: ctx.key });
        fence = { ceiling: intent.ceiling };
      }
      let recorded = false;
      const commit: FencedCommit = {
        fence,
        conditions,
        note: encodeNote({
          r: ctx.requestId,
          o: ctx.op,
          t: token,
          l: authorized.fenced ? authorized.claims.leaseId : null,
          w: authorized.fenced ? authorized.lease.owner : null,
          p: ctx.principal,
          ...(this.opts.gatewayId !== undefined ? { g: this.opts.gatewayId } : {}),
        }),
        predecessor: async (text) => {
          try {
            const once = await recordLanded(this.opts.audit, text, ctx.bucket, ctx.key, (k) =>
              this.recorded.has(k),
            );
            if (once !== null) this.remember(once);
          } catch (cause) {
            throw auditUnavailable(cause);
          }
        },
        signal: ctx.signal ?? new AbortController().signal,
        ...(state.early ? { early: state.early } : {}),
        ...(transaction ? { transaction } : {}),
        prepare: async () => {
          if (joins.leases || !authorized.fenced) return;
          const { claims } = authorized;
          intent = await this.opts.leases.beginCommit({
            kind: "fenced",
            leaseId: claims.leaseId,
            token: claims.token,
            bucket: ctx.bucket,
            key: ctx.key,
          });
        },
        atomic: (outcome: CommitOutcome) => {
          if (joins.leases) this.checkInStep(ctx, authorized);
          if (joins.audit) {
            try {
              this.opts.audit.appendInStep!(this.draft(ctx, authorized, accepted(outcome)));
            } catch (cause) {
              // The step rolls back: nothing is committed, and the answer says why.
              throw auditUnavailable(cause);
            }
            recorded = true;
          }
        },
      };
      const result = await run(commit, authorized);
      committed = true;
      if (!recorded) await this.record(ctx, authorized, accepted(result));
      settled = true;
      this.opts.observe?.(ctx.op, "accepted", null);
      return { ...result, token };
    } catch (err) {
      // Committed, but the log could not take the decision: nothing is answered as done without
      // it. The client hears "unknown" (a retry is decided on the store's state); the intent stays,
      // and the "accepted" record is appended once the log takes it (outcomes.ts), then the
      // intent ends.
      if (committed && auth && this.opts.outcomes) {
        const landed = new OutcomeUnknownError(
          { bucket: ctx.bucket, key: ctx.key },
          async () => "landed",
          err,
          `the audit log with the record of ${ctx.bucket}/${ctx.key}`,
        );
        const draft = this.draft(ctx, auth, {
          decision: "unknown",
          reason: "ServiceUnavailable",
          highestToken: null,
        });
        this.opts.outcomes.track(
          landed,
          draft,
          intent?.intentId,
          outcomeKey(ctx.requestId, ctx.bucket, ctx.key),
        );
        this.opts.observe?.(ctx.op, "unknown", "ServiceUnavailable");
        throw markAudited(landed);
      }
      if (committed) {
        this.opts.observe?.(ctx.op, "unknown", "ServiceUnavailable");
        throw markAudited(err);
      }
      if (err instanceof OutcomeUnknownError && auth) {
        // Sent, no answer: neither accepted nor refused. The intent stays until the outcome is
        // learnt and recorded (outcomes.ts); the answer says "unknown".
        await this.unknown(ctx, auth, err, intent?.intentId);
        throw err;
      }
      // A refusal is a known outcome: nothing was committed. Anything else may have committed
      // (a lost connection to the store): its intent stays, for the next grant to fence.
      settled = isDomainError(err);
      await this.refused(ctx, auth, err);
      throw err;
    } finally {
      if (intent && settled) await this.opts.leases.endCommit(intent.intentId).catch(() => undefined);
    }
  }

  private async unknown(
    ctx: WriteContext,
    auth: AuthorizedWrite,
    err: OutcomeUnknownError,
    intentId: string | undefined,
  ): Promise<void> {
    const draft = this.draft(ctx, auth, {
      decision: "unknown",
      reason: "ServiceUnavailable",
      highestToken: null,
    });
    const once = outcomeKey(ctx.requestId, ctx.bucket, ctx.key);
    markAudited(err);
    this.opts.observe?.(ctx.op, "unknown", "ServiceUnavailable");
    // Not after its outcome: a grant that fenced the object may have recorded it already. A log
    // that does not take it changes nothing: the answer stays "unknown" (never a refusal, which
    // would be recorded in the outcome's place), and the record is appended again before the
    // outcome's, once learnt (outcomes.ts).
    const recorded = await this.opts.audit.appendOnce(draft, unknownKey(once), once).then(
      () => true,
      () => false,
    );
    this.opts.outcomes?.track(err, draft, intentId, once, !recorded);
  }

  /**
   * The objects of a bucket with a commit in flight, on any replica: the lease store's commit
   * intents there (a bucket deletion touches them, src/fence/bucket-deletion.ts).
   */
  async inFlight(bucket: string): Promise<{ bucket: string; key: string }[]> {
    const intents = await this.opts.leases.intentsUnder({ bucket, prefix: "" });
    return intents.map(({ bucket: b, key }) => ({ bucket: b, key }));
  }

  private joinTransaction(id: string, ctx: WriteContext, auth: AuthorizedWrite): TransactionSink {
    if (!this.transactions) {
      throw new DomainError("NotImplemented", "this gateway does not offer fenced transactions");
    }
    return this.transactions.sinkFor(id, auth.fenced ? auth.claims : null, ctx.bucket, ctx.key);
  }

  /** Signature, scope and lease of a write, without committing anything. */
  async authorize(ctx: WriteContext): Promise<AuthorizedWrite> {
    const bound =
      ctx.tokenString === null && ctx.upload && ctx.upload.token !== null && ctx.upload.leaseId !== null
        ? { leaseId: ctx.upload.leaseId, token: ctx.upload.token }
        : null;
    return authorizeWrite({
      target: { bucket: ctx.bucket, key: ctx.key },
      tokenString: ctx.tokenString,
      bound,
      policy: this.opts.policyFor(ctx.bucket),
      keyring: this.opts.keyring,
      leases: this.opts.leases,
      now: this.opts.clock(),
    });
  }

  /** Rule 4 inside the backend's atomic step, with the lease store's synchronous reads. */
  private checkInStep(ctx: WriteContext, auth: AuthorizedWrite): void {
    const reads = this.opts.leases.inDomain!;
    if (auth.fenced) {
      judgeLease(auth.claims, reads.get(auth.claims.leaseId), this.opts.clock(), (l) =>
        reads.findNewerOverlapping(l),
      );
    } else {
      judgeUnfenced(reads.findActiveCovering(ctx.bucket, ctx.key));
    }
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
    if (wasAudited(err)) return;
    const reason = isDomainError(err) ? err.code : "InternalError";
    let highestToken = highestTokenOf(err) ?? null;
    // A store that just did not answer (or asked us to slow down) is not asked again: that would
    // double the wait of a request already answered 503.
    const storeDown = isDomainError(err) && (err.code === "ServiceUnavailable" || err.code === "SlowDown");
    if (highestToken === null && !storeDown && ctx.bucket !== "" && ctx.key !== "") {
      highestToken = await this.opts.highestToken(ctx.bucket, ctx.key).catch(() => null);
      if (highestToken !== null && isDomainError(err)) err.details.highestToken = highestToken;
    }
    // Nor is a lease store that just failed asked for the lease's owner.
    const leasesDown = storeDown || (isDomainError(err) && err.code === "LeaseStoreUnavailable");
    const owner = auth?.fenced ? auth.lease.owner : leasesDown ? null : await this.ownerOfClaimed(ctx);
    const draft = this.draft(ctx, auth, { decision: "rejected", reason, highestToken }, owner);
    // The request log names the token of a refused write too (its number, never the string).
    if (isDomainError(err) && draft.token !== null && err.details.token === undefined) {
      err.details.token = draft.token;
    }
    await this.record(ctx, auth, { decision: "rejected", reason, highestToken }, owner);
    markAudited(err);
    this.opts.observe?.(ctx.op, "rejected", reason);
  }

  /**
   * The owner of the lease a refused write's verified token names (refused before its lease was
   * looked up, or because it was superseded or ended): the audit record says whose write it was.
   * Null when the token does not verify or the lease store no longer knows the lease.
   */
  private async ownerOfClaimed(ctx: WriteContext): Promise<string | null> {
    const claims = verifiedClaims(ctx, this.opts.keyring);
    if (!claims) return null;
    const lease = await this.opts.leases.get(claims.leaseId).catch(() => null);
    return lease?.owner ?? null;
  }

  /**
   * A write's decision. An accepted one is recorded once: a grant that fenced the object may have
   * recorded it already (fencingWithRecords, write-notes.ts), in its place among the object's
   * writes. A refused write never landed; its record is appended once all the same, under the same
   * key, so that a retried append after a lost answer leaves one decision.
   */
  private async record(
    ctx: WriteContext,
    auth: AuthorizedWrite | undefined,
    outcome: Pick<AuditDraft, "decision" | "reason" | "highestToken">,
    owner?: string | null,
  ): Promise<void> {
    const draft = this.draft(ctx, auth, outcome, owner);
    try {
      // Once, refusals too: an append whose answer was lost is tried again by the request's
      // refusal path (src/s3-endpoint/handler.ts), and must not leave the decision twice.
      const once = outcomeKey(ctx.requestId, ctx.bucket, ctx.key ?? "");
      await this.opts.audit.appendOnce(draft, once);
      if (outcome.decision === "accepted") this.remember(once);
    } catch (cause) {
      throw auditUnavailable(cause);
    }
  }

  private draft(
    ctx: WriteContext,
    auth: AuthorizedWrite | undefined,
    outcome: Pick<AuditDraft, "decision" | "reason" | "highestToken">,
    /** The lease's owner when `auth` does not hold it (a write refused before its lease was judged). */
    owner: string | null = null,
  ): AuditDraft {
    const claims = auth?.fenced ? auth.claims : verifiedClaims(ctx, this.opts.keyring);
    return {
      op: ctx.op,
      bucket: ctx.bucket === "" ? null : ctx.bucket,
      key: ctx.key === "" ? null : ctx.key,
      prefix: null,
      token: claims?.token ?? null,
      leaseId: claims?.leaseId ?? null,
      owner: auth?.fenced ? auth.lease.owner : owner,
      principal: ctx.principal,
      requestId: ctx.requestId,
      ...(ctx.transactionId ? { transactionId: ctx.transactionId } : {}),
      ...outcome,
    };
  }
}

/** A decision the audit log could not take: never answered as if it had been. */
function auditUnavailable(cause: unknown): DomainError {
  return new DomainError(
    "ServiceUnavailable",
    "the audit log could not record the decision on this write; nothing is answered without it",
    {},
    { cause },
  );
}

const accepted = (outcome: CommitOutcome): Pick<AuditDraft, "decision" | "reason" | "highestToken"> => ({
  decision: "accepted",
  reason: null,
  highestToken: outcome.highestToken,
});

/** Claims of a token whose signature verifies; forged tokens contribute nothing to the record. */
function verifiedClaims(ctx: WriteContext, keyring: Keyring): Pick<TokenClaims, "leaseId" | "token"> | null {
  if (!ctx.tokenString) {
    const u = ctx.upload;
    return u && u.token !== null && u.leaseId !== null ? { leaseId: u.leaseId, token: u.token } : null;
  }
  const verified = verifyFencingToken(ctx.tokenString, keyring);
  return verified.ok ? verified.claims : null;
}
