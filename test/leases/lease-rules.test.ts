import { describe, expect, it } from "vitest";
import { prefixUpperBound } from "../../src/core/prefix-range.js";
import {
  covers,
  describeResource,
  endedAt,
  isActive,
  leaseState,
  newLeaseId,
  overlaps,
  type ResourceRef,
  resourceOf,
} from "../../src/leases/lease-rules.js";

const key = (k: string, bucket = "b"): ResourceRef => ({ bucket, key: k });
const prefix = (p: string, bucket = "b"): ResourceRef => ({ bucket, prefix: p });

describe("overlaps", () => {
  const cases: [string, ResourceRef, ResourceRef, boolean][] = [
    ["same key", key("a/b"), key("a/b"), true],
    ["different keys", key("a/b"), key("a/c"), false],
    ["key is a string prefix of another key", key("a"), key("ab"), false],
    ["key under prefix", key("logs/1"), prefix("logs/"), true],
    ["key equal to prefix", key("logs/"), prefix("logs/"), true],
    ["key shorter than prefix", key("logs"), prefix("logs/"), false],
    ["key outside prefix", key("data/1"), prefix("logs/"), false],
    ["same prefix", prefix("a/"), prefix("a/"), true],
    ["nested prefixes", prefix("a/"), prefix("a/b/"), true],
    ["disjoint prefixes", prefix("a/"), prefix("b/"), false],
    ["sibling prefixes", prefix("a/b/"), prefix("a/c/"), false],
    ["empty prefix and any key", prefix(""), key("x"), true],
    ["empty prefix and any prefix", prefix(""), prefix("x/"), true],
    ["different buckets, same key", key("k", "b1"), key("k", "b2"), false],
    ["different buckets, nested prefixes", prefix("a/", "b1"), prefix("a/b/", "b2"), false],
    ["wildcard-looking prefix", prefix("a_"), key("ab"), false],
  ];

  it.each(cases)("%s", (_name, a, b, expected) => {
    expect(overlaps(a, b)).toBe(expected);
    expect(overlaps(b, a)).toBe(expected); // symmetric
  });

  it("accepts stored lease records", () => {
    const lease = {
      leaseId: "l",
      bucket: "b",
      prefix: "p/",
      owner: "o",
      token: 1,
      ttlMs: 1,
      acquiredAt: 0,
      expiresAt: 1,
    };
    expect(overlaps(lease, key("p/x"))).toBe(true);
  });
});

describe("covers", () => {
  it("covers its own key only", () => {
    expect(covers(key("k"), "b", "k")).toBe(true);
    expect(covers(key("k"), "b", "k2")).toBe(false);
    expect(covers(key("k"), "other", "k")).toBe(false);
  });

  it("covers every key under its prefix", () => {
    expect(covers(prefix("p/"), "b", "p/")).toBe(true);
    expect(covers(prefix("p/"), "b", "p/x/y")).toBe(true);
    expect(covers(prefix("p/"), "b", "p")).toBe(false);
    expect(covers(prefix("p/"), "b", "q/x")).toBe(false);
    expect(covers(prefix("p/"), "c", "p/x")).toBe(false);
    expect(covers(prefix(""), "b", "anything")).toBe(true);
  });
});

describe("leaseState", () => {
  const lease = { expiresAt: 1_000 };

  it("is active strictly before expiresAt and expired from expiresAt on", () => {
    expect(leaseState(lease, 999)).toBe("active");
    expect(leaseState(lease, 1_000)).toBe("expired");
    expect(leaseState(lease, 5_000)).toBe("expired");
    expect(isActive(lease, 999)).toBe(true);
    expect(isActive(lease, 1_000)).toBe(false);
  });

  it("is released once released, before or after expiry", () => {
    expect(leaseState({ expiresAt: 1_000, releasedAt: 500 }, 600)).toBe("released");
    expect(leaseState({ expiresAt: 1_000, releasedAt: 2_000 }, 3_000)).toBe("released");
  });
});

describe("endedAt", () => {
  it("is the earlier of release and expiry", () => {
    expect(endedAt({ expiresAt: 1_000 })).toBe(1_000);
    expect(endedAt({ expiresAt: 1_000, releasedAt: 400 })).toBe(400);
    expect(endedAt({ expiresAt: 1_000, releasedAt: 3_000 })).toBe(1_000);
  });
});

describe("resourceOf and describeResource", () => {
  it("turns a stored lease into its resource", () => {
    expect(resourceOf({ bucket: "b", key: "k", prefix: undefined })).toEqual({ bucket: "b", key: "k" });
    expect(resourceOf({ bucket: "b", prefix: "p/" })).toEqual({ bucket: "b", prefix: "p/" });
    expect(describeResource(key("k"))).toBe("b/k");
    expect(describeResource(prefix("p/"))).toBe("b/p/*");
  });
});

describe("prefixUpperBound", () => {
  // Code point order, which is also UTF-8 byte order (SQLite's BINARY collation).
  const compare = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));
  const inRange = (s: string, p: string) => {
    const upper = prefixUpperBound(p);
    return compare(s, p) >= 0 && (upper === null || compare(s, upper) < 0);
  };

  it("bounds exactly the strings that start with the prefix", () => {
    const prefixes = ["", "a", "a/", "a%", "a_", "ü", "日本/", "a\u{10FFFF}", "\u{D7FF}", "a\u{FFFF}"];
    const samples = [
      "",
      "a",
      "a/",
      "a/b",
      "a0",
      "a.",
      "b",
      "ab",
      "a%x",
      "a_c",
      "a\u{10FFFF}",
      "a\u{10FFFF}x",
      "ü",
      "ü/1",
      "üa",
      "v",
      "日本/x",
      "日本0",
      "\u{D7FF}x",
      "\u{E000}",
      "a\u{FFFF}z",
      "a\u{10000}",
      "z",
    ];
    for (const p of prefixes)
      for (const s of samples) expect(inRange(s, p), `${s} in ${p}`).toBe(s.startsWith(p));
  });

  it("has no bound for the empty prefix or one of only U+10FFFF", () => {
    expect(prefixUpperBound("")).toBeNull();
    expect(prefixUpperBound("\u{10FFFF}\u{10FFFF}")).toBeNull();
    expect(prefixUpperBound("a/")).toBe("a0");
  });
});

describe("newLeaseId", () => {
  it("is 32 hex digits led by its millisecond time, so that ids made later sort after", async () => {
    const first = newLeaseId();
    await new Promise((r) => setTimeout(r, 3));
    const second = newLeaseId();
    for (const id of [first, second]) expect(id).toMatch(/^[0-9a-f]{32}$/);
    expect(Math.abs(Number.parseInt(first.slice(0, 12), 16) - Date.now())).toBeLessThan(1_000);
    expect(second > first).toBe(true);
    // The random part differs even within one millisecond.
    expect(new Set(Array.from({ length: 100 }, () => newLeaseId().slice(12))).size).toBe(100);
  });
});
