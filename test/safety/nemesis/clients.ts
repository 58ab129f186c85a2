/**
 * The generator: clients that each loop over leases on random keys through random replicas, as
 * users of fencegate would, and record every operation in the history:
 *
 *   acquire a lease (a TTL of one to two seconds, sometimes waiting for it)
 *   → 1 to 3 writes (PutObject of a body naming the client, the write and the token; sometimes
 *     DeleteObject), each now and then after a pause longer than the TTL (a paused client), now
 *     and then after a renewal, sometimes followed by a read
 *   → release the lease, or let it expire.
 */
import type { HistoryRecorder, Op, OpClass } from "./history.js";
import { bodyOf } from "./history.js";
import { between } from "./nemesis.js";
import { type Endpoint, type LeaseAnswer, leaseCall, s3Call } from "./wire.js";

export type ClientOptions = {
  id: number;
  bucket: string;
  keys: readonly string[];
  endpoints: readonly Endpoint[];
  history: HistoryRecorder;
  random: () => number;
  minTtlMs: number;
  maxTtlMs: number;
  /** How long a client waits for any answer. */
  timeoutMs: number;
  over: () => boolean;
};

/** A write's class from its answer: 2xx happened, 4xx certainly did not, anything else unknown. */
export function writeClass(status: number): OpClass {
  if (status >= 200 && status < 300) return "ok";
  if (status >= 400 && status < 500) return "fail";
  return "info";
}

export async function runClient(o: ClientOptions): Promise<void> {
  const { history: h, random } = o;
  const pick = <T>(items: readonly T[]) => items[Math.floor(random() * items.length)]!;
  const replica = () => Math.floor(random() * o.endpoints.length);
  let written = 0;

  const read = async (key: string) => {
    const r = replica();
    const op = h.invoke({ client: o.id, kind: "read", replica: r, key, token: null, leaseId: null });
    try {
      const res = await s3Call(o.endpoints[r]!, { method: "GET", bucket: o.bucket, key }, o.timeoutMs);
      const found = res.status === 200;
      h.complete(op, {
        requestId: res.requestId,
        status: res.status,
        code: res.code,
        body: found ? res.text : null,
        // A read changes nothing: one that did not answer with the object or its absence failed.
        type: found || res.status === 404 ? "ok" : "fail",
      });
    } catch (e) {
      h.complete(op, { type: "fail", error: (e as Error).message });
    }
  };

  const write = async (
    kind: "put" | "delete",
    key: string,
    token: number,
    leaseId: string,
    signed: string,
  ) => {
    const r = replica();
    const body = kind === "put" ? bodyOf(o.id, ++written, token) : undefined;
    const op = h.invoke({ client: o.id, kind, replica: r, key, token, leaseId, ...(body ? { body } : {}) });
    try {
      const res = await s3Call(
        o.endpoints[r]!,
        {
          method: kind === "put" ? "PUT" : "DELETE",
          bucket: o.bucket,
          key,
          ...(body !== undefined ? { body } : {}),
          headers: { "x-fence-token": signed },
        },
        o.timeoutMs,
      );
      h.complete(op, {
        requestId: res.requestId,
        status: res.status,
        outcome: res.outcome,
        code: res.code,
        type: writeClass(res.status),
      });
    } catch (e) {
      h.complete(op, { type: "info", error: (e as Error).message });
    }
  };

  /** A lease call recorded as one operation: ok, fail (a 4xx), or info (5xx, no answer). */
  const leaseOp = async (
    op: Op,
    call: Parameters<typeof leaseCall>[0],
    okStatus: number,
  ): Promise<LeaseAnswer> => {
    const answer = await leaseCall(call);
    if (answer.ok) {
      h.complete(op, {
        status: okStatus,
        type: "ok",
        ...(answer.lease ? { token: answer.lease.token, leaseId: answer.lease.leaseId } : {}),
      });
    } else {
      const known = answer.status !== null && answer.status >= 400 && answer.status < 500;
      h.complete(op, {
        status: answer.status,
        code: answer.code,
        requestId: answer.requestId,
        type: known ? "fail" : "info",
        error: answer.error,
      });
    }
    return answer;
  };

  while (!o.over()) {
    const key = pick(o.keys);
    const ttlMs = Math.round(between(random, o.minTtlMs, o.maxTtlMs));
    const waitMs = random() < 0.5 ? 0 : Math.round(between(random, 200, 1_500));
    const r = replica();
    const acquire = h.invoke({ client: o.id, kind: "acquire", replica: r, key, token: null, leaseId: null });
    const got = await leaseOp(
      acquire,
      () => o.endpoints[r]!.leases.acquire({ bucket: o.bucket, key, ttlMs, waitMs, owner: `c${o.id}` }),
      201,
    );
    if (!got.ok || !got.lease) {
      await sleepFor(between(random, 20, 200));
      continue;
    }
    const lease = got.lease;
    const writes = 1 + Math.floor(random() * 3);
    for (let i = 0; i < writes && !o.over(); i++) {
      // A paused client (a GC pause, a stalled VM): its lease runs out meanwhile.
      if (random() < 0.1) await sleepFor(o.maxTtlMs + between(random, 200, 1_500));
      if (random() < 0.2) {
        const rr = replica();
        const renew = h.invoke({
          client: o.id,
          kind: "renew",
          replica: rr,
          key,
          token: lease.token,
          leaseId: lease.leaseId,
        });
        await leaseOp(renew, () => o.endpoints[rr]!.leases.renew(lease.leaseId, ttlMs), 200);
      }
      await write(random() < 0.15 ? "delete" : "put", key, lease.token, lease.leaseId, lease.fencingToken);
      if (random() < 0.3) await read(key);
    }
    if (random() < 0.7) {
      const rr = replica();
      const release = h.invoke({
        client: o.id,
        kind: "release",
        replica: rr,
        key,
        token: lease.token,
        leaseId: lease.leaseId,
      });
      await leaseOp(release, () => o.endpoints[rr]!.leases.release(lease.leaseId), 204);
    }
  }
}

const sleepFor = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
