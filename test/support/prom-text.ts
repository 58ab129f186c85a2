/**
 * A strict parser of the Prometheus text exposition format (version 0.0.4), for the tests: it
 * throws on anything Prometheus would refuse or that breaks the format's rules (a malformed
 * line, a bad metric or label name, a bad escape, a sample before or outside its family, a
 * second TYPE or HELP, a repeated series, a histogram whose buckets are not cumulative or whose
 * +Inf bucket differs from its count).
 */

export type Sample = { name: string; labels: Record<string, string>; value: number };
export type Family = { name: string; type: string; help: string | undefined; samples: Sample[] };

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set(["counter", "gauge", "histogram", "summary", "untyped"]);

export function parsePrometheusText(text: string): Map<string, Family> {
  const families = new Map<string, Family>();
  const closed = new Set<string>();
  const seriesSeen = new Set<string>();
  let current: Family | undefined;
  const lines = text.split("\n");
  const fail = (n: number, why: string): never => {
    throw new Error(`exposition line ${n + 1}: ${why}: ${JSON.stringify(lines[n])}`);
  };
  const familyOf = (name: string, n: number): Family => {
    let family = families.get(name);
    if (!family) {
      if (closed.has(name)) fail(n, `metric family ${name} appears in two places`);
      family = { name, type: "untyped", help: undefined, samples: [] };
      families.set(name, family);
    }
    if (current && current !== family) closed.add(current.name);
    if (closed.has(name)) fail(n, `metric family ${name} appears in two places`);
    current = family;
    return family;
  };

  lines.forEach((line, n) => {
    if (line.trim() === "") return;
    if (line.startsWith("#")) {
      const m = /^#\s+(HELP|TYPE)\s+(\S+)(?:\s(.*))?$/.exec(line);
      if (!m) return; // a comment
      const [, keyword, name, rest = ""] = m;
      if (!METRIC_NAME.test(name!)) fail(n, `bad metric name ${name}`);
      const family = familyOf(name!, n);
      if (keyword === "TYPE") {
        if (!TYPES.has(rest.trim())) fail(n, `unknown type ${rest}`);
        if (family.type !== "untyped" || family.samples.length > 0) fail(n, "TYPE after samples or twice");
        family.type = rest.trim();
      } else {
        if (family.help !== undefined) fail(n, "HELP twice");
        family.help = unescapeHelp(rest, () => fail(n, "bad escape in HELP"));
      }
      return;
    }
    const sample = parseSample(line, () => fail(n, "malformed sample"));
    const base = familyName(sample.name, current);
    if (!current || current.name !== base) {
      // A sample of a family without TYPE: its own untyped family.
      familyOf(base, n);
    }
    const family = current!;
    const key = `${sample.name}{${Object.entries(sample.labels)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
      .join(",")}}`;
    if (seriesSeen.has(key)) fail(n, `series ${key} twice`);
    seriesSeen.add(key);
    if (family.type === "counter" && !(sample.value >= 0)) fail(n, "a counter below 0");
    family.samples.push(sample);
  });

  for (const family of families.values()) if (family.type === "histogram") checkHistogram(family);
  return families;
}

/** The family a sample belongs to: histogram and summary samples carry suffixes. */
function familyName(sample: string, current: Family | undefined): string {
  if (current && (current.type === "histogram" || current.type === "summary")) {
    for (const suffix of ["_bucket", "_sum", "_count"]) {
      if (sample === `${current.name}${suffix}`) return current.name;
    }
  }
  return sample;
}

function parseSample(line: string, fail: () => never): Sample {
  const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+(-?\d+))?$/.exec(line);
  if (!m) fail();
  const [, name, rawLabels, rawValue] = m!;
  const labels: Record<string, string> = {};
  if (rawLabels !== undefined) {
    let rest = rawLabels.slice(1, -1);
    while (rest.length > 0) {
      const lm = /^\s*([^=\s]+)\s*=\s*"/.exec(rest);
      if (!lm) fail();
      const labelName = lm![1]!;
      if (!LABEL_NAME.test(labelName) || labelName in labels) fail();
      let i = lm![0].length;
      let value = "";
      for (;;) {
        if (i >= rest.length) fail();
        const ch = rest[i]!;
        if (ch === "\\") {
          const next = rest[i + 1];
          if (next === "\\") value += "\\";
          else if (next === '"') value += '"';
          else if (next === "n") value += "\n";
          else fail();
          i += 2;
        } else if (ch === '"') {
          i++;
          break;
        } else {
          value += ch;
          i++;
        }
      }
      labels[labelName] = value;
      rest = rest.slice(i).replace(/^\s*/, "");
      if (rest.startsWith(",")) rest = rest.slice(1).replace(/^\s*/, "");
      else if (rest.length > 0) fail();
    }
  }
  return { name: name!, labels, value: parseValue(rawValue!, fail) };
}

/** A value as Prometheus reads it (Go's ParseFloat: NaN and Inf in any case). */
function parseValue(raw: string, fail: () => never): number {
  const special = raw.toLowerCase();
  if (special === "+inf" || special === "inf" || special === "+infinity" || special === "infinity") {
    return Number.POSITIVE_INFINITY;
  }
  if (special === "-inf" || special === "-infinity") return Number.NEGATIVE_INFINITY;
  if (special === "nan") return Number.NaN;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(raw)) fail();
  return Number(raw);
}

function unescapeHelp(text: string, fail: () => never): string {
  return text.replace(/\\(.?)/g, (_, c: string) => {
    if (c === "\\") return "\\";
    if (c === "n") return "\n";
    return fail();
  });
}

/** Per series (labels without `le`): buckets cumulative, +Inf present and equal to _count. */
function checkHistogram(family: Family): void {
  const series = new Map<string, { buckets: Array<[number, number]>; count?: number }>();
  const keyOf = (labels: Record<string, string>) =>
    JSON.stringify(
      Object.entries(labels)
        .filter(([k]) => k !== "le")
        .sort(([a], [b]) => a.localeCompare(b)),
    );
  for (const s of family.samples) {
    const key = keyOf(s.labels);
    const entry = series.get(key) ?? { buckets: [] };
    series.set(key, entry);
    if (s.name === `${family.name}_bucket`) {
      if (s.labels.le === undefined) throw new Error(`${family.name}: a bucket without le`);
      entry.buckets.push([
        parseValue(s.labels.le, () => {
          throw new Error(`${family.name}: bad le ${s.labels.le}`);
        }),
        s.value,
      ]);
    } else if (s.name === `${family.name}_count`) entry.count = s.value;
  }
  for (const [key, { buckets, count }] of series) {
    const sorted = [...buckets].sort((a, b) => a[0] - b[0]);
    for (let i = 1; i < sorted.length; i++) {
      if (sorted[i]![1] < sorted[i - 1]![1]) throw new Error(`${family.name}${key}: buckets not cumulative`);
    }
    const inf = sorted.at(-1);
    if (!inf || inf[0] !== Number.POSITIVE_INFINITY) throw new Error(`${family.name}${key}: no +Inf bucket`);
    if (count === undefined || inf[1] !== count)
      throw new Error(`${family.name}${key}: +Inf bucket is not _count`);
  }
}

/** The value of the one sample named `name` whose labels include `labels`; undefined if none. */
export function sampleValue(
  families: Map<string, Family>,
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  for (const family of families.values()) {
    for (const s of family.samples) {
      if (s.name !== name) continue;
      if (Object.entries(labels).every(([k, v]) => s.labels[k] === v)) return s.value;
    }
  }
  return undefined;
}

/** The sum of every sample named `name` whose labels include `labels`. */
export function sumOf(
  families: Map<string, Family>,
  name: string,
  labels: Record<string, string> = {},
): number {
  let sum = 0;
  for (const family of families.values()) {
    for (const s of family.samples) {
      if (s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)) sum += s.value;
    }
  }
  return sum;
}
