import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import type { Clock } from "../../core/clock.js";
import type { AuditRecord } from "../audit-log.js";
import { matches, type ParsedFilters } from "../audit-log.js";
import type { AuditArchiveStore } from "./archive-store.js";
import { TRIM, UNLOCK } from "./audit-scripts.js";
import { recordFrom } from "./record-codec.js";

/**
 * Retention of the Redis audit log: records beyond `maxRecords`, or older than `maxAgeMs`, move
 * to JSON Lines segments in an archive store, and queries read them there.
 *
 * Moving a segment: one gateway at a time (a lock in Redis) reads the oldest due records, writes
 * them as one segment file (durable before anything else happens), then one script registers the
 * segment, advances `P:a:archived` and removes the records and their index entries from Redis.
 * A crash before that script leaves the records in Redis and a file nobody refers to; a race
 * lost to another gateway (the script found `P:a:archived` moved) removes its own file.
 */
export type RedisAuditRetention = {
  archive: AuditArchiveStore;
  /** At most this many records stay in Redis (give or take one segment). Default: no limit. */
  maxRecords?: number;
  /** Records older than this move out. Default: no limit. */
  maxAgeMs?: number;
  /** Records per segment file, at most. Default 10,000. */
  segmentRecords?: number;
  /** How often each gateway looks for records to move; 0: only when archiveNow() is called. */
  intervalMs?: number;
};

/** A registered segment, as the trim script stores it in `P:a:seg` (scored by `last`). */
type SegmentInfo = {
  name: string;
  first: number;
  last: number;
  t0: number;
  t1: number;
  count: number;
};

type ArchivePart = {
  records: AuditRecord[];
  state: "full" | "end" | "budget";
  position: number;
};

const LOCK_MS = 120_000;
const CACHED_SEGMENTS = 16;

export function createArchiver(o: {
  redis: Redis;
  prefix: string;
  retention: RedisAuditRetention;
  clock: Clock;
}) {
  const { redis, prefix, retention, clock } = o;
  const A = `${prefix}:a`;
  const store = retention.archive;
  const segmentRecords = retention.segmentRecords ?? 10_000;
  const cache = new Map<string, AuditRecord[]>();

  async function segment(name: string): Promise<AuditRecord[]> {
    const hit = cache.get(name);
    if (hit) {
      // Most recently used last: the oldest entry is the first one evicted.
      cache.delete(name);
      cache.set(name, hit);
      return hit;
    }
    const text = (await store.get(name)).toString("utf8");
    const records = text
      .split("\n")
      .filter((line) => line !== "")
      .map((line) => JSON.parse(line) as AuditRecord);
    cache.set(name, records);
    if (cache.size > CACHED_SEGMENTS) cache.delete(cache.keys().next().value!);
    return records;
  }

  return {
    /** Moves every due record out of Redis; returns how many moved (0 if another gateway is at it). */
    /** Records appended but not yet archived (metrics). */
    async lag(): Promise<number> {
      const [seq, archived] = await redis.mget(`${A}:seq`, `${A}:archived`);
      return Math.max(0, Number(seq ?? "0") - Number(archived ?? "0"));
    },

    async archiveNow(): Promise<number> {
      const token = randomBytes(12).toString("hex");
      if ((await redis.set(`${A}:archiver`, token, "PX", LOCK_MS, "NX")) !== "OK") return 0;
      let moved = 0;
      try {
        for (;;) {
          const archived = Number((await redis.get(`${A}:archived`)) ?? "0");
          const lastSeq = Number((await redis.get(`${A}:seq`)) ?? "0");
          const entries = (await redis.xrange(A, `(0-${archived}`, "+", "COUNT", segmentRecords)) as Array<
            [string, string[]]
          >;
          const now = clock();
          // Both rules select a head of the log (seqs and `h` only grow along it), so the due
          // records are the entries up to the first that neither rule selects.
          const due: Array<[string, string[]]> = [];
          for (const entry of entries) {
            const seq = Number(entry[0].slice(2));
            const h = Number(field(entry[1], "h"));
            const byCount = retention.maxRecords !== undefined && seq <= lastSeq - retention.maxRecords;
            const byAge = retention.maxAgeMs !== undefined && h < now - retention.maxAgeMs;
            if (!byCount && !byAge) break;
            due.push(entry);
          }
          if (due.length === 0) return moved;
          const records = due.map(([id, fields]) => recordFrom(id, fields));
          const first = records[0]!.seq;
          const last = records.at(-1)!.seq;
          const times = records.map((r) => Date.parse(r.time));
          const info: SegmentInfo = {
            // Unique per attempt: a gateway that loses the race removes its own file, never the winner's.
            name: `audit-${pad(first)}-${pad(last)}-${randomBytes(4).toString("hex")}.jsonl`,
            first,
            last,
            t0: Math.min(...times),
            t1: Math.max(...times),
            count: records.length,
          };
          await store.put(info.name, Buffer.from(`${records.map((r) => JSON.stringify(r)).join("\n")}\n`));
          const done = await TRIM.run(redis, [prefix], [archived, last, JSON.stringify(info)]);
          if (done !== 1) {
            await store.remove(info.name);
            return moved;
          }
          moved += records.length;
          await redis.pexpire(`${A}:archiver`, LOCK_MS);
        }
      } finally {
        await UNLOCK.run(redis, [prefix], [token]).catch(() => undefined);
      }
    },

    /**
     * Matches among archived records after `after` up to `archived` (the mark the Redis part of
     * the same query read), in seq order, examining at most `budget` records.
     */
    async query(
      f: ParsedFilters,
      after: number,
      archived: number,
      fetch: number,
      budget: number,
    ): Promise<ArchivePart> {
      const raw = await redis.zrangebyscore(`${A}:seg`, `(${after}`, archived);
      const out: ArchivePart = { records: [], state: "end", position: archived };
      let examined = 0;
      for (const text of raw) {
        const info = JSON.parse(text) as SegmentInfo;
        // A segment entirely outside the time window is not read at all.
        const outside =
          (f.sinceMs !== undefined && info.t1 < f.sinceMs) ||
          (f.untilMs !== undefined && info.t0 >= f.untilMs);
        if (!outside) {
          for (const record of await segment(info.name)) {
            if (record.seq <= after) continue;
            examined++;
            if (matches(f, record)) {
              out.records.push(record);
              if (out.records.length >= fetch) return { ...out, state: "full", position: record.seq };
            }
          }
        }
        if (examined >= budget && info.last < archived)
          return { ...out, state: "budget", position: info.last };
      }
      return out;
    },

    /**
     * What the archive store holds, for a log whose state in Redis is gone: the segments that
     * continue one another from seq 1 on (a file a crash left unregistered overlaps another
     * one and is passed over), and the highest seq in any file. Their times are not known
     * without reading them, so a restored segment is read for every time window.
     */
    async recover(): Promise<{ chain: SegmentInfo[]; highest: number }> {
      const files: SegmentInfo[] = [];
      for (const name of await store.list()) {
        const m = /^audit-(\d{16})-(\d{16})-[0-9a-f]{8}\.jsonl$/.exec(name);
        if (!m) continue;
        const first = Number(m[1]);
        const last = Number(m[2]);
        files.push({ name, first, last, t0: -8.64e15, t1: 8.64e15, count: last - first + 1 });
      }
      files.sort((a, b) => a.first - b.first || b.last - a.last);
      const chain: SegmentInfo[] = [];
      for (const f of files) {
        const end = chain.at(-1)?.last ?? 0;
        if (f.first === end + 1) chain.push(f);
      }
      return { chain, highest: Math.max(0, ...files.map((f) => f.last)) };
    },

    /** Every registered segment, oldest first. */
    async segments(): Promise<SegmentInfo[]> {
      return (await redis.zrange(`${A}:seg`, 0, -1)).map((t) => JSON.parse(t) as SegmentInfo);
    },
  };
}

export type Archiver = ReturnType<typeof createArchiver>;

const pad = (n: number) => String(n).padStart(16, "0");

function field(flat: readonly string[], name: string): string | undefined {
  for (let i = 0; i + 1 < flat.length; i += 2) if (flat[i] === name) return flat[i + 1];
  return undefined;
}
