/** How client commands print: a table for people, JSON or NDJSON for programs. */
export type OutputMode = "table" | "json" | "ndjson";
export const OUTPUT_MODES: readonly OutputMode[] = ["table", "json", "ndjson"];

/** The --output option of a command's values. */
export type Out = { output?: string };

/** The --output given, else a table on a terminal and JSON when piped. */
export function outputMode(given: string | undefined): OutputMode {
  if (given !== undefined) return given as OutputMode;
  return process.stdout.isTTY ? "table" : "json";
}

export function write(text: string): void {
  process.stdout.write(text);
}

/** A column of a table: its heading and how a row shows in it. */
export type Column<T> = [heading: string, cell: (row: T) => unknown];

/** Rows as aligned columns (a heading line, then one line per row). */
export function table<T>(rows: readonly T[], columns: ReadonlyArray<Column<T>>): string {
  const cells = rows.map((r) => columns.map(([, f]) => show(f(r))));
  const headings = columns.map(([h]) => h);
  const widths = headings.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)));
  const line = (values: string[]) =>
    values
      .map((v, i) => (i === values.length - 1 ? v : v.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  return `${[line(headings), ...cells.map(line)].join("\n")}\n`;
}

/** One object as "name: value" lines. */
export function fields(obj: Record<string, unknown>, extra: Record<string, unknown> = {}): string {
  const entries = Object.entries({ ...obj, ...extra }).filter(([, v]) => v !== undefined);
  const width = Math.max(...entries.map(([k]) => k.length));
  return `${entries.map(([k, v]) => `${`${k}:`.padEnd(width + 1)}  ${show(v)}`).join("\n")}\n`;
}

function show(v: unknown): string {
  if (v === null || v === undefined || v === "") return "-";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v).replace(/[\r\n\t]/g, " ");
}

/** "in 12s", "3s ago": how far an ISO time is from now. */
export function fromNow(iso: string | undefined, now = Date.now()): string {
  if (!iso) return "-";
  const ms = Date.parse(iso) - now;
  if (Number.isNaN(ms)) return iso;
  const s = Math.round(Math.abs(ms) / 1000);
  const span = s < 120 ? `${s}s` : s < 7200 ? `${Math.round(s / 60)}m` : `${Math.round(s / 3600)}h`;
  return ms >= 0 ? `in ${span}` : `${span} ago`;
}

/** A single object in the chosen mode. */
export function printOne(mode: OutputMode, obj: Record<string, unknown>, tableView = obj): void {
  if (mode === "json") write(`${JSON.stringify(obj, null, 2)}\n`);
  else if (mode === "ndjson") write(`${JSON.stringify(obj)}\n`);
  else write(fields(tableView));
}

/**
 * A list in the chosen mode: JSON is the API's document (`wrapper`), NDJSON one item per line,
 * the table one row per item (or a note that there is none).
 */
export function printList<T>(
  mode: OutputMode,
  items: readonly T[],
  wrapper: Record<string, unknown>,
  columns: ReadonlyArray<Column<T>>,
  none: string,
): void {
  if (mode === "json") write(`${JSON.stringify(wrapper, null, 2)}\n`);
  else if (mode === "ndjson") for (const item of items) write(`${JSON.stringify(item)}\n`);
  else if (items.length === 0) process.stderr.write(`${none}\n`);
  else write(table(items, columns));
}
