/**
 * How the lease service holds up as concurrent callers grow: acquire+release pairs per second
 * through LeaseService over the embedded store and audit log (in process, no HTTP: the service's
 * own wait queue and the group commit are what is measured) with 256 and 1,024 concurrent
 * callers, next to 16 in the same run, alternating rounds, medians. Every caller works on its own
 * keys, so nobody waits for a holder: a flat figure means the queue's bookkeeping does not grow
 * with the number of requests in flight.
 *
 *   npx tsx benchmarks/lease-concurrency.ts [--seconds 2] [--rounds 3]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { createEmbeddedAuditLog } from "../src/audit/embedded/embedded-audit-log.js";
import { systemClock } from "../src/core/clock.js";
import { createEmbeddedLeaseStore } from "../src/leases/embedded/embedded-lease-store.js";
import { LeaseService } from "../src/leases/lease-service.js";
import { closeEmbeddedDb, openEmbeddedDb } from "../src/sqlite/db.js";
import { alternate, closedLoop } from "./lib/load.js";
import { type Row, table } from "./lib/report.js";

export type LeaseConcurrencyOptions = { seconds: number; rounds: number; callers: number[] };

export async function leaseConcurrencyBench(opts: LeaseConcurrencyOptions): Promise<Row[]> {
  const dir = mkdtempSync(join(tmpdir(), "fencegate-bench-lease-concurrency-"));
  const db = openEmbeddedDb({ dataDir: dir });
  try {
    const audit = createEmbeddedAuditLog({ db, gatewayId: "bench" });
    const service = new LeaseService({
      store: createEmbeddedLeaseStore({ db, events: audit }),
      audit,
      clock: systemClock,
      limits: { minTtlMs: 1_000, maxTtlMs: 3_600_000, maxWaitMs: 60_000 },
      fenceObject: async () => {},
    });
    const caller = { principal: null, requestId: null };
    const pair = async (client: number, n: number) => {
      const resource = { bucket: "bench", key: `c${client}/k${n % 64}` };
      const lease = await service.acquire({ resource, ttlMs: 30_000, waitMs: 0, owner: "bench" }, caller);
      await service.release(lease.leaseId, caller);
    };
    const [base, ...more] = [16, ...opts.callers];
    await closedLoop(base!, 1, pair);
    const results = await alternate([base!, ...more].map(String), opts.rounds, async (callers) => {
      const rate = await closedLoop(Number(callers), opts.seconds, pair);
      return rate.perSecond;
    });
    return more.map((callers) => ({
      name: `lease acquire+release in process, ${callers.toLocaleString("en-US")} callers`,
      value: results[String(callers)]!.median,
      unit: "pairs/s",
      baselineName: `${base} callers`,
      baseline: results[String(base)]!.median,
    }));
  } finally {
    closeEmbeddedDb(db);
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.filename === process.argv[1]) {
  const { values } = parseArgs({
    options: {
      seconds: { type: "string", default: "2" },
      rounds: { type: "string", default: "3" },
      callers: { type: "string", default: "256,1024" },
    },
  });
  const rows = await leaseConcurrencyBench({
    seconds: Number(values.seconds),
    rounds: Number(values.rounds),
    callers: values.callers.split(",").map(Number),
  });
  console.log(table(rows));
}
