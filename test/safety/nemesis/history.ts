/**
 * The history of a nemesis run, as Jepsen keeps one: every operation a client invoked, when it was
 * invoked and when it completed (on one monotonic clock), through which replica, and how it ended.
 *
 * Each operation ends in one of three classes:
 * - `ok`: it happened (a 200/201/204, a read that returned an object or a 404);
 * - `fail`: it certainly did not happen (a refusal: 409, 403, 428, ...);
 * - `info`: the client does not know (a 503 with `x-fence-outcome: unknown`, any 5xx, a timeout,
 *   a connection that dropped): it may have happened, at any time after its invocation.
 * Only `fail` may be taken for "did not happen".
 */

export type OpKind = "acquire" | "renew" | "release" | "put" | "delete" | "read";
export type OpClass = "ok" | "fail" | "info";

export type Op = {
  /** Its index in the history. */
  id: number;
  /** The client (Jepsen's process) that invoked it. */
  client: number;
  kind: OpKind;
  /** The replica it went through (its index). */
  replica: number;
  key: string;
  /** The lease's token number (for an acquire: the one granted, when the answer came). */
  token: number | null;
  leaseId: string | null;
  /** x-amz-request-id of the answer (null when no answer came). */
  requestId: string | null;
  /** Milliseconds since the run began, on a monotonic clock. */
  invokedAt: number;
  /** When the client had its answer (or gave up waiting); null while in flight. */
  completedAt: number | null;
  /** The HTTP status; null when no answer came. */
  status: number | null;
  /** The x-fence-outcome header of the answer. */
  outcome: string | null;
  /** The S3 or JSON error code of the answer. */
  code: string | null;
  /** A put: the body it wrote. A read: the body it read (null for a 404). */
  body: string | null;
  type: OpClass;
  /** What went wrong on the client's side (a timeout, a reset). */
  error?: string;
};

/** The body a put writes: it names the client, the write and the token, so that it is unique. */
export function bodyOf(client: number, write: number, token: number): string {
  return `c${client}-w${write}-t${token}`;
}

/** The token named in a body written by bodyOf, or null for a body it did not write. */
export function tokenOfBody(body: string): number | null {
  const m = /^c\d+-w\d+-t(\d+)$/.exec(body);
  return m ? Number(m[1]) : null;
}

/** A short line for an operation, for violation reports. */
export function describeOp(op: Op): string {
  const end = op.completedAt === null ? "…" : op.completedAt.toFixed(0);
  const answer =
    op.status === null
      ? `no answer${op.error ? ` (${op.error})` : ""}`
      : `${op.status}${op.code ? ` ${op.code}` : ""}${op.outcome ? ` outcome=${op.outcome}` : ""}`;
  const body = op.body === null ? "" : ` body=${op.body}`;
  return (
    `#${op.id} c${op.client} ${op.kind} ${op.key} via r${op.replica} token=${op.token ?? "-"} ` +
    `[${op.invokedAt.toFixed(0)}..${end} ms] ${op.type}: ${answer}${body}` +
    `${op.requestId ? ` req=${op.requestId}` : ""}${op.leaseId ? ` lease=${op.leaseId}` : ""}`
  );
}

/** Records operations as clients invoke and complete them. */
export class HistoryRecorder {
  readonly ops: Op[] = [];
  private readonly start = performance.now();

  now(): number {
    return performance.now() - this.start;
  }

  invoke(
    fields: Pick<Op, "client" | "kind" | "replica" | "key" | "token" | "leaseId"> & { body?: string },
  ): Op {
    const op: Op = {
      id: this.ops.length,
      requestId: null,
      invokedAt: this.now(),
      completedAt: null,
      status: null,
      outcome: null,
      code: null,
      body: null,
      type: "info",
      ...fields,
    };
    this.ops.push(op);
    return op;
  }

  complete(
    op: Op,
    fields: Partial<
      Pick<Op, "requestId" | "status" | "outcome" | "code" | "body" | "token" | "leaseId" | "error">
    > & {
      type: OpClass;
    },
  ): Op {
    Object.assign(op, fields);
    op.completedAt = this.now();
    return op;
  }
}
