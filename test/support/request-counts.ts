import type { HttpSeen } from "./fault-proxy.js";

/**
 * Counts the requests a proxy saw from index `from` on, as "METHOD what" → count, where `what`
 * names the kind of store object (for S3: the record, the blob, the bucket marker; for Azure:
 * the blob and its `comp`), so that a test can assert the round trips of one operation.
 */
export function countRequests(
  seen: readonly HttpSeen[],
  from: number,
  classify: (entry: HttpSeen) => string,
): { total: number; by: Record<string, number>; lines: string[] } {
  const by: Record<string, number> = {};
  const lines: string[] = [];
  for (const entry of seen.slice(from)) {
    const what = `${entry.method} ${classify(entry)}`;
    by[what] = (by[what] ?? 0) + 1;
    lines.push(
      `${entry.method} ${entry.path}${entry.query ? `?${entry.query}` : ""} -> ${entry.status ?? entry.error}`,
    );
  }
  return { total: seen.length - from, by, lines };
}
