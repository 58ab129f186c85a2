import { describe, expect, it } from "vitest";
import { compareKeys, listSorted, type SeekFrom } from "../../../src/backends/list-helper.js";
import { listSortedAsync } from "../../../src/backends/s3/list-async.js";
import { startAfterFor } from "../../../src/backends/s3/object-listing.js";

/** listSortedAsync is listSorted over an asynchronous source: the same pages for any query. */

const ALPHABET = ["a", "b", "/", ".", "-", "é", "\uE000", "\u{1F600}", "z", "\t"];

function randomKey(): string {
  const length = 1 + Math.floor(Math.random() * 6);
  return Array.from({ length }, () => ALPHABET[Math.floor(Math.random() * ALPHABET.length)]).join("");
}

function randomQuery() {
  const pick = <T>(items: T[]) => items[Math.floor(Math.random() * items.length)]!;
  return {
    ...(Math.random() < 0.5 ? { prefix: pick(["a", "b/", "", "é", "a/", "z"]) } : {}),
    ...(Math.random() < 0.5 ? { delimiter: pick(["/", ".", "a/", "\uE000"]) } : {}),
    ...(Math.random() < 0.4 ? { startAfter: randomKey() } : {}),
    maxKeys: pick([0, 1, 2, 3, 5, 1000]),
  };
}

describe("listSortedAsync", () => {
  it("returns exactly what listSorted returns, for 2,000 random queries", async () => {
    for (let round = 0; round < 20; round++) {
      const keys = [...new Set(Array.from({ length: 60 }, randomKey))]
        .sort(compareKeys)
        .map((key) => ({ key }));
      const reached = (key: string, from: SeekFrom) =>
        from.inclusive ? compareKeys(key, from.key) >= 0 : compareKeys(key, from.key) > 0;
      const seek = (from: SeekFrom) => keys.filter((k) => reached(k.key, from));
      let seeks = 0;
      const seekAsync = async function* (from: SeekFrom) {
        seeks++;
        for (const entry of seek(from)) {
          await Promise.resolve();
          yield entry;
        }
      };
      for (let q = 0; q < 100; q++) {
        const query = randomQuery();
        expect(await listSortedAsync(query, seekAsync), JSON.stringify(query)).toEqual(
          listSorted(query, seek),
        );
      }
      expect(seeks).toBeGreaterThan(0);
    }
  });
});

describe("startAfterFor (S3's exclusive StartAfter for a seek)", () => {
  it("is the key itself for an exclusive seek, and just below it for an inclusive one", () => {
    expect(startAfterFor("ns/", { key: "abc", inclusive: false })).toBe("ns/abc");
    expect(startAfterFor("ns/", { key: "", inclusive: true })).toBeUndefined();
    expect(startAfterFor("", { key: "abc", inclusive: true })).toBe("abb\u{10FFFF}");
    // Never a lone surrogate: U+E000 steps down to U+D7FF.
    expect(startAfterFor("", { key: "a\uE000", inclusive: true })).toBe("a\uD7FF\u{10FFFF}");
    for (let i = 0; i < 2000; i++) {
      const key = randomKey();
      const other = randomKey();
      const after = startAfterFor("", { key, inclusive: true })!;
      // Everything at or above the key is strictly after the StartAfter...
      if (compareKeys(other, key) >= 0) expect(compareKeys(other, after)).toBeGreaterThan(0);
      // ...and what is below the key but after the StartAfter would have to start with it.
      if (compareKeys(other, key) < 0 && compareKeys(other, after) > 0)
        expect(other.startsWith(after)).toBe(true);
    }
  });
});
