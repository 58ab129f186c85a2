/** A `Range: bytes=…` header. S3 serves one range; anything it cannot parse is ignored (whole object). */
type RangeRequest = { start?: number; end?: number; suffix?: number };

export function parseRange(value: string): RangeRequest | undefined {
  const m = /^bytes=(\d*)-(\d*)$/.exec(value.trim());
  if (!m) return undefined;
  const [, a = "", b = ""] = m;
  if (a === "" && b === "") return undefined;
  if (a === "") return { suffix: Number(b) };
  const start = Number(a);
  if (b === "") return { start };
  const end = Number(b);
  if (end < start) return undefined;
  return { start, end };
}
