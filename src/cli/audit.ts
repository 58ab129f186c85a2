import { createWriteStream } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import type { AuditQuery, AuditRecord } from "../client/types.js";
import { type Column, outputMode, printList, table, write } from "./output.js";
import { CliError, clientFromEnv, EXIT, intOption, isoOption, withApiErrors } from "./shared.js";

/** The contract's filters, as the SDK takes them (paging is the command's own). */
type Filters = Omit<AuditQuery, "limit" | "cursor">;

function query(opts: Filters) {
  return {
    bucket: opts.bucket,
    key: opts.key,
    prefix: opts.prefix,
    leaseId: opts.leaseId,
    transactionId: opts.transactionId,
    decision: opts.decision,
    op: opts.op,
    since: isoOption("since", opts.since),
    until: isoOption("until", opts.until),
  };
}

const COLUMNS: ReadonlyArray<Column<AuditRecord>> = [
  ["SEQ", (r) => r.seq],
  ["TIME", (r) => r.time],
  ["OP", (r) => r.op],
  ["DECISION", (r) => (r.decision === "rejected" ? "REJECTED" : r.decision)],
  ["REASON", (r) => r.reason],
  ["BUCKET", (r) => r.bucket],
  ["KEY", (r) => r.key ?? (r.prefix ? `${r.prefix}*` : null)],
  ["TOKEN", (r) => r.token],
  ["HCT", (r) => r.highestToken],
  ["OWNER", (r) => r.owner],
  ["PRINCIPAL", (r) => r.principal],
  ["LEASE ID", (r) => r.leaseId],
];

/** The cursor of the page after `seq` (the gateway's format: the last seq a page returned). */
function cursorAfter(seq: number): string {
  return Buffer.from(`a1:${seq}`, "utf8").toString("base64url");
}

/**
 * `fencegate audit`: one page (or every page with --all) in the chosen format, or with --follow
 * every new record as it is recorded, polling with the cursor.
 */
export async function audit(
  opts: Filters & {
    limit?: string;
    cursor?: string;
    all?: boolean;
    follow?: boolean;
    intervalMs?: string;
    output?: string;
  },
): Promise<number> {
  const limit = intOption("limit", opts.limit);
  if (limit !== undefined && (limit < 1 || limit > 1000)) {
    throw new CliError(`--limit must be from 1 to 1000, got ${limit}`, EXIT.usage);
  }
  const intervalMs = intOption("interval-ms", opts.intervalMs, 1000)!;
  if (opts.follow && opts.all) throw new CliError("give --all or --follow, not both", EXIT.usage);
  const q = { ...query(opts), limit };
  const mode = outputMode(opts.output);
  const client = await clientFromEnv();
  const fetchPage = (cursor: string | undefined) => withApiErrors(() => client.audit({ ...q, cursor }));

  if (opts.follow) {
    // From now on, unless told where to start.
    const since = q.since ?? (opts.cursor ? undefined : new Date().toISOString());
    let cursor = opts.cursor;
    let headed = false;
    for (;;) {
      const page = await withApiErrors(() => client.audit({ ...q, since, cursor, limit: limit ?? 1000 }));
      for (const r of page.records) {
        if (mode === "table") {
          const lines = table([r], COLUMNS).split("\n");
          if (!headed) write(`${lines[0]}\n`);
          headed = true;
          write(`${lines[1]}\n`);
        } else write(`${JSON.stringify(r)}\n`);
      }
      const last = page.records.at(-1);
      if (page.nextCursor) {
        cursor = page.nextCursor;
        continue;
      }
      if (last) cursor = cursorAfter(last.seq);
      await sleep(intervalMs);
    }
  }

  if (!opts.all) {
    const page = await fetchPage(opts.cursor);
    printList(mode, page.records, page, COLUMNS, "no records");
    if (mode === "table" && page.nextCursor) {
      process.stderr.write(`more: --cursor ${page.nextCursor} (or --all)\n`);
    }
    return 0;
  }
  const records: AuditRecord[] = [];
  let cursor = opts.cursor;
  do {
    const page = await fetchPage(cursor);
    // NDJSON streams as pages come; JSON and the table need every record first.
    if (mode === "ndjson") for (const r of page.records) write(`${JSON.stringify(r)}\n`);
    else records.push(...page.records);
    cursor = page.nextCursor ?? undefined;
  } while (cursor);
  if (mode !== "ndjson") printList(mode, records, { records, nextCursor: null }, COLUMNS, "no records");
  return 0;
}

const EXPORT_FIELDS = [
  "seq",
  "time",
  "op",
  "decision",
  "reason",
  "bucket",
  "key",
  "prefix",
  "token",
  "highestToken",
  "leaseId",
  "owner",
  "principal",
  "requestId",
  "gateway",
  "transactionId",
  "keys",
] as const;
type Field = (typeof EXPORT_FIELDS)[number];
const INTEGER_FIELDS = new Set<Field>(["seq", "token", "highestToken"]);

/**
 * `fencegate audit export`: every record of a range (the filters of `audit`) as NDJSON, CSV
 * (RFC 4180, a header line) or Parquet (typed columns: seq, token and highestToken INT64, time a
 * TIMESTAMP, the rest strings, a transaction's keys as one JSON array; nulls kept), to a file or
 * stdout.
 */
export async function exportRecords(
  opts: Filters & { format: "ndjson" | "csv" | "parquet"; out?: string },
): Promise<number> {
  const q = { ...query(opts), limit: 1000 };
  if (opts.format === "parquet" && !opts.out && process.stdout.isTTY) {
    throw new CliError("parquet is binary: give --out FILE or pipe stdout", EXIT.usage);
  }
  const client = await clientFromEnv();
  const out = opts.out ? createWriteStream(opts.out) : process.stdout;
  const put = (s: string | Uint8Array) =>
    new Promise<void>((resolve, reject) => {
      if (out.write(s)) resolve();
      else {
        out.once("drain", resolve);
        out.once("error", reject);
      }
    });
  const parquet: AuditRecord[] = [];
  let count = 0;
  let cursor: string | undefined;
  if (opts.format === "csv") await put(`${EXPORT_FIELDS.join(",")}\n`);
  do {
    const page = await withApiErrors(() => client.audit({ ...q, cursor }));
    for (const r of page.records) {
      count++;
      if (opts.format === "ndjson") await put(`${JSON.stringify(r)}\n`);
      else if (opts.format === "csv")
        await put(`${EXPORT_FIELDS.map((f) => csvCell(field(r, f))).join(",")}\n`);
      else parquet.push(r);
    }
    cursor = page.nextCursor ?? undefined;
  } while (cursor);
  if (opts.format === "parquet") await put(await toParquet(parquet));
  if (out !== process.stdout) {
    await new Promise<void>((resolve, reject) => {
      out.once("error", reject);
      out.end(resolve);
    });
    process.stderr.write(`wrote ${count} records to ${opts.out}\n`);
  }
  return 0;
}

function field(r: AuditRecord, f: Field): unknown {
  if (f === "keys") return r.keys === undefined ? null : JSON.stringify(r.keys);
  return (r as unknown as Record<string, unknown>)[f] ?? null;
}

function csvCell(v: unknown): string {
  if (v === null || v === undefined) return "";
  const s = String(v);
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

async function toParquet(records: AuditRecord[]): Promise<Uint8Array> {
  const { parquetWriteBuffer } = await import("hyparquet-writer");
  const columnData = EXPORT_FIELDS.map((f) => {
    const values = records.map((r) => field(r, f));
    if (f === "time")
      return { name: f, type: "TIMESTAMP" as const, data: values.map((v) => new Date(String(v))) };
    if (INTEGER_FIELDS.has(f)) {
      return {
        name: f,
        type: "INT64" as const,
        data: values.map((v) => (v === null ? null : BigInt(v as number))),
      };
    }
    return { name: f, type: "STRING" as const, data: values.map((v) => (v === null ? null : String(v))) };
  });
  return new Uint8Array(parquetWriteBuffer({ columnData, createdBy: "fencegate audit export" }));
}
