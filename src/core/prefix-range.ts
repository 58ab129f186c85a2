/**
 * The least string above every string that starts with `prefix`, in code point order (which is
 * also UTF-8 byte order, SQLite's BINARY collation), or null when there is none. `s >= prefix AND
 * s < prefixUpperBound(prefix)` is a "starts with" test that can use an index and, unlike LIKE,
 * gives `%` and `_` no special meaning. A listing also uses it to jump past every key under a
 * common prefix instead of reading them.
 */
export function prefixUpperBound(prefix: string): string | null {
  const points = Array.from(prefix, (c) => c.codePointAt(0)!);
  while (points.length > 0) {
    const last = points.pop()!;
    if (last < 0x10ffff) {
      // Surrogate code points never occur in stored (UTF-8) text: step over them.
      const next = last + 1 === 0xd800 ? 0xe000 : last + 1;
      return String.fromCodePoint(...points, next);
    }
  }
  return null;
}
