import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { AuditLog } from "../../../src/audit/audit-log.js";
import { createEmbeddedAuditLog } from "../../../src/audit/embedded/embedded-audit-log.js";
import { fakeClock } from "../../../src/core/clock.js";
import { type EmbeddedDb, openEmbeddedDb } from "../../../src/sqlite/db.js";
import { describeAuditLogContract, draft } from "../audit-log.contract.js";

describeAuditLogContract("embedded (SQLite)", async (clock) => {
  const dataDir = await mkdtemp(join(tmpdir(), "fencegate-audit-"));
  let db = openEmbeddedDb({ dataDir });
  let log = createEmbeddedAuditLog({ db, gatewayId: "gw-test", clock });
  return {
    log,
    async reopen() {
      await log.close();
      db.close(); // the exclusive lock must go before the file can be opened again
      db = openEmbeddedDb({ dataDir });
      log = createEmbeddedAuditLog({ db, gatewayId: "gw-test", clock });
      return log;
    },
    async cleanup() {
      await log.close();
      db.close();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
});

describe("embedded audit log", () => {
  let dataDir: string;
  let db: EmbeddedDb;
  let log: AuditLog;

  beforeEach(async () => {
    dataDir = await mkdtemp(join(tmpdir(), "fencegate-audit-"));
    db = openEmbeddedDb({ dataDir });
    log = createEmbeddedAuditLog({ db, gatewayId: "gw-1", clock: fakeClock() });
  });

  afterEach(async () => {
    await log.close();
    if (db.open) db.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  it("writes its gateway id into every record", async () => {
    expect((await log.append(draft())).gateway).toBe("gw-1");
  });

  it("keeps its tables apart from the other users of the db", () => {
    const tables = db
      .prepare<[], { name: string }>(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
      )
      .all()
      .map((t) => t.name);
    expect(tables.sort()).toEqual(["audit_meta", "audit_once", "audit_records"]);
  });

  it("does not close the shared db", async () => {
    await log.close();
    expect(db.open).toBe(true);
    await expect(log.ping()).rejects.toMatchObject({ code: "ServiceUnavailable" });
  });

  it("clamps a limit above 1000", async () => {
    for (let i = 0; i < 1001; i++) await log.append(draft({ requestId: `r${i}` }));
    const page = await log.query({ limit: 5000 });
    expect(page.records).toHaveLength(1000);
    expect(page.nextCursor).not.toBeNull();
  });

  it("refuses a malformed time", async () => {
    await expect(log.query({ limit: 1, since: "yesterday" })).rejects.toMatchObject({
      code: "InvalidArgument",
    });
  });
});
