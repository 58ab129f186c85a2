import type { RequestHeaders } from "./request-headers.js";

/**
 * The canonical headers block for the signed header names, in the order given (SignedHeaders
 * is itself sorted by the signer). Values are trimmed and inner runs of spaces and tabs
 * collapsed; repeated headers are joined with ",". A signed header that is absent gets an
 * empty value, which simply makes the signature fail.
 */
export function canonicalHeaders(headers: RequestHeaders, signedHeaders: readonly string[]): string {
  return signedHeaders.map((name) => `${name}:${canonicalValue(headers[name])}\n`).join("");
}

function canonicalValue(value: string | readonly string[] | undefined): string {
  if (value === undefined) return "";
  const values = typeof value === "string" ? [value] : value;
  return values.map((v) => v.replace(/[ \t]+/g, " ").trim()).join(",");
}
