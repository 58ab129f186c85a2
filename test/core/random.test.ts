import { describe, expect, it } from "vitest";
import { randomBase64url, randomHex } from "../../src/core/random.js";

describe("pooled random ids", () => {
  it("gives ids of the asked length, never the same bytes twice, across many pool refills", () => {
    const seen = new Set<string>();
    // 20,000 x 10 bytes: about fifty refills of the 4 KiB pool.
    for (let i = 0; i < 20_000; i++) {
      const id = randomHex(10);
      expect(id).toMatch(/^[0-9a-f]{20}$/);
      seen.add(id);
    }
    expect(seen.size).toBe(20_000);
    expect(randomBase64url(12)).toMatch(/^[A-Za-z0-9_-]{16}$/);
  });

  it("refuses more bytes than the pool holds", () => {
    expect(() => randomHex(5000)).toThrow(RangeError);
  });
});
