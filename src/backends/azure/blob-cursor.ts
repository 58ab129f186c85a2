import { compareKeys, type SeekFrom } from "../list-helper.js";
import { type AsyncCursor, reached } from "./list-sorted-async.js";

/**
 * A forward cursor over a container's blobs in S3 key order (UTF-8 byte order), built on List
 * Blobs pages.
 *
 * Order. S3 lists keys in UTF-8 byte order. Azurite sorts names as JavaScript strings (UTF-16
 * code units), and Azure documents only "alphabetical" order. The two orders differ only where
 * one name has a character in U+E000..U+FFFF and the other a supplementary character (a
 * surrogate pair) at the first difference. All names that share a prefix P followed by a
 * character >= U+D800 sort together, as one run, in either order; the cursor sorts each such run
 * before it hands it on (it holds one run in memory: the names of one "directory" that start
 * with such a character), and passes every other name straight through. So it is right for a
 * service in either order.
 *
 * Seeking. Service version 2026-02-06 added `startFrom` (a full blob name, inclusive) to List
 * Blobs; @azure/storage-blob 12.32 sends it, Azurite 3.35 ignores it (support was merged after
 * that release). The cursor passes it as a hint: cut before the first character >= U+D800 (so it
 * names the same place in either order), and always filters what comes back itself. When the
 * service honours it (the first name returned is not before it), a skip past the current page
 * re-opens the listing there; when it does not, the cursor reads on page by page. Deep
 * pagination then costs one pass over every blob before the page asked for, tombstones included.
 */

export type PageRequest = { startFrom?: string; marker?: string };
export type Page<T> = { items: T[]; nextMarker?: string };

export type CursorSource<T, E> = {
  /** One page of the service's listing. */
  fetch(request: PageRequest): Promise<Page<T>>;
  nameOf(item: T): string;
  /** The entry an item stands for, or undefined to skip it (tombstones, fencegate's own blobs). */
  toEntry(item: T): E | undefined | Promise<E | undefined>;
  /** Shared by the cursors of one backend: whether the service honours startFrom. */
  hints: { startFromHonoured?: boolean };
  /** The listing's prefix: startFrom is only useful beyond it. */
  prefix: string;
};

/** The first position of a character >= U+D800 (a surrogate or U+E000..U+FFFF), or -1. */
function highCharAt(name: string): number {
  for (let i = 0; i < name.length; i++) if (name.charCodeAt(i) >= 0xd800) return i;
  return -1;
}

/** A prefix of `key` that sorts no later than `key` in both orders. */
const safeStart = (key: string): string => {
  const at = highCharAt(key);
  return at < 0 ? key : key.slice(0, at);
};

export class BlobCursor<T, E extends { key: string }> implements AsyncCursor<E> {
  private from: SeekFrom;
  private marker: string | undefined;
  private done = false;
  /** Items of the current page not yet looked at, in the service's order. */
  private page: T[] = [];
  /** Sorted items ready to hand on. */
  private ready: T[] = [];
  /** The run being collected: names sharing `runKey` followed by a character >= U+D800. */
  private run: T[] = [];
  private runKey: string | undefined;
  private opened = false;
  /** The startFrom of the listing currently open, if any. */
  private startFrom: string | undefined;

  constructor(
    private readonly source: CursorSource<T, E>,
    from: SeekFrom,
  ) {
    this.from = from;
  }

  async next(): Promise<E | undefined> {
    for (;;) {
      const item = await this.nextSorted();
      if (item === undefined) return undefined;
      const name = this.source.nameOf(item);
      if (!reached(name, this.from)) continue;
      const entry = await this.source.toEntry(item);
      if (entry !== undefined) return entry;
    }
  }

  async skipTo(from: SeekFrom): Promise<void> {
    if (!reached(from.key, this.from)) return; // never backwards
    this.from = from;
    if (this.source.hints.startFromHonoured !== true || this.done) return;
    // Re-open at `from` only when nothing in hand reaches it: reading on is cheaper otherwise.
    const inHand = [...this.ready, ...this.run, ...this.page];
    if (inHand.some((item) => reached(this.source.nameOf(item), from))) return;
    this.page = [];
    this.ready = [];
    this.run = [];
    this.runKey = undefined;
    this.marker = undefined;
    this.opened = false;
  }

  async close(): Promise<void> {
    this.done = true;
    this.page = [];
    this.ready = [];
    this.run = [];
  }

  /** The next item in UTF-8 order. */
  private async nextSorted(): Promise<T | undefined> {
    for (;;) {
      if (this.ready.length > 0) return this.ready.shift();
      const item = await this.nextRaw();
      if (item === undefined) {
        this.flushRun();
        if (this.ready.length > 0) continue;
        return undefined;
      }
      const name = this.source.nameOf(item);
      const at = highCharAt(name);
      const key = at < 0 ? undefined : name.slice(0, at);
      if (key !== this.runKey) this.flushRun();
      if (key === undefined) {
        // After the run just flushed, if any.
        if (this.ready.length === 0) return item;
        this.ready.push(item);
        continue;
      }
      this.runKey = key;
      this.run.push(item);
    }
  }

  private flushRun(): void {
    if (this.run.length > 0) {
      const { nameOf } = this.source;
      this.ready.push(...this.run.sort((a, b) => compareKeys(nameOf(a), nameOf(b))));
    }
    this.run = [];
    this.runKey = undefined;
  }

  /** The next item in the service's order. */
  private async nextRaw(): Promise<T | undefined> {
    while (this.page.length === 0) {
      if (this.done) return undefined;
      await this.fetchPage();
    }
    return this.page.shift();
  }

  private async fetchPage(): Promise<void> {
    const opening = !this.opened;
    if (opening) {
      this.opened = true;
      const candidate = safeStart(this.from.key);
      const useful = compareKeys(candidate, this.source.prefix) > 0;
      this.startFrom = useful && this.source.hints.startFromHonoured !== false ? candidate : undefined;
    }
    // Every page of a listing repeats its startFrom: the marker continues that listing.
    const request: PageRequest = {
      ...(this.startFrom !== undefined ? { startFrom: this.startFrom } : {}),
      ...(!opening && this.marker ? { marker: this.marker } : {}),
    };
    const page = await this.source.fetch(request);
    if (opening && this.startFrom !== undefined && page.items.length > 0) {
      // A service that ignores startFrom starts at the prefix: then read on, never re-open.
      // startFrom holds no character >= U+D800, so this comparison means the same in either order.
      const first = this.source.nameOf(page.items[0]!);
      this.source.hints.startFromHonoured = compareKeys(first, this.startFrom) >= 0;
    }
    this.page = page.items;
    this.marker = page.nextMarker;
    if (!page.nextMarker) this.done = true;
  }
}
