/**
 * The checker of a nemesis run: reads the history the clients recorded (history.ts), the audit
 * log and the objects' final contents, and reports every violation of the contract's safety
 * rules it finds, each with the operations and audit records involved (not just the first).
 *
 * What it checks:
 * - rule 1, tokens: no token granted twice (the audit's grants, and the grants clients received);
 *   grants rise along the audit log, on the whole and per replica; a grant received after
 *   another was received has a higher token (real time, whatever Redis went through);
 * - rules 2 and 3, per object: an accepted write invoked after another accepted write completed
 *   has a token at least as high; what reads returned never goes back in token; and the accepted
 *   writes, in the order of their first audit record, never go back in token (the log is in commit
 *   order: reported apart, as "audit-order", since the log's order is all that says it);
 * - rule 4: no write is accepted that began after its key was granted to a newer lease;
 * - rule 7: every acknowledged write (200, 204) is the object's final content, or an accepted
 *   write or delete that may have come after it (a higher token; the same token, not completed
 *   before it began) replaced it; the final content is the body of the last accepted write, or
 *   absent after the last accepted delete;
 * - rule 5: no write answered as refused is ever visible (read back, or the final content);
 * - unknown outcomes: a write whose body is visible has the final audit decision "accepted";
 * - rule 6: every answered write decision has its audit records under its requestId, agreeing
 *   with the answer; every "unknown" record is followed by a final one; every grant a client
 *   received is in the log.
 *
 * An accepted write's place among the object's commits is the seq of its first audit record: the
 * final record of a write first recorded "unknown" comes when the gateway has learnt the outcome
 * (contract, rule 6), later than the commit; its "unknown" record came after the commit was sent.
 */
import type { AuditRecord } from "../../../src/audit/audit-log.js";
import { describeOp, type Op, tokenOfBody } from "./history.js";

export type ViolationRule =
  /** Rule 1: one token granted twice. */
  | "token-reused"
  /** Rule 1: a grant with a token not above an earlier grant's. */
  | "token-backwards"
  /** Rules 2 and 3: an object's accepted writes (or what reads saw) went back in token, in real time. */
  | "hct-backwards"
  /** The audit log's accepted writes of an object go back in token: the log is not in commit order. */
  | "audit-order"
  /** Rule 4: a write accepted although its key had been granted to a newer lease before it began. */
  | "stale-accepted"
  /** Rule 7: an acknowledged write or delete is gone although nothing could have replaced it. */
  | "lost-write"
  /** The final content is not what the last accepted write left. */
  | "final-state"
  /** Rule 5: a write answered as refused is visible. */
  | "refused-visible"
  /** A visible write whose audit outcome says it did not land (or has no accepted record). */
  | "unknown-mismatch"
  /** A body no client wrote was read. */
  | "phantom-body"
  /** Rule 6: an answered decision (or a grant) without its audit record. */
  | "audit-missing"
  /** Rule 6: an "unknown" record without a final record after it. */
  | "audit-unsettled"
  /** Rule 6: the audit records of a request disagree with its answer or with each other. */
  | "audit-mismatch";

export type Violation = {
  rule: ViolationRule;
  message: string;
  ops: Op[];
  records: AuditRecord[];
};

export type CheckInput = {
  history: readonly Op[];
  /** Every audit record of the run's bucket (writes and lease events), any order. */
  audit: readonly AuditRecord[];
  /** Each key's content at the end, once the system was quiet (null: absent). */
  final: ReadonlyMap<string, string | null>;
};

export type CheckCounts = {
  ops: number;
  /** Writes (puts and deletes) by how the client saw them end. */
  writes: { ok: number; fail: number; info: number };
  /** Writes answered 503 with x-fence-outcome: unknown. */
  unknownAnswers: number;
  /** Write requests recorded "unknown" in the audit log, and how they were settled. */
  auditUnknown: { total: number; landed: number; notLanded: number; unsettled: number };
  /** Grants in the audit log, and grants clients received. */
  grants: { audited: number; received: number };
  reads: number;
};

export type CheckResult = { violations: Violation[]; counts: CheckCounts };

const WRITE_OPS = new Set(["PutObject", "DeleteObject"]);

/** One write request as the audit log tells it: its records under one requestId. */
type AuditedWrite = {
  requestId: string;
  key: string;
  kind: "put" | "delete";
  token: number | null;
  leaseId: string | null;
  records: AuditRecord[];
  /** The seq of its first record: its place among the object's commits. */
  first: number;
  /** The last record's decision when it is not "unknown"; null while unsettled. */
  verdict: "accepted" | "rejected" | null;
  /** The client's operation, when an answer named this request. */
  op: Op | undefined;
};

/** Whether an operation is a write (put or delete). */
const isWrite = (op: Op) => op.kind === "put" || op.kind === "delete";

/** A write's time span; an operation without an answer may take effect any time after it began. */
const endOf = (op: Op | undefined) =>
  op === undefined || op.type === "info" || op.completedAt === null
    ? Number.POSITIVE_INFINITY
    : op.completedAt;

export function checkHistory(input: CheckInput): CheckResult {
  const violations: Violation[] = [];
  const report = (
    rule: ViolationRule,
    message: string,
    ops: (Op | undefined)[],
    records: AuditRecord[] = [],
  ) => violations.push({ rule, message, ops: ops.filter((o): o is Op => o !== undefined), records });

  const history = input.history;
  const audit = [...input.audit].sort((a, b) => a.seq - b.seq);
  const byRequest = new Map<string, Op>();
  for (const op of history) if (op.requestId) byRequest.set(op.requestId, op);
  const putByBody = new Map<string, Op>();
  for (const op of history) if (op.kind === "put" && op.body !== null) putByBody.set(op.body, op);

  // ---- the audit's write requests ----
  const writes = new Map<string, AuditedWrite>();
  for (const r of audit) {
    if (!WRITE_OPS.has(r.op) || r.requestId === null) continue;
    let w = writes.get(r.requestId);
    if (!w) {
      w = {
        requestId: r.requestId,
        key: r.key ?? "",
        kind: r.op === "PutObject" ? "put" : "delete",
        token: r.token,
        leaseId: r.leaseId,
        records: [],
        first: r.seq,
        verdict: null,
        op: byRequest.get(r.requestId),
      };
      writes.set(r.requestId, w);
    }
    w.records.push(r);
  }
  const auditUnknown = { total: 0, landed: 0, notLanded: 0, unsettled: 0 };
  for (const w of writes.values()) {
    const decisions = w.records.map((r) => r.decision);
    const last = decisions.at(-1)!;
    if (last !== "unknown") w.verdict = last;
    const wellFormed =
      (decisions.length === 1 && last !== "unknown") ||
      (decisions.length === 2 && decisions[0] === "unknown" && last !== "unknown");
    if (decisions[0] === "unknown") {
      auditUnknown.total++;
      if (last === "accepted") auditUnknown.landed++;
      else if (last === "rejected") auditUnknown.notLanded++;
      else auditUnknown.unsettled++;
    }
    if (last === "unknown") {
      report(
        "audit-unsettled",
        `request ${w.requestId} (${w.kind} ${w.key}, token ${w.token}) was recorded "unknown" and no final record followed`,
        [w.op],
        w.records,
      );
    } else if (!wellFormed) {
      report(
        "audit-mismatch",
        `request ${w.requestId} has the records ${decisions.join(", ")}: one decision, or "unknown" then one outcome`,
        [w.op],
        w.records,
      );
    }
    const sameWrite = w.records.every(
      (r) => r.key === w.key && r.token === w.token && r.leaseId === w.leaseId && r.op === w.records[0]!.op,
    );
    if (!sameWrite) {
      report(
        "audit-mismatch",
        `the records of request ${w.requestId} name different writes`,
        [w.op],
        w.records,
      );
    }
  }

  /** The audited writes of a write that got no answer: same key, kind, lease and token, unclaimed. */
  const unanswered = new Map<string, AuditedWrite[]>();
  for (const w of writes.values()) {
    if (w.op !== undefined) continue;
    const k = `${w.kind}|${w.key}|${w.leaseId}|${w.token}`;
    unanswered.set(k, [...(unanswered.get(k) ?? []), w]);
  }
  /** What the audit says of a client's write: accepted, rejected, unsettled, or no record. */
  const verdictOf = (
    op: Op,
  ): { verdict: "accepted" | "rejected" | "unsettled" | "none"; records: AuditRecord[] } => {
    if (op.requestId !== null) {
      const w = writes.get(op.requestId);
      if (!w) return { verdict: "none", records: [] };
      return { verdict: w.verdict ?? "unsettled", records: w.records };
    }
    const candidates = unanswered.get(`${op.kind}|${op.key}|${op.leaseId}|${op.token}`) ?? [];
    const accepted = candidates.find((w) => w.verdict === "accepted");
    if (accepted) return { verdict: "accepted", records: accepted.records };
    if (candidates.length === 0) return { verdict: "none", records: [] };
    return {
      verdict: candidates.some((w) => w.verdict === null) ? "unsettled" : "rejected",
      records: candidates.flatMap((w) => w.records),
    };
  };

  // ---- rule 6: every answered write decision is on record and agrees with the answer ----
  for (const op of history) {
    if (!isWrite(op) || op.status === null) continue;
    const decided = op.type === "ok" || op.type === "fail" || (op.status === 503 && op.outcome === "unknown");
    if (!decided) continue;
    const w = op.requestId ? writes.get(op.requestId) : undefined;
    if (!w) {
      report("audit-missing", `${op.kind} answered ${op.status} has no audit record`, [op]);
      continue;
    }
    if (w.key !== op.key || w.token !== op.token || w.leaseId !== op.leaseId) {
      report("audit-mismatch", `the audit records of ${op.requestId} name another write`, [op], w.records);
    }
    if (op.type === "ok" && w.verdict !== "accepted") {
      report(
        "audit-mismatch",
        `${op.kind} acknowledged ${op.status} but audited ${w.records.map((r) => r.decision).join(", ")}`,
        [op],
        w.records,
      );
    }
    if (op.type === "fail" && (w.verdict !== "rejected" || w.records.length !== 1)) {
      report(
        "audit-mismatch",
        `${op.kind} refused ${op.status} ${op.code} but audited ${w.records.map((r) => r.decision).join(", ")}`,
        [op],
        w.records,
      );
    }
    // Answered unknown: recorded "unknown" first, or, when what the gateway did not hear was the
    // audit log's answer to the write's "accepted" record (the write landed, the record too), that
    // one record: true, and the gateway could not have known it when it answered.
    const landedUnheard = w.records.length === 1 && w.records[0]!.decision === "accepted";
    if (op.outcome === "unknown" && w.records[0]!.decision !== "unknown" && !landedUnheard) {
      report(
        "audit-mismatch",
        `${op.kind} answered unknown but its first record says ${w.records[0]!.decision}`,
        [op],
        w.records,
      );
    }
  }

  // ---- rule 1: tokens ----
  const grants = audit.filter((r) => r.op === "LeaseAcquired" && r.decision === "accepted");
  const acquires = history.filter((op) => op.kind === "acquire" && op.type === "ok" && op.token !== null);
  checkTokens(grants, acquires, history, report);

  // ---- rules 2 and 3: per object, accepted writes never go back in token ----
  const acceptedByKey = new Map<string, AuditedWrite[]>();
  for (const w of writes.values()) {
    if (w.verdict !== "accepted") continue;
    acceptedByKey.set(w.key, [...(acceptedByKey.get(w.key) ?? []), w]);
  }
  for (const [key, list] of acceptedByKey) {
    list.sort((a, b) => a.first - b.first);
    let highest: AuditedWrite | undefined;
    for (const w of list) {
      // A write first recorded "unknown" has its outcome recorded once learnt (rule 6): its
      // records are not at its commit's place, whatever the log's order.
      if (w.token === null || w.records[0]!.decision === "unknown") continue;
      if (highest && w.token < highest.token!) {
        report(
          "audit-order",
          `${key}: the audit log has accepted ${w.kind} with token ${w.token} (first recorded at seq ${w.first}) after accepted ${highest.kind} with token ${highest.token} (seq ${highest.first})`,
          [highest.op, w.op],
          [...highest.records, ...w.records],
        );
      }
      if (!highest || w.token > highest.token!) highest = w;
    }
    // In real time: an accepted write that began after another accepted write completed.
    const timed = list.filter((w) => w.op !== undefined && w.token !== null);
    const byStart = [...timed].sort((a, b) => a.op!.invokedAt - b.op!.invokedAt);
    const byEnd = timed.filter((w) => Number.isFinite(endOf(w.op))).sort((a, b) => endOf(a.op) - endOf(b.op));
    let i = 0;
    let before: AuditedWrite | undefined;
    for (const w of byStart) {
      while (i < byEnd.length && endOf(byEnd[i]!.op) < w.op!.invokedAt) {
        const done = byEnd[i++]!;
        if (!before || done.token! > before.token!) before = done;
      }
      if (before && w.token! < before.token!) {
        report(
          "hct-backwards",
          `${key}: accepted ${w.kind} with token ${w.token} began after accepted ${before.kind} with token ${before.token} had completed`,
          [before.op, w.op],
          [...before.records, ...w.records],
        );
      }
    }
  }
  // Rule 4: no write accepted that began after its key was granted to a newer lease.
  const grantsByKey = new Map<string, Op[]>();
  for (const a of history) {
    if (a.kind !== "acquire" || a.type !== "ok" || a.token === null) continue;
    grantsByKey.set(a.key, [...(grantsByKey.get(a.key) ?? []), a]);
  }
  for (const [key, list] of acceptedByKey) {
    const grantsDone = (grantsByKey.get(key) ?? []).sort((a, b) => a.completedAt! - b.completedAt!);
    const byStart = list.filter((w) => w.op !== undefined).sort((a, b) => a.op!.invokedAt - b.op!.invokedAt);
    let i = 0;
    let newest: Op | undefined;
    for (const w of byStart) {
      while (i < grantsDone.length && grantsDone[i]!.completedAt! < w.op!.invokedAt) {
        const g = grantsDone[i++]!;
        if (!newest || g.token! > newest.token!) newest = g;
      }
      if (newest && w.token !== null && newest.token! > w.token) {
        report(
          "stale-accepted",
          `${key}: ${w.kind} with token ${w.token} was accepted although it began after the key was granted with token ${newest.token}`,
          [newest, w.op],
          w.records,
        );
      }
    }
  }
  // What reads saw, in real time: never a lower token after a higher one was read.
  const readsByKey = new Map<string, Op[]>();
  for (const op of history) {
    if (op.kind !== "read" || op.type !== "ok" || op.body === null) continue;
    readsByKey.set(op.key, [...(readsByKey.get(op.key) ?? []), op]);
  }
  for (const [key, reads] of readsByKey) {
    const withToken = reads.filter((r) => tokenOfBody(r.body!) !== null);
    const byStart = [...withToken].sort((a, b) => a.invokedAt - b.invokedAt);
    const byEnd = [...withToken].sort((a, b) => a.completedAt! - b.completedAt!);
    let i = 0;
    let seen: Op | undefined;
    for (const r of byStart) {
      while (i < byEnd.length && byEnd[i]!.completedAt! < r.invokedAt) {
        const done = byEnd[i++]!;
        if (!seen || tokenOfBody(done.body!)! > tokenOfBody(seen.body!)!) seen = done;
      }
      if (seen && tokenOfBody(r.body!)! < tokenOfBody(seen.body!)!) {
        report("hct-backwards", `${key}: a read returned ${r.body} after a read had returned ${seen.body}`, [
          seen,
          putByBody.get(seen.body!),
          r,
          putByBody.get(r.body!),
        ]);
      }
    }
  }

  // ---- rule 7 and the final state ----
  // What landed: the accepted writes, and puts whose bodies were seen whatever the audit says (the
  // audit's side of those is judged below), so that one fault is not reported again as a loss.
  const seenBodies = new Set<string>();
  for (const op of history)
    if (op.kind === "read" && op.type === "ok" && op.body !== null) seenBodies.add(op.body);
  for (const final of input.final.values()) if (final !== null) seenBodies.add(final);
  const landedByKey = new Map<string, AuditedWrite[]>();
  for (const [key, list] of acceptedByKey) landedByKey.set(key, [...list]);
  for (const op of history) {
    if (op.kind !== "put" || op.body === null || !seenBodies.has(op.body)) continue;
    if (verdictOf(op).verdict === "accepted") continue;
    const seen: AuditedWrite = {
      requestId: op.requestId ?? `op#${op.id}`,
      key: op.key,
      kind: "put",
      token: op.token,
      leaseId: op.leaseId,
      records: [],
      first: Number.POSITIVE_INFINITY,
      verdict: "accepted",
      op,
    };
    landedByKey.set(op.key, [...(landedByKey.get(op.key) ?? []), seen]);
  }
  // Writes that may have landed with nothing on record: answered neither accepted nor refused,
  // and no record says what became of them. If only such a write explains the final state, it
  // landed without its record.
  const maybeByKey = new Map<string, AuditedWrite[]>();
  for (const op of history) {
    if (!isWrite(op) || op.type !== "info") continue;
    const { verdict } = verdictOf(op);
    if (verdict !== "none" && verdict !== "unsettled") continue;
    if (op.kind === "put" && op.body !== null && seenBodies.has(op.body)) continue;
    const maybe: AuditedWrite = {
      requestId: op.requestId ?? `op#${op.id}`,
      key: op.key,
      kind: op.kind as "put" | "delete",
      token: op.token,
      leaseId: op.leaseId,
      records: [],
      first: Number.POSITIVE_INFINITY,
      verdict: null,
      op,
    };
    maybeByKey.set(op.key, [...(maybeByKey.get(op.key) ?? []), maybe]);
  }
  const unrecorded = new Set<Op>();
  const landedUnrecorded = (w: AuditedWrite, why: string, others: (Op | undefined)[]) => {
    if (unrecorded.has(w.op!)) return;
    unrecorded.add(w.op!);
    report(
      "audit-missing",
      `${w.key}: ${w.kind} with token ${w.token} (answered ${w.op!.status ?? "nothing"}${w.op!.code ? ` ${w.op!.code}` : ""}) landed, as ${why}, but has no accepted record`,
      [w.op, ...others],
      verdictOf(w.op!).records,
    );
  };
  /** Whether accepted write `later` may have taken effect after the write `op` (client view). */
  const mayFollow = (later: AuditedWrite, op: Op) => {
    if (later.token === null || op.token === null) return false;
    if (later.op === op) return false;
    if (later.token > op.token) return true;
    if (later.token < op.token) return false;
    return endOf(later.op) > op.invokedAt;
  };
  /** Whether accepted write `later` certainly took effect after `op`'s effect (if `op` landed). */
  const mustFollow = (later: AuditedWrite, op: Op) => {
    if (later.token === null || op.token === null || later.op === op) return false;
    if (later.token > op.token) return true;
    if (later.token < op.token) return false;
    return later.op !== undefined && later.op.invokedAt > endOf(op);
  };
  for (const op of history) {
    if (!isWrite(op) || op.type !== "ok") continue;
    const final = input.final.get(op.key);
    if (final === undefined) continue;
    const kept = op.kind === "put" ? final === op.body : final === null;
    if (kept) continue;
    const accepted = landedByKey.get(op.key) ?? [];
    // A put may be replaced by any later write; a delete only by a put (the final content exists).
    const replacedBy = accepted.find((w) => mayFollow(w, op) && (op.kind === "put" || w.kind === "put"));
    const maybe = (maybeByKey.get(op.key) ?? []).find(
      (w) => mayFollow(w, op) && (op.kind === "put" || w.kind === "put"),
    );
    if (!replacedBy && maybe) {
      landedUnrecorded(maybe, `only it can have replaced the acknowledged ${op.kind} of token ${op.token}`, [
        op,
      ]);
    } else if (!replacedBy) {
      report(
        "lost-write",
        `${op.key}: acknowledged ${op.kind} ${op.body ?? ""} (token ${op.token}) is not the final content (${final ?? "absent"}) and no accepted write may have replaced it`,
        [op, final === null ? undefined : putByBody.get(final)],
        verdictOf(op).records,
      );
    }
  }
  for (const [key, final] of input.final) {
    const accepted = landedByKey.get(key) ?? [];
    if (final !== null) {
      const p = putByBody.get(final);
      if (!p) {
        report(
          "phantom-body",
          `${key}: the final content ${JSON.stringify(final)} was written by no client`,
          [],
        );
        continue;
      }
      const after = accepted.filter((w) => mustFollow(w, p));
      if (after.length > 0) {
        report(
          "final-state",
          `${key}: the final content is ${final} (token ${p.token}), but ${after.length} accepted write(s) came after it (e.g. ${after[0]!.kind} with token ${after[0]!.token})`,
          [p, ...after.slice(0, 3).map((w) => w.op)],
          after.slice(0, 3).flatMap((w) => w.records),
        );
      }
      continue;
    }
    const tokens = accepted.filter((w) => w.token !== null).map((w) => w.token!);
    if (!accepted.some((w) => w.kind === "put") || tokens.length === 0) continue;
    const top = Math.max(...tokens);
    const atTop = accepted.filter((w) => w.token === top);
    const lastDelete = atTop.find(
      (d) =>
        d.kind === "delete" &&
        !atTop.some((p) => p.kind === "put" && p.op !== undefined && p.op.invokedAt > endOf(d.op)),
    );
    // An unrecorded delete that may have come after every put of the top token.
    const putsAtTop = atTop.filter((w) => w.kind === "put");
    const maybeDelete = (maybeByKey.get(key) ?? []).find(
      (d) =>
        d.kind === "delete" &&
        d.token !== null &&
        (d.token > top ||
          (d.token === top && putsAtTop.every((p) => p.op === undefined || mayFollow(d, p.op)))),
    );
    if (!lastDelete && maybeDelete) {
      landedUnrecorded(
        maybeDelete,
        `only it can have removed ${key} after its last accepted put (token ${top})`,
        putsAtTop.map((w) => w.op),
      );
    } else if (!lastDelete) {
      report(
        "final-state",
        `${key}: absent at the end, but the last accepted write (token ${top}) is a put`,
        atTop.map((w) => w.op),
        atTop.flatMap((w) => w.records),
      );
    }
  }

  // ---- rule 5 and unknown outcomes: what is visible was accepted ----
  const visible = new Map<string, Op[]>();
  for (const op of history) {
    if (op.kind === "read" && op.type === "ok" && op.body !== null) {
      visible.set(op.body, [...(visible.get(op.body) ?? []), op]);
    }
  }
  const finals = new Set([...input.final.values()].filter((v): v is string => v !== null));
  for (const final of finals) if (!visible.has(final)) visible.set(final, []);
  for (const [body, reads] of visible) {
    const p = putByBody.get(body);
    const where = `${reads.length} read(s)${finals.has(body) ? " and the final content" : ""}`;
    if (!p) {
      if (reads.length > 0)
        report("phantom-body", `${body} was read but written by no client`, reads.slice(0, 3));
      continue;
    }
    const { verdict, records } = verdictOf(p);
    if (p.type === "fail") {
      report(
        "refused-visible",
        `${p.key}: ${body} was refused (${p.status} ${p.code}) yet seen by ${where}`,
        [p, ...reads.slice(0, 3)],
        records,
      );
    } else if (verdict === "rejected") {
      report(
        "unknown-mismatch",
        `${p.key}: ${body} is visible (${where}) but the audit's final decision on its write is rejected`,
        [p, ...reads.slice(0, 3)],
        records,
      );
    } else if (verdict === "none" && p.type !== "ok") {
      report("audit-missing", `${p.key}: ${body} is visible (${where}) but its write has no audit record`, [
        p,
        ...reads.slice(0, 3),
      ]);
    }
  }

  const writesOf = (t: Op["type"]) => history.filter((op) => isWrite(op) && op.type === t).length;
  return {
    violations,
    counts: {
      ops: history.length,
      writes: { ok: writesOf("ok"), fail: writesOf("fail"), info: writesOf("info") },
      unknownAnswers: history.filter((op) => isWrite(op) && op.outcome === "unknown").length,
      auditUnknown,
      grants: { audited: grants.length, received: acquires.length },
      reads: history.filter((op) => op.kind === "read").length,
    },
  };
}

function checkTokens(
  grants: AuditRecord[],
  acquires: Op[],
  history: readonly Op[],
  report: (rule: ViolationRule, message: string, ops: (Op | undefined)[], records?: AuditRecord[]) => void,
): void {
  const receivedWith = (token: number | null) =>
    history.filter((op) => op.kind === "acquire" && op.token === token);
  // Each token granted once, in the log and as clients received them.
  const byToken = new Map<number, AuditRecord[]>();
  for (const g of grants) {
    if (g.token === null) continue;
    byToken.set(g.token, [...(byToken.get(g.token) ?? []), g]);
  }
  for (const [token, records] of byToken) {
    if (records.length > 1) {
      report(
        "token-reused",
        `token ${token} was granted ${records.length} times`,
        receivedWith(token),
        records,
      );
    }
  }
  const received = new Map<number, Op[]>();
  for (const a of acquires) received.set(a.token!, [...(received.get(a.token!) ?? []), a]);
  for (const [token, ops] of received) {
    if (ops.length > 1 && (byToken.get(token)?.length ?? 0) <= 1) {
      report(
        "token-reused",
        `token ${token} was received by ${ops.length} acquires`,
        ops,
        byToken.get(token) ?? [],
      );
    }
  }
  // Grants rise along the log: on the whole, and per replica.
  const rising = (list: AuditRecord[], what: string) => {
    let highest: AuditRecord | undefined;
    for (const g of list) {
      if (g.token === null) continue;
      if (highest && g.token <= highest.token!) {
        report(
          "token-backwards",
          `${what}: token ${g.token} granted (seq ${g.seq}) after token ${highest.token} (seq ${highest.seq})`,
          [...receivedWith(highest.token), ...receivedWith(g.token)],
          [highest, g],
        );
      }
      if (!highest || g.token > highest.token!) highest = g;
    }
  };
  rising(grants, "the audit log's grants");
  const gateways = new Map<string, AuditRecord[]>();
  for (const g of grants) gateways.set(g.gateway, [...(gateways.get(g.gateway) ?? []), g]);
  for (const [gateway, list] of gateways) rising(list, `the grants of replica ${gateway}`);
  // In real time: an acquire that began after another one's answer came gets a higher token.
  const byStart = [...acquires].sort((a, b) => a.invokedAt - b.invokedAt);
  const byEnd = [...acquires].sort((a, b) => a.completedAt! - b.completedAt!);
  let i = 0;
  let before: Op | undefined;
  for (const a of byStart) {
    while (i < byEnd.length && byEnd[i]!.completedAt! < a.invokedAt) {
      const done = byEnd[i++]!;
      if (!before || done.token! > before.token!) before = done;
    }
    if (before && a.token! <= before.token!) {
      report(
        "token-backwards",
        `an acquire that began after a grant of token ${before.token} was answered got token ${a.token}`,
        [before, a],
      );
    }
  }
  // Every grant a client received is on record.
  const recorded = new Set(grants.map((g) => `${g.leaseId}|${g.token}`));
  for (const a of acquires) {
    if (!recorded.has(`${a.leaseId}|${a.token}`)) {
      report(
        "audit-missing",
        `the grant of token ${a.token} (lease ${a.leaseId}) has no LeaseAcquired record`,
        [a],
      );
    }
  }
}

/** The violations as text: each with its operations and records, one per line. */
export function describeViolations(violations: readonly Violation[], limit = 50): string {
  const lines: string[] = [];
  for (const v of violations.slice(0, limit)) {
    lines.push(`[${v.rule}] ${v.message}`);
    for (const op of v.ops) lines.push(`    op ${describeOp(op)}`);
    for (const r of v.records) {
      lines.push(
        `    audit seq=${r.seq} ${r.op} ${r.key ?? ""} token=${r.token} ${r.decision}${r.reason ? ` (${r.reason})` : ""} req=${r.requestId} gw=${r.gateway} lease=${r.leaseId}`,
      );
    }
  }
  if (violations.length > limit) lines.push(`... and ${violations.length - limit} more`);
  return lines.join("\n");
}

/** How many violations of each rule. */
export function violationCounts(violations: readonly Violation[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const v of violations) counts[v.rule] = (counts[v.rule] ?? 0) + 1;
  return counts;
}
