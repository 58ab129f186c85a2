import { beforeEach, describe, expect, it } from "vitest";
import { createMemoryAuditLog, type MemoryAuditLog } from "../../../src/audit/memory/memory-audit-log.js";
import { fakeClock } from "../../../src/core/clock.js";
import { MemoryDomain } from "../../../src/core/tx.js";
import { describeAuditLogContract, draft } from "../audit-log.contract.js";

describeAuditLogContract("memory", async (clock) => {
  const log = createMemoryAuditLog({ gatewayId: "gw-test", clock });
  return { log, cleanup: () => log.close() };
});

describe("memory audit log", () => {
  let log: MemoryAuditLog;

  beforeEach(() => {
    log = createMemoryAuditLog({ gatewayId: "gw-1", clock: fakeClock() });
  });

  it("writes its gateway id into every record", async () => {
    expect((await log.append(draft())).gateway).toBe("gw-1");
  });

  it("runs its appends in the domain it was given, or in its own", () => {
    const domain = new MemoryDomain();
    expect(createMemoryAuditLog({ gatewayId: "gw", domain }).domain).toBe(domain);
    expect(log.domain).toBeInstanceOf(MemoryDomain);
  });

  it("hands out copies: changing a returned record changes nothing in the log", async () => {
    const record = await log.append(draft());
    const snapshot = { ...record };
    record.decision = "rejected";
    (await log.query({ limit: 1 })).records[0]!.key = "changed";
    expect((await log.query({ limit: 1 })).records).toEqual([snapshot]);
  });

  it("clamps a limit above 1000", async () => {
    for (let i = 0; i < 1001; i++) await log.append(draft({ requestId: `r${i}` }));
    const page = await log.query({ limit: 5000 });
    expect(page.records).toHaveLength(1000);
    expect(page.nextCursor).not.toBeNull();
  });

  it("refuses a malformed time, in a query or in a draft", async () => {
    await expect(log.query({ limit: 1, since: "yesterday" })).rejects.toMatchObject({
      code: "InvalidArgument",
    });
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
