import { describe, expect, it } from "vitest";
import { resolveRange } from "../../src/backends/range.js";

describe("resolveRange", () => {
  it("resolves ranges S3-style", () => {
    expect(resolveRange(undefined, 10)).toBeUndefined();
    expect(resolveRange({}, 10)).toBeUndefined();
    expect(resolveRange({ start: 2, end: 4 }, 10)).toEqual({ start: 2, end: 4 });
    expect(resolveRange({ start: 2 }, 10)).toEqual({ start: 2, end: 9 });
    expect(resolveRange({ start: 2, end: 99 }, 10)).toEqual({ start: 2, end: 9 });
    expect(resolveRange({ end: 3 }, 10)).toEqual({ start: 0, end: 3 });
    expect(resolveRange({ suffix: 3 }, 10)).toEqual({ start: 7, end: 9 });
    expect(resolveRange({ suffix: 30 }, 10)).toEqual({ start: 0, end: 9 });
  });

  it("ignores a range whose end is before its start, as S3 ignores an invalid Range header", () => {
    expect(resolveRange({ start: 5, end: 2 }, 10)).toBeUndefined();
  });

  it.each([
    [{ start: 10 }, 10],
    [{ start: 11, end: 20 }, 10],
    [{ suffix: 0 }, 10],
    [{ start: 0 }, 0],
    [{ suffix: 1 }, 0],
  ])("refuses %j on %i bytes with InvalidRange", (range, size) => {
    expect(() => resolveRange(range, size)).toThrow(
      expect.objectContaining({ code: "InvalidRange", details: { size } }),
    );
  });

  it("refuses malformed bounds with InvalidArgument", () => {
    for (const range of [{ start: -1 }, { start: 1.5 }, { suffix: 2, start: 1 }, { end: Number.NaN }]) {
      expect(() => resolveRange(range, 10)).toThrow(expect.objectContaining({ code: "InvalidArgument" }));
    }
  });
});
