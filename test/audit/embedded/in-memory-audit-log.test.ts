import { beforeEach, describe, expect, it } from "vitest";
import {
  createEmbeddedAuditLog,
  type EmbeddedAuditLog,
} from "../../../src/audit/embedded/embedded-audit-log.js";
import { fakeClock } from "../../../src/core/clock.js";
import { type EmbeddedDomain, embeddedDomain } from "../../../src/sqlite/db.js";
import { Database } from "../../../src/sqlite/sqlite.js";
import { describeAuditLogContract, draft } from "../audit-log.contract.js";

/**
 * The embedded audit log on an in-memory SQLite database (`:memory:`), the audit log of tests and
 * single-process setups: the whole audit log contract, as on a database file, except what needs
 * a restart (nothing survives one).
 */

describeAuditLogContract("embedded (in-memory SQLite)", async (clock) => {
  const log = createEmbeddedAuditLog({ gatewayId: "gw-test", clock });
  return { log, cleanup: () => log.close() };
});

describe("embedded audit log in memory", () => {
  let log: EmbeddedAuditLog;

  beforeEach(() => {
    log = createEmbeddedAuditLog({ gatewayId: "gw-1", clock: fakeClock() });
  });

  it("runs on a database of its own without one given, which it closes with itself", async () => {
    const other = createEmbeddedAuditLog({ gatewayId: "gw-2" });
    expect(other.domain).not.toBe(log.domain);
    await log.append(draft());
    expect((await other.query({ limit: 10 })).records).toEqual([]);
    const given = new Database(":memory:");
    const onGiven = createEmbeddedAuditLog({ gatewayId: "gw", db: given });
    expect(onGiven.domain).toBe(embeddedDomain(given));
    await onGiven.close();
    expect(given.open).toBe(true);
    given.close();
    const own = (other.domain as EmbeddedDomain).db;
    expect(own.memory && own.open).toBe(true);
    await other.close();
    expect(own.open).toBe(false);
    await expect(other.ping()).rejects.toMatchObject({ code: "ServiceUnavailable" });
  });

  it("hands out copies: changing a returned record changes nothing in the log", async () => {
    const record = await log.append(draft({ transactionId: "T1", keys: ["a", "b"] }));
    const snapshot = structuredClone(record);
    record.decision = "rejected";
    record.keys!.push("c");
    const queried = (await log.query({ limit: 1 })).records[0]!;
    queried.key = "changed";
    expect((await log.query({ limit: 1 })).records).toEqual([snapshot]);
  });

  it("refuses a malformed time, in a query or in a draft", async () => {
    await expect(log.query({ limit: 1, until: "tomorrow" })).rejects.toMatchObject({
      code: "InvalidArgument",
    });
    await expect(log.append(draft({ time: "noon" }))).rejects.toMatchObject({ code: "InvalidArgument" });
    expect((await log.query({ limit: 10 })).records).toEqual([]);
  });

  it("answers ServiceUnavailable once closed", async () => {
    await log.close();
    await expect(log.ping()).rejects.toMatchObject({ code: "ServiceUnavailable" });
    await expect(log.append(draft())).rejects.toMatchObject({ code: "ServiceUnavailable" });
  });
});
