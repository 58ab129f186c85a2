/** One line of the benchmark table: fencegate's figure next to its baseline from the same run. */
export type Row = {
  name: string;
  value: number;
  baselineName: string;
  baseline: number;
  unit: string;
  /**
   * How the figure is judged: `ratio >= x` (value / baseline, higher is better), `ratio <= x`, or
   * `value <= x` (an absolute bound, e.g. milliseconds or MiB).
   */
  target?: { kind: "ratio>=" | "ratio<=" | "value<="; bound: number };
};

export const ratioOf = (row: Row): number => row.value / row.baseline;

export function met(row: Row): boolean | null {
  if (!row.target) return null;
  const { kind, bound } = row.target;
  if (kind === "ratio>=") return ratioOf(row) >= bound;
  if (kind === "ratio<=") return ratioOf(row) <= bound;
  return row.value <= bound;
}

const fmt = (n: number): string =>
  !Number.isFinite(n)
    ? String(n)
    : Math.abs(n) >= 100
      ? n.toFixed(0)
      : Math.abs(n) >= 10
        ? n.toFixed(1)
        : n.toFixed(2);

function targetText(row: Row): string {
  if (!row.target) return "";
  const { kind, bound } = row.target;
  return kind === "value<=" ? `<= ${bound} ${row.unit}` : `${kind.slice(5)} ${bound}x`;
}

/** A Markdown table (readable on a terminal too). */
export function table(rows: readonly Row[]): string {
  const header = ["benchmark", "fencegate", "baseline", "ratio", "target", "met"];
  const lines = rows.map((r) => {
    const m = met(r);
    return [
      r.name,
      `${fmt(r.value)} ${r.unit}`,
      `${fmt(r.baseline)} ${r.unit} (${r.baselineName})`,
      Number.isFinite(ratioOf(r)) ? fmt(ratioOf(r)) : "–",
      targetText(r),
      m === null ? "" : m ? "yes" : "NO",
    ];
  });
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(" | ")} |`;
  return [line(header), `|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`, ...lines.map(line)].join("\n");
}
