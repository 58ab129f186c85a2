import type { LeaseClient } from "../../src/client/lease-client.js";
import { signedRequest } from "../support/signed-http.js";
import { sleep } from "../support/wait.js";
import { api, putIn } from "./support.js";

/**
 * A randomized history of fenced transactions against one gateway, checked afterwards (in the
 * manner of Jepsen's histories): writers take a prefix lease on a set of keys, stage a version of
 * every key in one transaction (some pause past their lease first, so they go stale), and commit;
 * other writers write one key of the set on its own; readers read the keys one after another all
 * along. Each body names the token it was written with and the writer's transaction.
 *
 * The rule checked (contract, "Fenced transactions"): once any object of a committed transaction
 * is visible to a reader, every object of that transaction is visible to every later read. Every
 * transaction writes every key, and tokens order the commits (each writer holds the set's lease
 * when it commits, a newer lease has a higher token, and a stale commit is refused), so: a read
 * that starts after another read ended never returns a lower token than that read saw, whatever
 * the keys. And no read returns bytes of a transaction whose commit was refused, or that was
 * never committed.
 */

export type Read = { key: string; start: number; end: number; value: string | null };
export type Commit = { transactionId: string; token: number; outcome: "committed" | "refused" | "unknown" };

export type History = { reads: Read[]; commits: Commit[]; singles: Set<string> };

export type HistoryOptions = {
  url: string;
  leases: LeaseClient;
  bucket: string;
  keys: string[];
  durationMs: number;
  writers: number;
  readers: number;
  ttlMs: number;
  /**
   * The history goes on past durationMs (up to maxMs) until this many commits were accepted and
   * this many refused: on a busy machine fewer happen in the same time.
   */
  minCommitted?: number;
  minRefused?: number;
  maxMs?: number;
};

export async function runHistory(o: HistoryOptions): Promise<History> {
  const reads: Read[] = [];
  const commits: Commit[] = [];
  const singles = new Set<string>();
  const started = Date.now();
  const hardUntil = started + (o.maxMs ?? o.durationMs * 4);
  let writersDone = false;
  const count = (outcome: Commit["outcome"]) => commits.filter((c) => c.outcome === outcome).length;
  const writing = () =>
    Date.now() < started + o.durationMs ||
    (Date.now() < hardUntil &&
      (count("committed") < (o.minCommitted ?? 0) || count("refused") < (o.minRefused ?? 0)));
  const prefix = `${o.keys[0]!.split("/")[0]}/`;

  const writer = async (w: number) => {
    let n = 0;
    while (writing()) {
      n++;
      const lease = await o.leases
        .acquire({ bucket: o.bucket, prefix, ttlMs: o.ttlMs, waitMs: 10_000, owner: `writer-${w}` })
        .catch(() => null);
      if (!lease) continue;
      if (n % 4 === 0) {
        // A single fenced write of one key, outside any transaction.
        const key = o.keys[n % o.keys.length]!;
        const body = `${lease.token}:single-${w}-${n}`;
        const res = await putIn({ url: o.url }, lease, null, o.bucket, key, body);
        if (res.status === 200) singles.add(body);
        await o.leases.release(lease.leaseId).catch(() => undefined);
        continue;
      }
      const opened = await api({ url: o.url }, "POST", `/leases/${lease.leaseId}/transactions`, {});
      if (opened.status !== 201) continue;
      const id = String(opened.json.transactionId);
      for (const key of o.keys) {
        await putIn({ url: o.url }, lease, id, o.bucket, key, `${lease.token}:${id}`);
        if (Math.random() < 0.3) await sleep(Math.random() * 20);
      }
      // One in five pauses past its lease before the commit: its commit must be refused whole.
      if (n % 5 === 0) await sleep(o.ttlMs + 50);
      const res = await api({ url: o.url }, "POST", `/transactions/${id}/commit`);
      commits.push({
        transactionId: id,
        token: lease.token,
        outcome: res.status === 200 ? "committed" : res.status === 409 ? "refused" : "unknown",
      });
      await o.leases.release(lease.leaseId).catch(() => undefined);
    }
  };

  const reader = async () => {
    let i = 0;
    while (!writersDone) {
      const key = o.keys[i++ % o.keys.length]!;
      const start = performance.now();
      const res = await signedRequest(o.url, { method: "GET", path: `/${o.bucket}/${key}` });
      const end = performance.now();
      reads.push({ key, start, end, value: res.status === 200 ? res.text : null });
    }
  };

  const writers = Promise.all(Array.from({ length: o.writers }, (_, w) => writer(w))).finally(() => {
    writersDone = true;
  });
  await Promise.all([writers, ...Array.from({ length: o.readers }, () => reader())]);
  return { reads, commits, singles };
}

const tokenOf = (value: string | null) => (value === null ? -1 : Number(value.split(":")[0]));

/** The violations of the rule in a history (empty: none). */
export function checkHistory(h: History): string[] {
  const out: string[] = [];
  const committed = new Set(h.commits.filter((c) => c.outcome !== "refused").map((c) => c.transactionId));
  const refused = new Set(h.commits.filter((c) => c.outcome === "refused").map((c) => c.transactionId));
  for (const r of h.reads) {
    if (r.value === null) continue;
    const writer = r.value.slice(r.value.indexOf(":") + 1);
    if (writer.startsWith("single-")) {
      if (!h.singles.has(r.value)) out.push(`read ${r.key}=${r.value}: a single write that was not accepted`);
    } else if (refused.has(writer)) {
      out.push(`read ${r.key}=${r.value}: bytes of a transaction whose commit was refused`);
    } else if (!committed.has(writer)) {
      out.push(`read ${r.key}=${r.value}: bytes of a transaction that was never committed`);
    }
  }
  // In real time: a read sees at least the token of every transaction that a read which ended
  // before it started saw (any key: the transaction wrote them all), and at least the token of
  // every state of its own key that such a read saw (single writes included).
  const byEnd = [...h.reads].sort((a, b) => a.end - b.end);
  const byStart = [...h.reads].sort((a, b) => a.start - b.start);
  let seenTx: Read | undefined;
  const seenKey = new Map<string, Read>();
  let j = 0;
  for (const r of byStart) {
    while (j < byEnd.length && byEnd[j]!.end < r.start) {
      const e = byEnd[j++]!;
      const t = tokenOf(e.value);
      if (e.value !== null && !e.value.includes(":single-") && t > tokenOf(seenTx?.value ?? null)) seenTx = e;
      if (t > tokenOf(seenKey.get(e.key)?.value ?? null)) seenKey.set(e.key, e);
    }
    for (const before of [seenTx, seenKey.get(r.key)]) {
      if (before && tokenOf(r.value) < tokenOf(before.value)) {
        out.push(
          `read ${r.key}=${r.value} started after a read of ${before.key}=${before.value} ended: an older state after a newer one`,
        );
      }
    }
  }
  return out;
}
