import { readFileSync } from "node:fs";
import { join } from "node:path";
import { DuckDBInstance } from "@duckdb/node-api";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AuditRecord } from "../../../src/audit/audit-log.js";
import {
  connectRedis,
  createRedisAuditLog,
  type RedisAuditLog,
} from "../../../src/audit/redis/redis-audit-log.js";
import { exportRecords } from "../../../src/cli/audit.js";
import type { AuditQuery } from "../../../src/client/types.js";
import { startTestGateway, type TestGateway, tempDir } from "../../support/gateway.js";
import { checkedResponses, checkLeaseApiResponses } from "../../support/openapi-recorder.js";
import { type RedisServer, startRedis } from "../../support/redis.js";
import { requireTools } from "../../support/tools.js";
import { draft } from "../audit-log.contract.js";

requireTools("redis-server");
// Every answer of the audit API below is checked against src/api/openapi.json.
checkLeaseApiResponses();

/**
 * The audit API with records of a fenced transaction: a gateway whose audit log is in Redis,
 * and records appended to that log beside it (as another replica would).
 */
describe("the audit API with transaction records", () => {
  let redis: RedisServer;
  let gw: TestGateway;
  let recorder: RedisAuditLog;
  let records: AuditRecord[];

  beforeAll(async () => {
    redis = await startRedis();
    gw = await startTestGateway({
      overrides: { gatewayId: "gw-api", audit: { type: "redis", url: redis.url, keyPrefix: "{api}" } },
    });
    recorder = await createRedisAuditLog({
      redis: await connectRedis(redis.url),
      ownsConnection: true,
      keyPrefix: "{api}",
      gatewayId: "gw-recorder",
    });
    records = [];
    for (const d of [
      draft({ requestId: "plain" }),
      draft({ key: "a", transactionId: "T1" }),
      draft({ key: "b", op: "DeleteObject", transactionId: "T1" }),
      draft({ op: "TransactionCommitted", key: null, transactionId: "T1", keys: ["a", "b"] }),
      draft({ op: "TransactionAborted", key: null, transactionId: "T2", keys: [] }),
    ]) {
      records.push(await recorder.append(d));
    }
  }, 60_000);

  afterAll(async () => {
    await recorder?.close();
    await gw?.stop();
    await redis?.stop();
  });

  const audit = (query: AuditQuery & { transactionId?: string }) =>
    gw.leases.audit(query) as Promise<{ records: AuditRecord[]; nextCursor: string | null }>;

  it("answers records with their transaction and keys, and records without them as before", async () => {
    const page = await audit({ bucket: "b" });
    expect(page).toEqual({ records, nextCursor: null });
    expect(page.records[0]).not.toHaveProperty("transactionId");
    expect(page.records[0]).not.toHaveProperty("keys");
    expect(page.records[3]).toMatchObject({ transactionId: "T1", keys: ["a", "b"] });
    expect(page.records[4]).toMatchObject({ op: "TransactionAborted", transactionId: "T2", keys: [] });
  });

  it("filters by the transactionId query parameter, exactly", async () => {
    expect(await audit({ transactionId: "T1" })).toEqual({ records: records.slice(1, 4), nextCursor: null });
    expect(await audit({ transactionId: "T1", op: "TransactionCommitted" })).toEqual({
      records: [records[3]],
      nextCursor: null,
    });
    expect(await audit({ transactionId: "T" })).toEqual({ records: [], nextCursor: null });
    const first = await audit({ transactionId: "T1", limit: 2 });
    expect(first.records).toEqual(records.slice(1, 3));
    expect(await audit({ transactionId: "T1", limit: 2, cursor: first.nextCursor! })).toEqual({
      records: [records[3]],
      nextCursor: null,
    });
    // An empty parameter filters nothing, as for every other filter.
    expect((await audit({ transactionId: "" })).records).toEqual(records);
    expect(checkedResponses()).toBeGreaterThan(0);
  });

  it("exports a transaction's id and keys as columns of CSV and Parquet (the keys as JSON)", async () => {
    const dir = tempDir("fencegate-audit-tx-export-");
    const saved = process.env.FENCEGATE_ENDPOINT;
    const stderr = process.stderr.write;
    process.env.FENCEGATE_ENDPOINT = gw.url;
    process.stderr.write = () => true; // "wrote N records"
    try {
      const files = { csv: join(dir.path, "a.csv"), parquet: join(dir.path, "a.parquet") };
      for (const format of ["csv", "parquet"] as const) {
        expect(await exportRecords({ format, out: files[format], bucket: "b" })).toBe(0);
      }
      expect(readFileSync(files.csv, "utf8").split("\n")[0]).toMatch(/,transactionId,keys$/);
      const db = await DuckDBInstance.create(":memory:");
      const conn = await db.connect();
      const want = records.map((r) => ({
        seq: String(r.seq),
        transactionId: r.transactionId ?? null,
        keys: r.keys === undefined ? null : JSON.stringify(r.keys),
      }));
      for (const reader of [
        `read_parquet('${files.parquet}')`,
        `read_csv('${files.csv}', header = true, all_varchar = true)`,
      ]) {
        const rows = await conn.runAndReadAll(
          `select seq::varchar seq, "transactionId", "keys" from ${reader} order by seq::bigint`,
        );
        expect(rows.getRowObjectsJson()).toEqual(want);
      }
      conn.closeSync();
    } finally {
      process.stderr.write = stderr;
      if (saved === undefined) delete process.env.FENCEGATE_ENDPOINT;
      else process.env.FENCEGATE_ENDPOINT = saved;
      dir.cleanup();
    }
  });
});
