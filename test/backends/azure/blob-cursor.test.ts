import { describe, expect, it } from "vitest";
import {
  BlobCursor,
  type CursorSource,
  type Page,
  type PageRequest,
} from "../../../src/backends/azure/blob-cursor.js";
import { listSortedAsync } from "../../../src/backends/azure/list-sorted-async.js";
import { compareKeys, listSorted, seekSorted } from "../../../src/backends/list-helper.js";

/**
 * The S3 listing over List Blobs pages, against fake services that sort names as UTF-16 code
 * units (Azurite) or as UTF-8 bytes, and that ignore or honour `startFrom`: every page must equal
 * what listSorted gives over the same keys sorted in S3 order.
 */

type Item = { name: string; hidden: boolean };
type Order = "utf16" | "utf8";

const utf16 = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

function fakeService(items: Item[], order: Order, honoursStartFrom: boolean, pageSize: number) {
  const compare = order === "utf16" ? utf16 : compareKeys;
  const sorted = [...items].sort((a, b) => compare(a.name, b.name));
  const requests: PageRequest[] = [];
  const source = (
    prefix: string,
    hints: { startFromHonoured?: boolean },
  ): CursorSource<Item, { key: string }> => ({
    prefix,
    hints,
    nameOf: (item) => item.name,
    toEntry: (item) => (item.hidden ? undefined : { key: item.name }),
    async fetch(request): Promise<Page<Item>> {
      requests.push(request);
      let matching = sorted.filter((item) => item.name.startsWith(prefix));
      if (request.startFrom !== undefined && honoursStartFrom) {
        matching = matching.filter((item) => compare(item.name, request.startFrom!) >= 0);
      }
      const start = request.marker ? Number(request.marker) : 0;
      const items = matching.slice(start, start + pageSize);
      const next = start + pageSize;
      return { items, ...(next < matching.length ? { nextMarker: String(next) } : {}) };
    },
  });
  return { source, requests };
}

const ALPHABET = ["a", "b", "/", ".", "é", "\uE000", "\uFFFD", "\u{1F600}", "\u{10000}", "z"];
const pick = <T>(from: readonly T[]): T => from[Math.floor(Math.random() * from.length)]!;
const randomKey = () =>
  Array.from({ length: 1 + Math.floor(Math.random() * 4) }, () => pick(ALPHABET)).join("");

describe("S3 listings over List Blobs pages", () => {
  for (const order of ["utf16", "utf8"] as const) {
    for (const honours of [false, true]) {
      it(`match listSorted for a service in ${order} order that ${honours ? "honours" : "ignores"} startFrom`, async () => {
        for (let trial = 0; trial < 300; trial++) {
          const names = [...new Set(Array.from({ length: Math.floor(Math.random() * 25) }, randomKey))];
          const items = names.map((name) => ({ name, hidden: Math.random() < 0.2 }));
          const visible = items
            .filter((item) => !item.hidden)
            .map((item) => ({ key: item.name }))
            .sort((a, b) => compareKeys(a.key, b.key));
          const input = {
            ...(Math.random() < 0.5 ? { prefix: pick(["", "a", "/", "\u{1F600}", "a/", "\uE000"]) } : {}),
            ...(Math.random() < 0.5 ? { delimiter: pick(["/", "\u{1F600}", "b"]) } : {}),
            ...(Math.random() < 0.5
              ? { startAfter: Math.random() < 0.5 ? pick(names.length ? names : ["a"]) : randomKey() }
              : {}),
            maxKeys: Math.floor(Math.random() * 6),
          };
          const expected = listSorted(input, (from) =>
            seekSorted(visible, (entry) => {
              const c = compareKeys(entry.key, from.key);
              return from.inclusive ? c >= 0 : c > 0;
            }),
          );
          const service = fakeService(items, order, honours, 1 + Math.floor(Math.random() * 3));
          const hints = {};
          const got = await listSortedAsync(
            input,
            (from) => new BlobCursor(service.source(input.prefix ?? "", hints), from),
          );
          expect({ input, names, got }).toEqual({ input, names, got: expected });
        }
      });
    }
  }

  it("re-opens the listing at a skipped-to name only when the service honours startFrom", async () => {
    const names = [
      "a/0",
      "p/0",
      ...Array.from({ length: 50 }, (_, i) => `q/${String(i).padStart(2, "0")}`),
      "r/0",
      "s",
    ];
    const items = names.map((name) => ({ name, hidden: false }));
    for (const honours of [true, false]) {
      const service = fakeService(items, "utf8", honours, 5);
      const hints: { startFromHonoured?: boolean } = {};
      const page = await listSortedAsync(
        { delimiter: "/", startAfter: "o", maxKeys: 10 },
        (from) => new BlobCursor(service.source("", hints), from),
      );
      expect(page.commonPrefixes).toEqual(["p/", "q/", "r/"]);
      expect(page.objects.map((o) => o.key)).toEqual(["s"]);
      const opened = service.requests.filter((r) => r.marker === undefined);
      const jumps = opened.filter((r) => r.startFrom !== undefined).map((r) => r.startFrom);
      if (honours) {
        // Opened just at "o", then jumped past q/ instead of reading its 50 names.
        expect(hints.startFromHonoured).toBe(true);
        expect(jumps).toContain("q0");
        expect(service.requests.length).toBeLessThan(8);
      } else {
        expect(hints.startFromHonoured).toBe(false);
        expect(jumps).toEqual(["o"]);
        expect(service.requests.length).toBeGreaterThan(10);
      }
    }
  });
});
