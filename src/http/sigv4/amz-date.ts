const ISO_BASIC = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/;

/** The last timestamp parsed: requests signed in the same second carry the same one. */
let last = { value: "", ms: 0 };

/** Milliseconds for an ISO 8601 basic timestamp (20260102T030405Z), or undefined if invalid. */
export function parseAmzDate(value: string): number | undefined {
  if (value === last.value) return last.ms;
  const m = ISO_BASIC.exec(value);
  if (!m) return undefined;
  const ms = Date.UTC(+m[1]!, +m[2]! - 1, +m[3]!, +m[4]!, +m[5]!, +m[6]!);
  // Reject rollovers such as month 13 or 25:00 instead of silently normalizing them.
  if (formatAmzDate(ms) !== value) return undefined;
  last = { value, ms };
  return ms;
}

export function formatAmzDate(ms: number): string {
  return new Date(ms)
    .toISOString()
    .replace(/[-:]/g, "")
    .replace(/\.\d{3}/, "");
}

/** An HTTP Date header (RFC 7231) as milliseconds, whole seconds only. */
export function parseHttpDate(value: string): number | undefined {
  const ms = Date.parse(value);
  return Number.isFinite(ms) && /[a-z]/i.test(value) ? ms : undefined;
}
