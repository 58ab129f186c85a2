import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import { makeBucket } from "./support.js";
import { checkHistory, runHistory } from "./visibility-history.js";

/**
 * The visibility rule of fenced transactions under concurrent readers, writers that go stale and
 * single writes, on the embedded default: a randomized history, checked afterwards
 * (visibility-history.ts).
 */

let gw: TestGateway;

beforeAll(async () => {
  gw = await startTestGateway();
  await makeBucket(gw, "visible");
});

afterAll(async () => {
  await gw?.stop();
});

describe("the visibility rule, randomized", () => {
  it("no reader sees part of a transaction, an older state after a newer one, or a refused transaction", async () => {
    const history = await runHistory({
      url: gw.url,
      leases: gw.leases,
      bucket: "visible",
      keys: ["set/part-0", "set/part-1", "set/part-2", "set/manifest"],
      durationMs: 6_000,
      writers: 3,
      readers: 4,
      ttlMs: 500,
      minCommitted: 10,
      minRefused: 1,
    });
    // The history exercised what the rule is about.
    const committed = history.commits.filter((c) => c.outcome === "committed").length;
    const refused = history.commits.filter((c) => c.outcome === "refused").length;
    expect(committed, JSON.stringify(history.commits)).toBeGreaterThanOrEqual(10);
    expect(refused, JSON.stringify(history.commits)).toBeGreaterThanOrEqual(1);
    expect(history.singles.size).toBeGreaterThanOrEqual(3);
    expect(history.reads.filter((r) => r.value !== null).length).toBeGreaterThanOrEqual(200);
    expect(checkHistory(history)).toEqual([]);
  }, 60_000);
});
