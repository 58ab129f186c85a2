import { DomainError } from "../core/errors.js";
import type { ByteRange } from "./storage-backend.js";

type RangeRequest = { start?: number; end?: number; suffix?: number };

/**
 * Resolves a requested byte range against an object's size the way S3 does:
 * `suffix` is the last N bytes (the whole object when N >= size), `end` is clamped to the last
 * byte, a start at or beyond the size is InvalidRange (so is any range on an empty object).
 * A range whose end is before its start is ignored (undefined: serve the whole object), as
 * RFC 9110 and S3 ignore a syntactically invalid Range header.
 */
export function resolveRange(request: RangeRequest | undefined, size: number): ByteRange | undefined {
  if (!request) return undefined;
  const { start, end, suffix } = request;
  for (const value of [start, end, suffix]) {
    if (value !== undefined && !(Number.isSafeInteger(value) && value >= 0)) {
      throw new DomainError("InvalidArgument", "range bounds must be non-negative integers");
    }
  }
  if (suffix !== undefined) {
    if (start !== undefined || end !== undefined) {
      throw new DomainError("InvalidArgument", "a suffix range cannot also have a start or an end");
    }
    if (suffix === 0 || size === 0) throw unsatisfiable(size);
    return { start: Math.max(0, size - suffix), end: size - 1 };
  }
  if (start === undefined && end === undefined) return undefined;
  const first = start ?? 0;
  if (end !== undefined && end < first) return undefined;
  if (first >= size) throw unsatisfiable(size);
  return { start: first, end: Math.min(end ?? size - 1, size - 1) };
}

const unsatisfiable = (size: number) =>
  new DomainError("InvalidRange", "the requested range is not satisfiable", { size });
