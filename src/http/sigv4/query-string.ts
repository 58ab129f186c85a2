import { reencodeComponent } from "./uri-encode.js";

/** One query parameter exactly as received: name and value still percent-encoded. */
export type RawQueryParam = readonly [name: string, value: string];

/**
 * Splits the query string exactly as received (without the leading "?") into raw pairs in
 * received order. Nothing is decoded here: signing needs the received bytes.
 */
export function parseRawQuery(rawQuery: string): RawQueryParam[] {
  const q = rawQuery.startsWith("?") ? rawQuery.slice(1) : rawQuery;
  const params: RawQueryParam[] = [];
  for (const part of q.split("&")) {
    if (part === "") continue;
    const eq = part.indexOf("=");
    params.push(eq < 0 ? [part, ""] : [part.slice(0, eq), part.slice(eq + 1)]);
  }
  return params;
}

/** A decoded query component; "+" stays "+" (SDKs send a plus sign as %2B, a space as %20). */
export function decodeQueryComponent(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

/**
 * Canonical query string candidates. SDKs encode a space as %20 and a plus as %2B, so a
 * literal "+" is first taken as a plus sign; form-style encoders send a space as "+" and sign
 * it as %20, so when a "+" is present the space reading is tried second.
 */
export function canonicalQueryCandidates(
  params: readonly RawQueryParam[],
  exclude: (rawName: string) => boolean = () => false,
): string[] {
  const kept = params.filter(([name]) => !exclude(name));
  const plusAsPlus = canonicalQuery(kept, false);
  if (!kept.some(([n, v]) => n.includes("+") || v.includes("+"))) return [plusAsPlus];
  return [plusAsPlus, canonicalQuery(kept, true)];
}

function canonicalQuery(params: readonly RawQueryParam[], plusIsSpace: boolean): string {
  const encoded = params.map(
    ([n, v]) => [reencodeComponent(n, plusIsSpace), reencodeComponent(v, plusIsSpace)] as const,
  );
  // Code-point order of the encoded (pure ASCII) strings: name first, then value.
  encoded.sort(([an, av], [bn, bv]) => (an < bn ? -1 : an > bn ? 1 : av < bv ? -1 : av > bv ? 1 : 0));
  return encoded.map(([n, v]) => `${n}=${v}`).join("&");
}
