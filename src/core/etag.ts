/** ETags as clients write them: quoted or not, possibly weak (`W/"…"`). */
export function normalizeEtag(etag: string): string {
  return etag
    .trim()
    .replace(/^W\//, "")
    .replace(/^"(.*)"$/, "$1");
}

/** An If-Match / If-None-Match list (`*`, or comma-separated ETags) against an object's ETag. */
export function etagListMatches(list: string, etag: string | null): boolean {
  if (etag === null) return false;
  const want = normalizeEtag(etag);
  return list.split(",").some((candidate) => {
    const c = candidate.trim();
    return c === "*" || normalizeEtag(c) === want;
  });
}
