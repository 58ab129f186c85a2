// The nemesis checker on hand-made histories: a clean one passes, and each kind of violation is
// reported, with the operations involved, every time it occurs (not just the first).
import { describe, expect, it } from "vitest";
import type { AuditRecord } from "../../../src/audit/audit-log.js";
import { type CheckInput, checkHistory, describeViolations, type ViolationRule } from "./checker.js";
import { bodyOf, type Op } from "./history.js";

/** A history and an audit log written by hand, step by step, on one clock. */
class Scenario {
  readonly ops: Op[] = [];
  readonly audit: AuditRecord[] = [];
  readonly final = new Map<string, string | null>();
  private time = 0;
  private seq = 0;
  private request = 0;
  private writes = 0;

  /** A grant: the client's acquire and its LeaseAcquired record. */
  grant(client: number, key: string, token: number, opts: { gateway?: string; replica?: number } = {}): Op {
    const leaseId = `lease-${token}-${client}`;
    const op = this.op({ client, kind: "acquire", key, token, leaseId, status: 201, type: "ok" });
    this.record({ op: "LeaseAcquired", key, token, leaseId, decision: "accepted", gateway: opts.gateway });
    return op;
  }

  /** A put and its records; `decisions` are what the audit log says, in order. */
  put(
    client: number,
    key: string,
    token: number,
    answer: { status: number | null; outcome?: string; code?: string },
    decisions: AuditRecord["decision"][],
  ): Op {
    return this.write("put", client, key, token, answer, decisions);
  }

  delete(
    client: number,
    key: string,
    token: number,
    answer: { status: number | null; outcome?: string },
    decisions: AuditRecord["decision"][],
  ): Op {
    return this.write("delete", client, key, token, answer, decisions);
  }

  read(client: number, key: string, body: string | null): Op {
    return this.op({
      client,
      kind: "read",
      key,
      token: null,
      leaseId: null,
      status: body === null ? 404 : 200,
      type: "ok",
      body,
    });
  }

  /** Appends a record for an existing request (recorded late, or a settled outcome). */
  settle(op: Op, decision: AuditRecord["decision"]): void {
    this.record({
      op: op.kind === "put" ? "PutObject" : "DeleteObject",
      key: op.key,
      token: op.token,
      leaseId: op.leaseId,
      decision,
      requestId: op.requestId,
    });
  }

  input(): CheckInput {
    return { history: this.ops, audit: this.audit, final: this.final };
  }

  private write(
    kind: "put" | "delete",
    client: number,
    key: string,
    token: number,
    answer: { status: number | null; outcome?: string; code?: string },
    decisions: AuditRecord["decision"][],
  ): Op {
    const status = answer.status;
    const type = status === null ? "info" : status < 300 ? "ok" : status < 500 ? "fail" : "info";
    const op = this.op({
      client,
      kind,
      key,
      token,
      leaseId: `lease-${token}-${client}`,
      status,
      type,
      outcome: answer.outcome ?? null,
      code: answer.code ?? null,
      body: kind === "put" ? bodyOf(client, ++this.writes, token) : null,
      requestId: status === null ? null : `req-${++this.request}`,
    });
    const requestId = op.requestId ?? `unanswered-${++this.request}`;
    for (const decision of decisions) {
      this.record({
        op: kind === "put" ? "PutObject" : "DeleteObject",
        key,
        token,
        leaseId: op.leaseId,
        decision,
        requestId,
      });
    }
    return op;
  }

  private op(fields: Partial<Op> & Pick<Op, "client" | "kind" | "key" | "token" | "leaseId" | "type">): Op {
    // Each operation begins and ends after the one before it.
    const invokedAt = this.time + 10;
    this.time += 20;
    const op: Op = {
      id: this.ops.length,
      replica: 0,
      requestId: null,
      invokedAt,
      completedAt: this.time,
      status: null,
      outcome: null,
      code: null,
      body: null,
      ...fields,
    };
    this.ops.push(op);
    return op;
  }

  private record(
    r: Pick<AuditRecord, "op" | "key" | "token" | "leaseId" | "decision"> & {
      requestId?: string | null;
      gateway?: string | undefined;
    },
  ): void {
    this.audit.push({
      seq: ++this.seq,
      time: new Date(1_800_000_000_000 + this.time).toISOString(),
      op: r.op,
      bucket: "b",
      key: r.key,
      prefix: null,
      token: r.token,
      leaseId: r.leaseId,
      owner: null,
      principal: "fencegate",
      decision: r.decision,
      reason: r.decision === "rejected" ? "StaleFencingToken" : null,
      highestToken: null,
      requestId: r.requestId ?? null,
      gateway: r.gateway ?? "r0",
    });
  }
}

const rules = (s: Scenario): ViolationRule[] => checkHistory(s.input()).violations.map((v) => v.rule);

/** A run with every kind of outcome and nothing wrong. */
function clean(): Scenario {
  const s = new Scenario();
  s.grant(0, "k", 1);
  const a = s.put(0, "k", 1, { status: 200 }, ["accepted"]);
  s.read(1, "k", a.body);
  s.grant(1, "k", 2, { gateway: "r1" });
  // Unknown, then learnt: it landed.
  const b = s.put(1, "k", 2, { status: 503, outcome: "unknown" }, ["unknown"]);
  s.settle(b, "accepted");
  s.read(0, "k", b.body);
  // A paused client's stale write: refused.
  s.put(0, "k", 1, { status: 409, code: "StaleFencingToken" }, ["rejected"]);
  s.grant(2, "k", 3);
  // Unknown, then learnt: it never landed.
  const c = s.put(2, "k", 3, { status: 503, outcome: "unknown" }, ["unknown"]);
  s.settle(c, "rejected");
  const d = s.put(2, "k", 3, { status: 200 }, ["accepted"]);
  s.grant(3, "j", 4);
  s.put(3, "j", 4, { status: 200 }, ["accepted"]);
  s.delete(3, "j", 4, { status: 204 }, ["accepted"]);
  s.final.set("k", d.body);
  s.final.set("j", null);
  return s;
}

describe("the nemesis checker", () => {
  it("finds nothing wrong in a clean history, and counts what happened", () => {
    const result = checkHistory(clean().input());
    expect(describeViolations(result.violations)).toBe("");
    expect(result.counts.writes).toEqual({ ok: 4, fail: 1, info: 2 });
    expect(result.counts.unknownAnswers).toBe(2);
    expect(result.counts.auditUnknown).toEqual({ total: 2, landed: 1, notLanded: 1, unsettled: 0 });
    expect(result.counts.grants).toEqual({ audited: 4, received: 4 });
  });

  it("reports a token granted twice", () => {
    const s = clean();
    s.grant(5, "j", 3);
    const found = checkHistory(s.input()).violations.filter((v) => v.rule === "token-reused");
    expect(found).toHaveLength(1);
    expect(found[0]!.ops.map((o) => o.client).sort()).toEqual([2, 5]);
  });

  it("reports grants that go backwards: along the log, per replica, and in real time", () => {
    const s = clean();
    s.grant(5, "j", 2.5, { gateway: "r1" });
    const found = checkHistory(s.input()).violations.filter((v) => v.rule === "token-backwards");
    // The log's order, replica r1's order (2 then 2.5 is fine, but r1 saw 2 and r0 saw 4...),
    // and the acquire that began after the grant of 4 was answered.
    expect(found.map((v) => v.message)).toEqual([
      expect.stringContaining("the audit log's grants: token 2.5"),
      expect.stringContaining("an acquire that began after a grant of token 4"),
    ]);
    const perReplica = new Scenario();
    perReplica.grant(0, "k", 7, { gateway: "r1" });
    perReplica.grant(1, "k", 5, { gateway: "r1" });
    expect(rules(perReplica)).toEqual(["token-backwards", "token-backwards", "token-backwards"]);
  });

  it("reports an accepted write with a lower token after a higher one (real time, audit order, rule 4)", () => {
    const s = clean();
    // Token 2's holder writes after token 3's write was accepted, and is accepted too.
    const late = s.put(1, "k", 2, { status: 200 }, ["accepted"]);
    s.final.set("k", late.body);
    const found = checkHistory(s.input()).violations;
    expect(found.map((v) => v.rule).sort()).toEqual([
      "audit-order",
      "final-state",
      "hct-backwards",
      "lost-write",
      "stale-accepted",
    ]);
    // The write of token 3 that was acknowledged is lost under it.
    for (const v of found) expect(v.ops).toContain(late);
    // The audit log's order alone (the lower token's write was in flight since before the newer
    // grant, its record came late): reported as the log being out of commit order.
    const inFlight = new Scenario();
    inFlight.grant(0, "k", 1);
    const early = inFlight.put(0, "k", 1, { status: 200 }, []);
    inFlight.grant(1, "k", 2);
    const newer = inFlight.put(1, "k", 2, { status: 200 }, ["accepted"]);
    inFlight.settle(early, "accepted");
    inFlight.final.set("k", newer.body);
    const order = checkHistory(inFlight.input()).violations;
    expect(order.map((v) => v.rule)).toEqual(["audit-order"]);
  });

  it("reports reads that go back in token", () => {
    const s = clean();
    const older = s.ops.find((o) => o.kind === "put" && o.token === 1 && o.type === "ok")!;
    s.read(4, "k", older.body);
    const found = checkHistory(s.input()).violations.filter((v) => v.rule === "hct-backwards");
    expect(found).toHaveLength(1);
    expect(found[0]!.message).toContain(`returned ${older.body} after a read had returned`);
  });

  it("reports a lost acknowledged write", () => {
    const s = clean();
    const last = s.ops.at(-1)!; // the delete of j
    s.grant(4, "m", 5);
    const acked = s.put(4, "m", 5, { status: 200 }, ["accepted"]);
    s.final.set("m", null);
    const found = checkHistory(s.input()).violations;
    expect(found.map((v) => v.rule)).toEqual(["lost-write", "final-state"]);
    expect(found[0]!.ops[0]).toBe(acked);
    // A deleted object that comes back is a lost delete.
    const back = clean();
    back.final.set("j", back.ops.find((o) => o.kind === "put" && o.key === "j")!.body);
    expect(rules(back)).toEqual(["lost-write", "final-state"]);
    expect(last.kind).toBe("delete");
  });

  it("reports a refused write that is visible, read back or as the final content", () => {
    const s = clean();
    const refused = s.ops.find((o) => o.type === "fail")!;
    s.read(3, "k", refused.body);
    expect(rules(s)).toEqual(expect.arrayContaining(["refused-visible"]));
    const atEnd = clean();
    const r2 = atEnd.ops.find((o) => o.type === "fail")!;
    atEnd.final.set("k", r2.body);
    expect(rules(atEnd)).toContain("refused-visible");
  });

  it("reports an unknown write without its final record, and one visible though settled as not landed", () => {
    const s = clean();
    s.grant(4, "m", 5);
    const open = s.put(4, "m", 5, { status: 503, outcome: "unknown" }, ["unknown"]);
    s.final.set("m", null);
    const found = checkHistory(s.input()).violations;
    expect(found.map((v) => v.rule)).toEqual(["audit-unsettled"]);
    expect(found[0]!.ops).toEqual([open]);

    const visible = clean();
    const never = visible.ops.find((o) => o.outcome === "unknown" && o.token === 3)!;
    visible.read(4, "k", never.body);
    expect(rules(visible)).toContain("unknown-mismatch");
  });

  it("reports answered decisions that are not on record, or recorded otherwise", () => {
    const s = clean();
    s.grant(4, "m", 5);
    const denied = s.put(4, "m", 5, { status: 200 }, ["rejected"]);
    const unrecorded = s.put(4, "m", 5, { status: 200 }, []);
    s.final.set("m", unrecorded.body);
    const contradicted = s.put(4, "m", 5, { status: 409, code: "LeaseExpired" }, ["accepted"]);
    const found = checkHistory(s.input()).violations;
    expect(found.filter((v) => v.rule === "audit-missing").map((v) => v.ops[0])).toEqual([unrecorded]);
    expect(found.filter((v) => v.rule === "audit-mismatch").map((v) => v.ops[0])).toEqual([
      denied,
      contradicted,
    ]);
  });

  it("takes an unknown answer whose only record is the landed write's accepted (the log's answer was lost), not a refusal", () => {
    const s = clean();
    s.grant(4, "m", 5);
    const landed = s.put(4, "m", 5, { status: 503, outcome: "unknown" }, ["accepted"]);
    s.final.set("m", landed.body);
    expect(rules(s)).toEqual([]);

    const refused = clean();
    refused.grant(4, "m", 5);
    const wrong = refused.put(4, "m", 5, { status: 503, outcome: "unknown" }, ["rejected"]);
    const found = checkHistory(refused.input()).violations;
    expect(found.filter((v) => v.rule === "audit-mismatch").map((v) => v.ops[0])).toEqual([wrong]);
  });

  it("reports a visible write that has no record at all", () => {
    const s = clean();
    s.grant(4, "m", 5);
    // Answered 503 without x-fence-outcome: info, but it landed and the log never heard of it.
    const silent = s.put(4, "m", 5, { status: 503 }, []);
    s.final.set("m", silent.body);
    const found = checkHistory(s.input()).violations;
    expect(found.map((v) => v.rule)).toEqual(["audit-missing"]);
  });

  it("reports a state that only a write without records explains as that write's missing record", () => {
    const s = clean();
    s.grant(4, "m", 5);
    const acked = s.put(4, "m", 5, { status: 200 }, ["accepted"]);
    // Answered 503 without x-fence-outcome, nothing on record: yet m is gone at the end.
    const silent = s.delete(4, "m", 5, { status: 503 }, []);
    s.final.set("m", null);
    const found = checkHistory(s.input()).violations;
    expect(found.map((v) => v.rule)).toEqual(["audit-missing"]);
    expect(found[0]!.ops).toEqual([silent, acked]);
  });

  it("does not take the late records of an outcome learnt later for the log being out of order", () => {
    const s = new Scenario();
    s.grant(0, "k", 1);
    const early = s.put(0, "k", 1, { status: 503, outcome: "unknown" }, []);
    s.grant(1, "k", 2);
    const newer = s.put(1, "k", 2, { status: 200 }, ["accepted"]);
    // Recorded "unknown" after the newer write's record, then learnt: it had landed before it.
    s.settle(early, "unknown");
    s.settle(early, "accepted");
    s.final.set("k", newer.body);
    expect(checkHistory(s.input()).violations).toEqual([]);
  });

  it("reports every violation, not just the first", () => {
    const s = clean();
    s.grant(5, "j", 3); // a token twice
    s.grant(4, "m", 6);
    const open = s.put(4, "m", 6, { status: 503, outcome: "unknown" }, ["unknown"]); // never settled
    const refused = s.put(4, "m", 6, { status: 409, code: "LeaseExpired" }, ["rejected"]);
    s.final.set("m", refused.body); // a refused write as the content
    const found = checkHistory(s.input()).violations;
    expect(new Set(found.map((v) => v.rule))).toEqual(
      new Set(["token-reused", "token-backwards", "audit-unsettled", "refused-visible"]),
    );
    expect(found.find((v) => v.rule === "audit-unsettled")!.ops).toEqual([open]);
    expect(describeViolations(found)).toContain(`body=${refused.body}`);
  });
});
