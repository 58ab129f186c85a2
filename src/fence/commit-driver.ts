import { randomBytes } from "node:crypto";
import { DomainError, StaleTokenError } from "../core/errors.js";
import type { TxDomain } from "../core/tx.js";
import {
  applyFence,
  checkWriteConditions,
  type FencedCommit,
  type StagedWrite,
  type TransactionSink,
} from "./commit.js";
import type {
  CasNext,
  CasPort,
  CommitPort,
  FenceState,
  NextState,
  ObjectRef,
  Observed,
  Pending,
  ReadOptions,
  StepPort,
  SwapAnswer,
  TransactionLog,
  TxState,
} from "./commit-port.js";
import { WRITE_HISTORY } from "./commit-port.js";

/**
 * The one commit protocol of every backend (the port: commit-port.ts).
 *
 *   prepare (the lease check through a commit intent, when the lease store is elsewhere)
 *   → loop { read the state → the HCT rule and the write conditions → the change →
 *            [step backend: the lease check and the audit record in the step, then the change]
 *            [compare-and-swap backend: the conditional write] }
 *
 * A conditional write has three outcomes, never two. "swapped" landed. "lost" did not (another
 * write came first): read again and decide again. "unknown" (sent, no answer) may have landed:
 * the driver reads the state again and learns it from the write history the state keeps: its own
 * write id there means landed; the state it was conditioned on still in place means it may still
 * land, so the same request is sent again (at most one copy can land, both name the same state);
 * a newer state whose history shows another write after the one it was conditioned on means it
 * never will. What cannot be learnt in time is thrown as OutcomeUnknownError, which carries a
 * `settle()` that learns it later (and makes sure the request can no longer land), so that the
 * fencing core answers "unknown", keeps the commit intent, and records the outcome once known.
 */

/** One commit: what it does to the object. */
type CommitSpec<S> =
  /**
   * A new live version, staged by the backend (PutObject, CopyObject, CompleteMultipartUpload).
   * `ready`: the backend's last checks after prepare (a completion's upload and parts are still
   * the ones assembled); throws to refuse.
   */
  | { op: "put"; version: S; ready?: () => Promise<void> }
  /** A tombstone, keeping the HCT (DeleteObject, each key of DeleteObjects). */
  | { op: "delete" }
  /**
   * The HCT rule only, nothing visible written (CreateMultipartUpload, UploadPart). `inStep`: a
   * step backend's own change (the upload's or the part's row), made in the same atomic step as
   * the check; a compare-and-swap backend records it after the commit instead.
   */
  | { op: "check"; inStep?: () => void }
  /** HCT := max(HCT, token), nothing else changes (the fencing of commit intents, lease breaks). */
  | { op: "raise"; token: number }
  /** The same state again under a new write id: no commit in flight over the old one can land. */
  | { op: "touch" }
  /**
   * Only resolves a pending transaction write in the state (rolled forward when its transaction
   * committed, dropped when it did not); an open transaction's stays. Compare-and-swap backends.
   */
  | { op: "settle" };

type CommitResult = {
  /** The state the commit found: the one it replaced, when it wrote. */
  before: FenceState;
  /** The object's HCT once the commit is done. */
  highestToken: number | null;
  /** Whether anything was written. */
  wrote: boolean;
  /** The store's time of the new state, when it said. */
  lastModified?: Date;
};

/** Passes of the loop: each lost pass means another write committed first. */
const MAX_ATTEMPTS = 64;
/** Sends of one conditional write while its outcome stays unknown and the state unchanged. */
const MAX_SENDS = 3;

export const newWriteId = (): string => randomBytes(9).toString("base64url");

/** A write that the client abandoned before anything was sent: nothing was done. */
const abandoned = (): DomainError =>
  new DomainError("IncompleteBody", "the request was abandoned before it completed");

/**
 * Runs one commit against a backend. `commit` is the fencing core's side of it (absent for a
 * raise or a touch, which no client asked for). Throws the refusal (a DomainError: nothing was
 * written), or OutcomeUnknownError. A refused or failed put's staged version is discarded;
 * after an unknown outcome it is left to the backend's collector.
 */
export async function runCommit<S>(
  port: CommitPort<S>,
  ref: ObjectRef,
  spec: CommitSpec<S>,
  commit?: FencedCommit,
): Promise<CommitResult> {
  try {
    if (commit) {
      await commit.prepare();
      if (commit.signal.aborted) throw abandoned();
    }
    if (spec.op === "put") await spec.ready?.();
    if (commit?.transaction && (spec.op === "put" || spec.op === "delete")) {
      return await stage(port, ref, spec, commit, commit.transaction);
    }
    return port.kind === "step"
      ? await runStep(port, ref, spec, commit)
      : await runSwaps(port, ref, spec, commit);
  } catch (e) {
    if (spec.op === "put" && !(e instanceof OutcomeUnknownError)) {
      await port.discard(ref, spec.version).catch(() => undefined);
    }
    throw e;
  }
}

/**
 * The decision of every backend on the state read: the HCT rule, the conditions, and the state
 * to write (null: nothing to write).
 */
function decide<S>(
  spec: CommitSpec<S>,
  state: FenceState,
  commit: FencedCommit | undefined,
  writeId: string,
  /** The backend keeps a write's note with the state it makes (compare-and-swap backends). */
  keepsNotes = false,
): { next: NextState<S> | null; highestToken: number | null } {
  if (spec.op === "raise") {
    if (!(Number.isSafeInteger(spec.token) && spec.token >= 0)) {
      throw new DomainError("InvalidArgument", "a fencing token must be a non-negative integer");
    }
    if (state.hct !== null && state.hct >= spec.token) return { next: null, highestToken: state.hct };
    return { next: { kind: "keep", hct: spec.token, writeId }, highestToken: spec.token };
  }
  if (spec.op === "touch") {
    return { next: { kind: "keep", hct: state.hct, writeId }, highestToken: state.hct };
  }
  if (spec.op === "settle") return { next: null, highestToken: state.hct };
  const hct = applyFence(commit?.fence ?? null, state.hct);
  if (commit) checkWriteConditions(commit.conditions, state.etag);
  switch (spec.op) {
    case "check":
      // Nothing visible changes: the HCT is checked, not raised.
      return { next: null, highestToken: state.hct };
    case "put":
      return {
        next: { kind: "put", version: spec.version, hct, writeId, ...noteOf(commit) },
        highestToken: hct,
      };
    case "delete": {
      // Nothing stored and no HCT to keep; or already a tombstone with this HCT (and this note:
      // another delete's tombstone takes this one's, for whoever records it later).
      const sameNote = !keepsNotes || commit?.note === undefined || state.note === commit.note;
      if ((!state.stored && hct === null) || (state.deleted && state.hct === hct && sameNote)) {
        return { next: null, highestToken: hct };
      }
      return { next: { kind: "delete", hct, writeId, ...noteOf(commit) }, highestToken: hct };
    }
  }
}

const noteOf = (commit: FencedCommit | undefined) => (commit?.note ? { note: commit.note } : {});

/** Whether the commit is a client's write (the bucket must be writable), not a raise or a touch. */
const isWrite = (spec: CommitSpec<unknown>) =>
  spec.op !== "raise" && spec.op !== "touch" && spec.op !== "settle";

/** Whether the commit needs the live ETag of a foreign object too (conditions, a delete's answer). */
const needsEtag = (spec: CommitSpec<unknown>, commit: FencedCommit | undefined) =>
  spec.op === "delete" ||
  commit?.conditions.ifMatch !== undefined ||
  commit?.conditions.ifNoneMatch !== undefined;

async function runStep<S>(
  port: StepPort<S>,
  ref: ObjectRef,
  spec: CommitSpec<S>,
  commit: FencedCommit | undefined,
): Promise<CommitResult> {
  const writeId = newWriteId();
  let highestToken: number | null = null;
  const done = await port.domain.run(() => {
    const stepped = port.step(ref, isWrite(spec), (state) => {
      const decided = decide(spec, state, commit, writeId);
      highestToken = decided.highestToken;
      // Inside the step: the lease check and the audit record when they share the domain.
      if (commit && isWrite(spec)) commit.atomic({ highestToken });
      return decided.next;
    });
    if (spec.op === "check") spec.inStep?.();
    return stepped;
  });
  if (done.cleanup) await done.cleanup().catch(() => undefined);
  return { before: done.state, highestToken, wrote: done.wrote };
}

/**
 * A write of a transaction: checked in one step like any write (the HCT rule and the conditions
 * on the object as it is, the lease and the audit record through commit.atomic), nothing visible
 * changed; the change is handed to the transaction, whose commit applies it. A put's staged
 * version then belongs to the transaction (discarded by it if it never commits).
 */
async function stage<S>(
  port: CommitPort<S>,
  ref: ObjectRef,
  spec: Extract<CommitSpec<S>, { op: "put" | "delete" }>,
  commit: FencedCommit,
  transaction: TransactionSink,
): Promise<CommitResult> {
  if (port.kind === "cas") {
    if (!transaction.cas || !port.transactions) {
      throw new DomainError("NotImplemented", "this transaction cannot take writes to this bucket's backend");
    }
    // The transaction as its record says now: open, this write's lease.
    await transaction.cas.open();
    const staged = await runSwaps(port, ref, spec, commit, transaction);
    return { ...staged, wrote: false };
  }
  const write: StagedWrite = {
    ref,
    port: port as StepPort<unknown>,
    change: spec.op === "put" ? { op: "put", version: spec.version } : { op: "delete" },
    commit,
  };
  // Kept in the same step as its checks and its audit record: the transaction holds exactly the
  // writes whose staging committed, and a commit that starts meanwhile either has it or refuses it.
  let staged: ReturnType<TransactionSink["stage"]> | undefined;
  try {
    const checked = await runStep(
      port,
      ref,
      {
        op: "check",
        inStep: () => {
          staged = transaction.stage(write);
        },
      },
      commit,
    );
    await staged?.kept();
    return { ...checked, wrote: false };
  } catch (e) {
    staged?.undo();
    throw e;
  }
}

/** What one staged write did in its transaction's commit. */
type AppliedWrite = {
  ref: ObjectRef;
  highestToken: number | null;
  before: FenceState;
  wrote: boolean;
};

/**
 * A transaction's commit on a step backend: every staged write applied in ONE step of the
 * domain, each with the decision of a single write (its token's HCT rule and its conditions on
 * the object as it is now), then `inStep` (the lease check, the transaction's record, its audit
 * record). Any refusal throws and the step changes nothing: all or none. Writes to the same
 * object apply in the order given (the transaction keeps only the last one per key).
 */
export async function runTransactionStep(
  domain: TxDomain,
  writes: readonly StagedWrite[],
  inStep: (applied: readonly AppliedWrite[]) => void,
): Promise<AppliedWrite[]> {
  const cleanups: Array<() => Promise<void>> = [];
  const applied = await domain.run(() => {
    cleanups.length = 0;
    const out: AppliedWrite[] = [];
    for (const w of writes) {
      const writeId = newWriteId();
      let highestToken: number | null = null;
      const spec: CommitSpec<unknown> =
        w.change.op === "put" ? { op: "put", version: w.change.version } : { op: "delete" };
      const stepped = w.port.step(w.ref, true, (state) => {
        const decided = decide(spec, state, w.commit, writeId);
        highestToken = decided.highestToken;
        return decided.next;
      });
      if (stepped.cleanup) cleanups.push(stepped.cleanup);
      out.push({ ref: w.ref, highestToken, before: stepped.state, wrote: stepped.wrote });
    }
    inStep(out);
    return out;
  });
  for (const cleanup of cleanups) await cleanup().catch(() => undefined);
  return applied;
}

async function runSwaps<S>(
  port: CasPort<S>,
  ref: ObjectRef,
  spec: CommitSpec<S>,
  commit: FencedCommit | undefined,
  stageIn?: TransactionSink,
): Promise<CommitResult> {
  const writeId = newWriteId();
  const write = isWrite(spec);
  // The transaction's own pending write is not in its way (a staging again, its multipart steps).
  const own = stageIn?.transactionId ?? commit?.transaction?.transactionId;
  const etag = needsEtag(spec, commit);
  /** The object's state read from the store now, and the bucket checked after it (CasPort.checkBucket). */
  const fresh = async (attempt: number): Promise<Observed> => {
    const now = await port.read(ref, { attempt, etag });
    if (write) await port.checkBucket(ref.bucket);
    return now;
  };
  // The fencing core's look before the body, when it is this object's, saves the first read.
  const early = commit?.early;
  let observed =
    early && early.ref.bucket === ref.bucket && early.ref.key === ref.key
      ? early.observed
      : await port.read(ref, { attempt: 1, etag, cached: true });
  // The early look did not look for a foreign object at the key, and the decision needs it.
  if (etag && observed.etagUnknown) observed = await port.read(ref, { attempt: 1, etag, cached: true });
  // After the object's state, never before: see CasPort.checkBucket.
  if (write) await port.checkBucket(ref.bucket);
  /** The state the last send whose answer never came was conditioned on. */
  let uncertain: Observed | null = null;
  for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
    const pending = observed.pending;
    if (pending && pending.tx !== own && uncertain === null) {
      // Another transaction's write is staged here: resolved first, on a fresh read.
      if (observed.cached) {
        observed = await fresh(attempt);
        attempt--;
        continue;
      }
      const resolution = await resolvePending(port, ref, pending, spec, commit);
      if (resolution !== "keep") {
        await settlePending(port, ref, observed, pending, resolution === "forward", attempt);
        observed = await fresh(attempt + 1);
        continue;
      }
    }
    let decided: { next: CasNext<S> | null; highestToken: number | null };
    try {
      decided = decide(spec, observed, commit, writeId, true);
      if (decided.next?.kind === "put") await port.usable?.(decided.next.version, observed);
      if (stageIn && (spec.op === "put" || spec.op === "delete")) {
        // A transaction's write: checked as a single write, then staged beside the live state.
        decided = {
          next: {
            kind: "stage",
            pending: {
              tx: stageIn.transactionId,
              token: commit?.fence?.token ?? 0,
              change: spec.op === "put" ? { kind: "put", version: spec.version } : { kind: "delete" },
              writeId,
              ...(commit?.note ? { note: commit.note } : {}),
            },
            hct: observed.hct,
            writeId,
          },
          highestToken: decided.highestToken,
        };
      }
    } catch (e) {
      // A state this process remembered may be stale: a refusal is only decided on a fresh read.
      if (!observed.cached) throw e;
      observed = await fresh(attempt);
      attempt--;
      continue;
    }
    const { next, highestToken } = decided;
    // Nothing to write on a remembered state: the stored one may differ; decide on a fresh read.
    if (next === null && observed.cached) {
      observed = await fresh(attempt);
      attempt--;
      continue;
    }
    if (next === null) return { before: observed, highestToken, wrote: false };
    // Nothing was sent yet: a client that went away is refused. Once sent, a commit is seen
    // through whatever the client does: its outcome is what gets recorded.
    if (attempt === 1 && commit?.signal.aborted) throw abandoned();
    // The write it replaces (or stages over) landed: recorded first (write-notes.ts), before
    // this one is sent (again: a no-op once recorded).
    const predecessor =
      commit?.predecessor &&
      (next.kind === "put" || next.kind === "delete" || next.kind === "stage") &&
      observed.note !== undefined &&
      observed.note !== commit.note
        ? observed.note
        : undefined;
    // A send that throws certainly did nothing; but once an earlier send's answer was lost, the
    // write's outcome stays unknown whatever this one says.
    const send = async (): Promise<SwapAnswer> => {
      try {
        if (predecessor !== undefined) await commit!.predecessor!(predecessor);
        return await port.swap(ref, observed, next, { attempt, op: spec.op });
      } catch (e) {
        if (uncertain === null) throw e;
        throw unknownSwap(ref, writeId, uncertain, port, e);
      }
    };
    let answer = await send();
    for (let sends = 1; ; sends++) {
      if (answer.outcome === "swapped") {
        await landedOver(port, ref, observed, next);
        if (next.kind === "stage") await joined(port, ref, stageIn!, next);
        return {
          before: observed,
          highestToken,
          wrote: true,
          ...(answer.lastModified ? { lastModified: answer.lastModified } : {}),
        };
      }
      if (answer.outcome === "unknown") uncertain = observed;
      const now = await readAfter(port, ref, { attempt: attempt + 1, etag }, writeId, uncertain, answer);
      if (now.writes.includes(writeId)) {
        // An earlier send landed although its answer was lost (or was a lost race's 412).
        await landedOver(port, ref, uncertain ?? observed, next);
        if (next.kind === "stage") await joined(port, ref, stageIn!, next);
        return { before: uncertain ?? observed, highestToken, wrote: true };
      }
      if (now.version !== observed.version) {
        // Moved on: this write's sends were conditioned on a state that is gone for good.
        if (uncertain !== null && !successorKnown(now, uncertain)) {
          throw unknownSwap(ref, writeId, uncertain, port, answerError(answer));
        }
        uncertain = null;
        observed = now;
        if (write) await port.checkBucket(ref.bucket);
        break;
      }
      // Unchanged. A lost race with the state unchanged is S3's transient 409: decide again.
      if (answer.outcome === "lost") break;
      // Unknown and unchanged: it may still arrive. The same request again: at most one lands.
      if (sends >= MAX_SENDS) throw unknownSwap(ref, writeId, observed, port, answer.error);
      answer = await send();
    }
    await backoff(attempt);
  }
  throw new DomainError(
    "SlowDown",
    `too many concurrent writes to ${ref.bucket}/${ref.key}: the write was not committed; please retry`,
    { retryAfterSeconds: 1 },
  );
}

/**
 * What a commit does with another transaction's write staged in the object's state, after a
 * look at that transaction's record: roll it forward (committed), drop it (aborted, or never
 * joined), or leave it (open, and this commit need not pass it: a settle, a raise no higher than
 * its token). An open transaction is aborted first (compare-and-swap on its record; if its
 * commit came first, it is rolled forward) by a commit of a higher token (its lease has ended:
 * overlapping leases exclude each other and tokens grow) and by a touch (a bucket deletion).
 * Refused: the same token (another write of the same lease, outside that transaction), a lower
 * one, an unfenced write.
 */
async function resolvePending<S>(
  port: CasPort<S>,
  ref: ObjectRef,
  pending: Pending<unknown>,
  spec: CommitSpec<S>,
  commit: FencedCommit | undefined,
): Promise<"forward" | "drop" | "keep"> {
  const log = port.transactions!(ref.bucket);
  let state = await transactionOutcome(log, pending);
  if (state === "open" && spec.op === "touch") {
    // A bucket deletion ends the transactions staged in the bucket.
    state = await abortTransaction(log, pending.tx, "BucketDeleted");
  } else if (state === "open") {
    if (spec.op === "settle") return "keep";
    const token = spec.op === "raise" ? spec.token : (commit?.fence?.token ?? null);
    if (spec.op === "raise" && token !== null && token <= pending.token) return "keep";
    if (token === null) {
      throw new DomainError(
        "OperationAborted",
        `${ref.key} is staged in open transaction ${pending.tx}; an unfenced write cannot pass it`,
        { transactionId: pending.tx },
      );
    }
    if (token < pending.token) throw new StaleTokenError(token, pending.token);
    if (token === pending.token) {
      throw new DomainError(
        "OperationAborted",
        `${ref.key} is staged in open transaction ${pending.tx} of the same lease; write it in that transaction, or commit or abort it first`,
        { transactionId: pending.tx },
      );
    }
    state = await abortTransaction(log, pending.tx, "Superseded");
  }
  // Committed after all (its commit came first): only if it lists this very write.
  if (state === "committed") state = await transactionOutcome(log, pending);
  return state === "committed" ? "forward" : "drop";
}

/**
 * Whether a pending write made it: committed only when its transaction's record is committed
 * AND lists the key with that very write (a staging that never joined is not part of it).
 */
export async function transactionOutcome(log: TransactionLog, pending: Pending<unknown>): Promise<TxState> {
  const got = await log.read(pending.tx);
  if (!got) return "aborted";
  const { record } = got;
  if (record.state !== "committed") return record.state;
  return record.keys.some((e) => e.writeId === pending.writeId) ? "committed" : "aborted";
}

/**
 * Ends an open transaction as aborted, by compare-and-swap on its record (its commit point).
 * Answers the state the record ended in: "aborted", or "committed" when its commit came first.
 * Throws ServiceUnavailable when the store does not let that be learnt.
 */
export async function abortTransaction(log: TransactionLog, id: string, reason: string): Promise<TxState> {
  for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
    const got = await log.read(id);
    if (!got) return "aborted";
    if (got.record.state !== "open") return got.record.state;
    const answer = await log.swap(got, {
      ...got.record,
      state: "aborted",
      reason,
      nonce: randomBytes(12).toString("base64url"),
    });
    if (answer.outcome === "swapped") return "aborted";
    // Lost (a commit or an abort came first, or S3's transient conflict) or unknown: look again.
    await backoff(attempt);
  }
  throw new DomainError("ServiceUnavailable", `transaction ${id} could not be aborted; please retry`, {
    retryAfterSeconds: 1,
  });
}

/** One conditional write that resolves a pending write; its outcome is learnt by reading again. */
async function settlePending<S>(
  port: CasPort<S>,
  ref: ObjectRef,
  observed: Observed,
  pending: Pending<unknown>,
  forward: boolean,
  attempt: number,
): Promise<void> {
  const next: CasNext<S> = {
    kind: "settle",
    forward,
    hct: forward ? Math.max(observed.hct ?? pending.token, pending.token) : observed.hct,
    writeId: newWriteId(),
    ...(forward && pending.note !== undefined
      ? { note: pending.note }
      : observed.note !== undefined
        ? { note: observed.note }
        : {}),
  };
  const answer = await port.swap(ref, observed, next, { attempt, op: "settle" });
  // Lost or unknown: the next read says. A settle that lands late does what this one would.
  if (answer.outcome === "swapped") await landedOver(port, ref, observed, next);
}

/**
 * After a transaction's write was staged: the key joins the transaction's record. When it cannot
 * (the transaction ended meanwhile), the staged write is dropped and the write refused.
 */
async function joined<S>(
  port: CasPort<S>,
  ref: ObjectRef,
  sink: TransactionSink,
  next: Extract<CasNext<S>, { kind: "stage" }>,
): Promise<void> {
  const change = next.pending.change;
  try {
    await sink.cas!.join({
      writeId: next.writeId,
      ...(change.kind === "put"
        ? { etag: String((change.version as { etag?: string }).etag ?? "") }
        : { deleted: true as const }),
    });
  } catch (e) {
    await runSwaps(port, ref, { op: "settle" }, undefined).catch(() => undefined);
    throw e;
  }
}

/** The state after a send that did not say "swapped"; a failed read leaves an unknown send unknown. */
async function readAfter<S>(
  port: CasPort<S>,
  ref: ObjectRef,
  opts: ReadOptions,
  writeId: string,
  uncertain: Observed | null,
  answer: SwapAnswer,
): Promise<Observed> {
  try {
    return await port.read(ref, opts);
  } catch (e) {
    if (uncertain === null) throw e;
    throw unknownSwap(ref, writeId, uncertain, port, answerError(answer) ?? e);
  }
}

async function landedOver<S>(
  port: CasPort<S>,
  ref: ObjectRef,
  from: Observed,
  next: CasNext<S>,
): Promise<void> {
  await port.replaced?.(ref, from, next).catch(() => undefined);
}

const answerError = (answer: SwapAnswer): unknown =>
  answer.outcome === "unknown" ? answer.error : undefined;

/**
 * Whether `now`'s history shows which write followed the state `basis`: the write after basis's
 * own (basis had one), or every write since the key had no history (the history was never cut).
 * Then a write conditioned on `basis` that is not listed never landed, and never will.
 */
function successorKnown(now: Observed, basis: Observed): boolean {
  const previous = basis.writes.at(-1);
  if (previous !== undefined) return now.writes.includes(previous);
  return now.writes.length < WRITE_HISTORY;
}

const backoff = (attempt: number) =>
  new Promise<void>((resolve) =>
    setTimeout(resolve, Math.random() * Math.min(100, 2 ** Math.min(attempt, 7))),
  );

/** How a write whose outcome was unknown turned out. */
export type Settled = "landed" | "not-landed";

/**
 * A write that was sent and whose outcome could not be learnt in time. Answered as unknown (503
 * with `x-fence-outcome: unknown`, never as refused). `settle()` learns the outcome, and makes
 * sure that a request still on its way can no longer land; it throws while the store cannot tell
 * (unreachable): call it again later.
 */
export class OutcomeUnknownError extends DomainError {
  // A private field: never serialized with the error (logs).
  readonly #settle: () => Promise<Settled>;

  constructor(
    readonly ref: ObjectRef,
    settle: () => Promise<Settled>,
    cause: unknown,
    what = `the commit of ${ref.bucket}/${ref.key}`,
  ) {
    super(
      "ServiceUnavailable",
      `the store did not answer ${what} in time: the write may or may not have landed; the gateway will learn which and record it (${describe(cause)})`,
      { outcome: "unknown" },
      { cause },
    );
    this.#settle = settle;
  }

  settle(): Promise<Settled> {
    return this.#settle();
  }
}

/** The outcome of a conditional write to an object's state that was sent and never answered. */
function unknownSwap<S>(
  ref: ObjectRef,
  writeId: string,
  basis: Observed,
  port: CasPort<S>,
  cause: unknown,
): OutcomeUnknownError {
  return new OutcomeUnknownError(ref, () => settleSwap(ref, writeId, basis, port), cause);
}

/**
 * Learns a lost conditional write's outcome: the state's history holds its id (landed); a newer
 * state whose history shows another write after the one it was conditioned on (never landed, and
 * never will); the state unchanged (it may still arrive): the same state is written again under
 * a new write id (a touch), after which it cannot land.
 */
async function settleSwap<S>(
  ref: ObjectRef,
  writeId: string,
  basis: Observed,
  port: CasPort<S>,
): Promise<Settled> {
  for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
    const now = await port.read(ref, { attempt, etag: false });
    if (now.writes.includes(writeId)) return "landed";
    if (now.version !== basis.version) {
      if (successorKnown(now, basis)) return "not-landed";
      throw new Error(`the history of ${ref.bucket}/${ref.key} no longer reaches back to write ${writeId}`);
    }
    const touched = await port.swap(
      ref,
      now,
      { kind: "keep", hct: now.hct, writeId: newWriteId() },
      { attempt, op: "touch" },
    );
    if (touched.outcome === "swapped") return "not-landed";
    // Lost (the write, or another, landed meanwhile) or unknown: look again.
  }
  throw new Error(`the outcome of write ${writeId} to ${ref.bucket}/${ref.key} stays unknown`);
}

const describe = (e: unknown) => (e instanceof Error ? `${e.name}: ${e.message}` : String(e));
