/**
 * One nemesis run: the cluster (cluster.ts), the clients (clients.ts) and the nemesis
 * (nemesis.ts) for a while; then a quiet phase: every fault off, every replica running, a lease
 * acquired and released on every key (so that the commit intents of ended leases are fenced),
 * every write recorded "unknown" given time to get its final record, and the final content of
 * every key read through every replica; then the checker (checker.ts) over the history, the
 * audit log and the final contents.
 *
 * The seed fixes the clients' choices and the nemesis's schedule; FENCEGATE_NEMESIS_SEED replays
 * a run (real processes keep their own timing, so a replay explores the same schedule, not
 * necessarily the same interleaving).
 */
import { writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AuditRecord } from "../../../src/audit/audit-log.js";
import { seededRandom } from "../../support/fault-rules.js";
import { HEALTH_PATH } from "../../support/gateway.js";
import { allAuditRecords } from "../../support/safety-helpers.js";
import { sleep } from "../../support/wait.js";
import { type CheckResult, checkHistory, describeViolations, violationCounts } from "./checker.js";
import { runClient } from "./clients.js";
import { type StoreName, startCluster } from "./cluster.js";
import { HistoryRecorder } from "./history.js";
import { Nemesis, type NemesisEvent } from "./nemesis.js";
import { type Endpoint, endpointOf, leaseCall, s3Call } from "./wire.js";

export type RunOptions = {
  store: StoreName;
  seed: number;
  /** How long clients and nemesis run. */
  durationMs: number;
  clients: number;
  keys: number;
  /** Write the run (history, audit, final contents, violations) to a JSON file even without violations. */
  keep?: boolean;
};

export type RunReport = {
  options: RunOptions;
  result: CheckResult;
  faults: ReturnType<Nemesis["counts"]>;
  events: NemesisEvent[];
  /** Writes still recorded "unknown" when the quiet phase gave up waiting. */
  unsettled: number;
  elapsedMs: number;
  summary: string;
  /** Where the run was written (always when it found violations). */
  savedTo?: string;
};

const MIN_TTL_MS = 1_000;
const MAX_TTL_MS = 2_000;
const STORE_TIMEOUT_MS = 1_000;
const REDIS_TIMEOUT_MS = 1_000;
/** Longer than any pause of a replica: clients mostly get their answers, late. */
const CLIENT_TIMEOUT_MS = 10_000;
const REPLICAS = 2;

/** The run's options from the environment (FENCEGATE_NEMESIS_SEED, _MS, _CLIENTS, _KEYS). */
export function optionsFromEnv(store: StoreName, defaults: { durationMs: number }): RunOptions {
  const num = (name: string, fallback: number) => {
    const raw = process.env[name];
    if (raw === undefined || raw === "") return fallback;
    const n = Number(raw);
    if (!Number.isSafeInteger(n) || n < 0)
      throw new Error(`${name} must be a non-negative integer, not ${raw}`);
    return n;
  };
  return {
    store,
    seed: num("FENCEGATE_NEMESIS_SEED", Math.floor(Math.random() * 2 ** 32)),
    durationMs: num("FENCEGATE_NEMESIS_MS", defaults.durationMs),
    clients: Math.max(1, num("FENCEGATE_NEMESIS_CLIENTS", 4)),
    keys: Math.max(1, num("FENCEGATE_NEMESIS_KEYS", 3)),
    keep: process.env.FENCEGATE_NEMESIS_KEEP === "1",
  };
}

export async function runNemesis(options: RunOptions): Promise<RunReport> {
  const started = Date.now();
  const random = seededRandom(options.seed);
  const bucket = `nemesis-${options.store}-${(options.seed >>> 0).toString(16)}`;
  const keys = Array.from({ length: options.keys }, (_, i) => `k${i}`);
  const cluster = await startCluster({
    store: options.store,
    bucket,
    keys,
    replicas: REPLICAS,
    storeTimeoutMs: STORE_TIMEOUT_MS,
    redisTimeoutMs: REDIS_TIMEOUT_MS,
  });
  const endpoints = cluster.replicas.map((r) => endpointOf(r.url, CLIENT_TIMEOUT_MS));
  try {
    const history = new HistoryRecorder();
    const deadline = history.now() + options.durationMs;
    // A busy machine may end the planned time before any write was answered unknown (the path the
    // run exists to test): the clients then go on, up to the same time again, until one was.
    const lastDeadline = deadline + options.durationMs;
    let aborted = false;
    const answeredUnknown = () =>
      history.ops.some((op) => (op.kind === "put" || op.kind === "delete") && op.outcome === "unknown");
    const over = () =>
      aborted || history.now() >= lastDeadline || (history.now() >= deadline && answeredUnknown());
    const nemesis = new Nemesis(cluster, seededRandom(Math.floor(random() * 2 ** 32)), {
      maxTtlMs: MAX_TTL_MS,
      storeTimeoutMs: STORE_TIMEOUT_MS,
      redisTimeoutMs: REDIS_TIMEOUT_MS,
      now: () => history.now(),
    });
    const clients = Array.from({ length: options.clients }, (_, id) =>
      runClient({
        id,
        bucket,
        keys,
        endpoints,
        history,
        random: seededRandom(Math.floor(random() * 2 ** 32)),
        minTtlMs: MIN_TTL_MS,
        maxTtlMs: MAX_TTL_MS,
        timeoutMs: CLIENT_TIMEOUT_MS,
        over,
      }),
    );
    // Whatever fails first ends the run for everyone; every fault is healed before going on.
    const ended = await Promise.allSettled(
      [nemesis.run(over), ...clients].map((p) =>
        p.catch((e: unknown) => {
          aborted = true;
          throw e;
        }),
      ),
    );
    await nemesis.heal();
    for (const e of ended) if (e.status === "rejected") throw e.reason;

    // ---- the quiet phase ----
    const quiet = options.clients; // its operations are recorded as one more client's
    for (const r of cluster.replicas) await healthy(r.url);
    for (const [i, key] of keys.entries())
      await fenceKey(endpoints, i % endpoints.length, bucket, key, history, quiet);
    const unsettled = await waitForOutcomes(endpoints[0]!, bucket);
    const final = new Map<string, string | null>();
    for (const key of keys) final.set(key, await finalContent(endpoints, bucket, key, history, quiet));
    const audit = await allAuditRecords(endpoints[0]!.leases, { bucket });

    const result = checkHistory({ history: history.ops, audit, final });
    const faults = nemesis.counts();
    const report: RunReport = {
      options,
      result,
      faults,
      events: nemesis.events,
      unsettled,
      elapsedMs: Date.now() - started,
      summary: "",
    };
    report.summary = summaryLine(report);
    if (result.violations.length > 0 || options.keep) {
      report.savedTo = join(
        tmpdir(),
        `fencegate-nemesis-${options.store}-${options.seed}-${Date.now()}.json`,
      );
      writeFileSync(
        report.savedTo,
        JSON.stringify({ ...report, history: history.ops, audit, final: Object.fromEntries(final) }, null, 1),
      );
    }
    return report;
  } finally {
    for (const ep of endpoints) ep.agent.destroy();
    await cluster.stop();
  }
}

export function summaryLine(r: RunReport): string {
  const c = r.result.counts;
  const o = r.options;
  const kinds = (rec: Record<string, number>) =>
    Object.entries(rec)
      .map(([k, n]) => `${k}=${n}`)
      .join(",");
  const byRule = violationCounts(r.result.violations);
  return (
    `nemesis ${o.store} seed=${o.seed} ${o.durationMs} ms ${o.clients} clients × ${o.keys} keys: ` +
    `ops=${c.ops} writes accepted=${c.writes.ok} refused=${c.writes.fail} unknown=${c.writes.info} ` +
    `(answered unknown ${c.unknownAnswers}; audit unknown ${c.auditUnknown.total}: landed ${c.auditUnknown.landed}, ` +
    `not ${c.auditUnknown.notLanded}, unsettled ${c.auditUnknown.unsettled}) grants=${c.grants.audited} ` +
    `(received ${c.grants.received}) reads=${c.reads} | faults: ${kinds(r.faults.episodes)} | ` +
    `store ${kinds(r.faults.store)} | redis ${kinds(r.faults.redis)} | ` +
    `violations=${r.result.violations.length}${r.result.violations.length ? ` ${JSON.stringify(byRule)}` : ""} ` +
    `in ${(r.elapsedMs / 1000).toFixed(1)} s`
  );
}

/** The violations of a run, for a failing test's message. */
export function violationReport(r: RunReport): string {
  return [
    r.summary,
    `replay: FENCEGATE_NEMESIS_SEED=${r.options.seed} FENCEGATE_NEMESIS_MS=${r.options.durationMs} ` +
      `FENCEGATE_NEMESIS_CLIENTS=${r.options.clients} FENCEGATE_NEMESIS_KEYS=${r.options.keys} ` +
      `npx vitest run test/safety/nemesis/nemesis.test.ts -t ${r.options.store}`,
    ...(r.savedTo ? [`the whole run: ${r.savedTo}`] : []),
    describeViolations(r.result.violations),
  ].join("\n");
}

async function healthy(url: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  let last = "";
  while (Date.now() < deadline) {
    try {
      const res = await fetch(`${url}${HEALTH_PATH}`, { signal: AbortSignal.timeout(2_000) });
      last = `${res.status} ${await res.text()}`;
      if (res.status === 200) return;
    } catch (e) {
      last = (e as Error).message;
    }
    await sleep(100);
  }
  throw new Error(`replica ${url} is not healthy after the faults ended: ${last}`);
}

/**
 * Acquires and releases a lease on the key: the grant fences the object against the commit
 * intents of every ended lease first. Recorded in the history like any client's.
 */
async function fenceKey(
  endpoints: readonly Endpoint[],
  r: number,
  bucket: string,
  key: string,
  history: HistoryRecorder,
  client: number,
): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const op = history.invoke({ client, kind: "acquire", replica: r, key, token: null, leaseId: null });
    const got = await leaseCall(() =>
      endpoints[r]!.leases.acquire({ bucket, key, ttlMs: 5_000, waitMs: 5_000 }),
    );
    if (got.ok && got.lease) {
      history.complete(op, { status: 201, type: "ok", token: got.lease.token, leaseId: got.lease.leaseId });
      const lease = got.lease;
      const release = history.invoke({
        client,
        kind: "release",
        replica: r,
        key,
        token: lease.token,
        leaseId: lease.leaseId,
      });
      const released = await leaseCall(() => endpoints[r]!.leases.release(lease.leaseId));
      history.complete(
        release,
        released.ok ? { status: 204, type: "ok" } : { type: "info", error: released.error },
      );
      return;
    }
    const failed = !got.ok && got.status !== null && got.status < 500;
    history.complete(op, {
      type: failed ? "fail" : "info",
      ...(got.ok ? {} : { status: got.status, code: got.code, error: got.error }),
    });
    if (Date.now() > deadline) throw new Error(`no lease on ${key} after the faults ended`);
    await sleep(200);
  }
}

/** Waits until every write recorded "unknown" has its final record; returns how many still lack it. */
async function waitForOutcomes(ep: Endpoint, bucket: string): Promise<number> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const records: AuditRecord[] = await allAuditRecords(ep.leases, { bucket });
    const last = new Map<string, AuditRecord>();
    for (const r of records)
      if (r.requestId && (r.op === "PutObject" || r.op === "DeleteObject")) last.set(r.requestId, r);
    const open = [...last.values()].filter((r) => r.decision === "unknown").length;
    if (open === 0 || Date.now() > deadline) return open;
    await sleep(500);
  }
}

/** The key's content through every replica (they must agree), recorded as reads. */
async function finalContent(
  endpoints: readonly Endpoint[],
  bucket: string,
  key: string,
  history: HistoryRecorder,
  client: number,
): Promise<string | null> {
  for (let attempt = 1; ; attempt++) {
    const seen: Array<string | null> = [];
    for (const [r, ep] of endpoints.entries()) {
      const op = history.invoke({ client, kind: "read", replica: r, key, token: null, leaseId: null });
      try {
        const res = await s3Call(ep, { method: "GET", bucket, key }, CLIENT_TIMEOUT_MS);
        const found = res.status === 200;
        const ok = found || res.status === 404;
        history.complete(op, {
          requestId: res.requestId,
          status: res.status,
          code: res.code,
          body: found ? res.text : null,
          type: ok ? "ok" : "fail",
        });
        if (ok) seen.push(found ? res.text : null);
      } catch (e) {
        history.complete(op, { type: "fail", error: (e as Error).message });
      }
    }
    if (seen.length === endpoints.length && seen.every((s) => s === seen[0])) return seen[0]!;
    if (attempt >= 10)
      throw new Error(`the replicas do not agree on ${key} after the faults ended: ${JSON.stringify(seen)}`);
    await sleep(300);
  }
}
