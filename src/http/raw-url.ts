/** A request target as received: its path and its query string, both still encoded. */
export function splitRawUrl(url: string | undefined): { rawPath: string; rawQuery: string } {
  const target = url ?? "/";
  const q = target.indexOf("?");
  return q === -1
    ? { rawPath: target, rawQuery: "" }
    : { rawPath: target.slice(0, q), rawQuery: target.slice(q + 1) };
}
