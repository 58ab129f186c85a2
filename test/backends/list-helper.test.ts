import { describe, expect, it } from "vitest";
import { compareKeys, listSorted, type SeekFrom } from "../../src/backends/list-helper.js";
import { prefixUpperBound } from "../../src/core/prefix-range.js";

/** A sorted in-memory source that counts the entries it hands out. */
function source(keys: string[]) {
  const sorted = [...keys].sort(compareKeys).map((key) => ({ key }));
  const stats = { read: 0, seeks: 0 };
  const seek = function* (from: SeekFrom) {
    stats.seeks++;
    for (const entry of sorted) {
      const c = compareKeys(entry.key, from.key);
      if (c > 0 || (c === 0 && from.inclusive)) {
        stats.read++;
        yield entry;
      }
    }
  };
  return { seek, stats };
}

describe("compareKeys", () => {
  it("orders by code point (UTF-8 byte order), not UTF-16 code unit", () => {
    const keys = ["\u{1F600}", "\uE000", "\uFFFF", "z", "", "a", "ab", "\u{10000}"];
    expect([...keys].sort(compareKeys)).toEqual([
      "",
      "a",
      "ab",
      "z",
      "\uE000",
      "\uFFFF",
      "\u{10000}",
      "\u{1F600}",
    ]);
    const bytes = [...keys].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
    expect([...keys].sort(compareKeys)).toEqual(bytes);
    expect(compareKeys("same", "same")).toBe(0);
  });
});

describe("prefixUpperBound", () => {
  it("returns the smallest string above every string with the prefix", () => {
    expect(prefixUpperBound("a/")).toBe("a0");
    expect(prefixUpperBound("abc")).toBe("abd");
    expect(prefixUpperBound("")).toBeNull();
    expect(prefixUpperBound("a\u{10FFFF}")).toBe("b");
    expect(prefixUpperBound("\u{10FFFF}")).toBeNull();
    expect(prefixUpperBound("x\uD7FF")).toBe("x\uE000");
    expect(prefixUpperBound("x\u{1F600}")).toBe("x\u{1F601}");
    for (const key of ["a/", "a/b", "a/\u{10FFFF}\u{10FFFF}", "a/\uFFFF"]) {
      expect(compareKeys(key, prefixUpperBound("a/")!)).toBeLessThan(0);
    }
  });
});

describe("listSorted", () => {
  it("jumps past the keys under a common prefix instead of reading them", () => {
    const keys = ["a.txt", "z.txt"];
    for (let i = 0; i < 500; i++) keys.push(`big/${String(i).padStart(4, "0")}`, `huge/${i}/x`);
    const { seek, stats } = source(keys);
    const result = listSorted({ delimiter: "/", maxKeys: 100 }, seek);
    expect(result.objects.map((o) => o.key)).toEqual(["a.txt", "z.txt"]);
    expect(result.commonPrefixes).toEqual(["big/", "huge/"]);
    expect(stats.read).toBeLessThanOrEqual(5);
  });

  it("skips a common prefix that contains startAfter (it was returned on an earlier page)", () => {
    const { seek } = source(["a/1", "a/2", "b"]);
    expect(listSorted({ delimiter: "/", startAfter: "a/", maxKeys: 10 }, seek)).toMatchObject({
      objects: [{ key: "b" }],
      commonPrefixes: [],
    });
    expect(listSorted({ delimiter: "/", startAfter: "a/1", maxKeys: 10 }, seek).commonPrefixes).toEqual([]);
    expect(listSorted({ delimiter: "/", startAfter: "a", maxKeys: 10 }, seek).commonPrefixes).toEqual(["a/"]);
  });

  it("is truncated only when something follows", () => {
    const { seek } = source(["a", "b", "c/1", "c/2"]);
    expect(listSorted({ delimiter: "/", maxKeys: 3 }, seek)).toMatchObject({
      isTruncated: false,
      commonPrefixes: ["c/"],
      nextStartAfter: "c/",
    });
    expect(listSorted({ delimiter: "/", maxKeys: 2 }, seek)).toMatchObject({
      isTruncated: true,
      nextStartAfter: "b",
    });
    expect(listSorted({ maxKeys: 0 }, seek)).toEqual({ objects: [], commonPrefixes: [], isTruncated: false });
  });

  it("treats an empty delimiter as none and a multi-character delimiter as a whole", () => {
    const { seek } = source(["a--b--c", "a--d", "a-e"]);
    expect(listSorted({ delimiter: "", maxKeys: 10 }, seek).objects).toHaveLength(3);
    expect(listSorted({ delimiter: "--", maxKeys: 10 }, seek)).toMatchObject({
      objects: [{ key: "a-e" }],
      commonPrefixes: ["a--"],
    });
    expect(listSorted({ prefix: "a--", delimiter: "--", maxKeys: 10 }, seek)).toMatchObject({
      objects: [{ key: "a--d" }],
      commonPrefixes: ["a--b--"],
    });
  });
});
