import { prefixUpperBound } from "../../core/prefix-range.js";
import { compareKeys, type SeekFrom } from "../list-helper.js";
import type { ListEntry, ListInput, ListResult } from "../storage-backend.js";
import type { Layout } from "./layout.js";
import { listSortedAsync } from "./list-async.js";
import { mapLimit } from "./map-limit.js";
import type { RecordStore } from "./record-store.js";
import type { ObjectRecord } from "./records.js";
import type { ListedObject, Store } from "./store.js";

/**
 * ListObjects over a store bucket: the records (`<m>r/`, in key order, plus the few long-key
 * records of `<m>l/`, sorted in memory) merged with the plain objects (everything outside the
 * meta prefix) in key order. Where a key has both, the record wins: live, its version; deleted,
 * nothing (a tombstone hides the plain object); plain, the plain object.
 *
 * Each seek of the S3 listing algorithm (list-async.ts) starts two store listings with S3's
 * StartAfter, so that skipping a common prefix costs a request, not a walk through its keys.
 * Records are resolved through the ETag cache; only records never seen cost a GET.
 */

type KeyedRecord = { key: string; record: ObjectRecord };
type PlainEntry = ListedObject & { key: string };

const RECORD_READS_IN_PARALLEL = 16;

export class ObjectListing {
  constructor(
    private readonly store: Store,
    private readonly layout: Layout,
    private readonly records: RecordStore,
    /** The record as a reader sees it (a pending transaction write resolved: S3Context.visible). */
    private readonly visible: (bucket: string, record: ObjectRecord) => Promise<ObjectRecord | null> = async (
      _b,
      r,
    ) => r,
  ) {}

  async list(input: ListInput): Promise<ListResult> {
    const { bucket } = input;
    const prefix = input.prefix ?? "";
    const pageSize = Math.max(1, Math.min(1000, input.maxKeys + 1));
    let longRecords: Promise<KeyedRecord[]> | undefined;
    // Plain objects under the meta prefix are fencegate's own and never listed; keys under it
    // that older versions let clients write are hidden from S3 requests (ListInput.hidden).
    const hidden = input.hidden;
    const isHidden = (key: string) => hidden !== undefined && key.startsWith(hidden);
    const seek = (from: SeekFrom): AsyncIterable<ListEntry> => {
      longRecords ??= this.longRecords(bucket, prefix);
      return this.entries(bucket, prefix, from, pageSize, longRecords, isHidden);
    };
    const page = await listSortedAsync(input, seek);
    return page;
  }

  private async *entries(
    bucket: string,
    prefix: string,
    from: SeekFrom,
    pageSize: number,
    longRecords: Promise<KeyedRecord[]>,
    isHidden: (key: string) => boolean,
  ): AsyncGenerator<ListEntry> {
    const records = mergeSorted(
      this.directRecords(bucket, prefix, from, pageSize),
      seekLong(longRecords, from),
    );
    const plains = this.plainObjects(bucket, prefix, from, pageSize);
    try {
      let [r, p] = await Promise.all([records.next(), plains.next()]);
      while (!r.done || !p.done) {
        if (!r.done && (p.done || compareKeys(r.value.key, p.value.key) <= 0)) {
          const same = !p.done && p.value.key === r.value.key;
          const entry = fromRecord(r.value, same ? p.value : null);
          if (entry && reached(entry.key, from) && !isHidden(entry.key)) yield entry;
          [r, p] = await Promise.all([records.next(), same ? plains.next() : p]);
        } else if (!p.done) {
          if (reached(p.value.key, from)) yield fromPlain(p.value);
          p = await plains.next();
        }
      }
    } finally {
      await Promise.all([records.return(undefined), plains.return(undefined)]);
    }
  }

  /** Records under `<m>r/<prefix>` from `from` on, in key order, resolved a page at a time. */
  private async *directRecords(
    bucket: string,
    prefix: string,
    from: SeekFrom,
    pageSize: number,
  ): AsyncGenerator<KeyedRecord> {
    const ns = this.layout.records;
    let startAfter = startAfterFor(ns, from);
    let continuationToken: string | undefined;
    for (;;) {
      const page = await this.store.list(bucket, {
        prefix: ns + prefix,
        ...(startAfter !== undefined && !continuationToken ? { startAfter } : {}),
        ...(continuationToken ? { continuationToken } : {}),
        maxKeys: pageSize,
      });
      const resolved = await mapLimit(page.objects, RECORD_READS_IN_PARALLEL, async (o) => {
        const listed = await this.records.readListed(bucket, o.name, o.etag);
        const record = listed ? await this.visible(bucket, listed) : null;
        return record ? { key: this.layout.keyOfRecordName(o.name), record } : null;
      });
      for (const entry of resolved) if (entry) yield entry;
      if (!page.next) return;
      continuationToken = page.next;
      startAfter = undefined;
    }
  }

  /** Objects outside the meta prefix under `prefix`, from `from` on, in key order. */
  private async *plainObjects(
    bucket: string,
    prefix: string,
    from: SeekFrom,
    pageSize: number,
  ): AsyncGenerator<PlainEntry> {
    let startAfter = startAfterFor("", from);
    let continuationToken: string | undefined;
    for (;;) {
      const page = await this.store.list(bucket, {
        prefix,
        ...(startAfter !== undefined && !continuationToken ? { startAfter } : {}),
        ...(continuationToken ? { continuationToken } : {}),
        maxKeys: pageSize,
      });
      let skipMeta = false;
      for (const o of page.objects) {
        if (this.layout.isMeta(o.name)) {
          skipMeta = true;
          break;
        }
        yield { ...o, key: o.name };
      }
      if (skipMeta) {
        // fencegate's own objects: jump past all of them with one new listing.
        const past = prefixUpperBound(this.layout.meta);
        if (past === null) return;
        startAfter = startAfterFor("", { key: past, inclusive: true });
        continuationToken = undefined;
        continue;
      }
      if (!page.next) return;
      continuationToken = page.next;
    }
  }

  /** Every long-key record whose key starts with `prefix`, sorted (there are very few). */
  private async longRecords(bucket: string, prefix: string): Promise<KeyedRecord[]> {
    const found: KeyedRecord[] = [];
    for await (const page of this.store.listAll(bucket, this.layout.longRecords)) {
      const resolved = await mapLimit(page.objects, RECORD_READS_IN_PARALLEL, async (o) => {
        const listed = await this.records.readListed(bucket, o.name, o.etag);
        return listed ? this.visible(bucket, listed) : null;
      });
      for (const record of resolved) {
        if (record?.key.startsWith(prefix)) found.push({ key: record.key, record });
      }
    }
    return found.sort((a, b) => compareKeys(a.key, b.key));
  }
}

/** Whether a key is at or after the seek's start (a StartAfter just below it can yield a few before). */
const reached = (key: string, from: SeekFrom) => {
  const order = compareKeys(key, from.key);
  return from.inclusive ? order >= 0 : order > 0;
};

/**
 * S3's StartAfter (exclusive) for a seek: the seek's key itself, or for an inclusive seek a
 * string just below it: the last code point decremented, then U+10FFFF. Only keys starting with
 * that string (none, in practice) fall between it and the seek's key; they are filtered out.
 */
export function startAfterFor(namespace: string, from: SeekFrom): string | undefined {
  const name = namespace + from.key;
  if (!from.inclusive) return name;
  if (from.key === "") return undefined;
  const points = Array.from(name, (c) => c.codePointAt(0)!);
  const last = points.pop()!;
  if (last <= 1) return points.length > 0 ? String.fromCodePoint(...points) : undefined;
  const previous = last - 1 >= 0xd800 && last - 1 <= 0xdfff ? 0xd7ff : last - 1;
  return String.fromCodePoint(...points, previous, 0x10ffff);
}

async function* seekLong(all: Promise<KeyedRecord[]>, from: SeekFrom): AsyncGenerator<KeyedRecord> {
  const sorted = await all;
  let low = 0;
  let high = sorted.length;
  while (low < high) {
    const mid = (low + high) >>> 1;
    if (reached(sorted[mid]!.key, from)) high = mid;
    else low = mid + 1;
  }
  for (let i = low; i < sorted.length; i++) yield sorted[i]!;
}

/** Two sorted streams of records with distinct keys, as one. */
async function* mergeSorted(
  a: AsyncGenerator<KeyedRecord>,
  b: AsyncGenerator<KeyedRecord>,
): AsyncGenerator<KeyedRecord> {
  try {
    let [x, y] = await Promise.all([a.next(), b.next()]);
    while (!x.done || !y.done) {
      if (!x.done && (y.done || compareKeys(x.value.key, y.value.key) <= 0)) {
        yield x.value;
        x = await a.next();
      } else if (!y.done) {
        yield y.value;
        y = await b.next();
      }
    }
  } finally {
    await Promise.all([a.return(undefined), b.return(undefined)]);
  }
}

function fromRecord({ key, record }: KeyedRecord, plain: PlainEntry | null): ListEntry | null {
  if (record.state === "live" && record.live) {
    const { size, etag, lastModified } = record.live;
    return { key, size, etag, lastModified: new Date(lastModified) };
  }
  if (record.state === "plain" && plain) return fromPlain(plain);
  return null;
}

const fromPlain = (o: PlainEntry): ListEntry => ({
  key: o.key,
  size: o.size,
  etag: o.etag,
  lastModified: o.lastModified,
});
