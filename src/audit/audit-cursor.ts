import { DomainError } from "../core/errors.js";

// A cursor is the last seq a page returned, wrapped so clients treat it as opaque (and so a
// later format can be told apart by its version tag).
const PATTERN = /^a1:(\d{1,15})$/;

export function encodeCursor(seq: number): string {
  return Buffer.from(`a1:${seq}`, "utf8").toString("base64url");
}

/** The seq after which the next page starts. Throws InvalidArgument for anything we did not issue. */
export function decodeCursor(cursor: string): number {
  const match = /^[A-Za-z0-9_-]+$/.test(cursor)
    ? PATTERN.exec(Buffer.from(cursor, "base64url").toString("utf8"))
    : null;
  if (!match) throw new DomainError("InvalidArgument", "the audit cursor is malformed");
  return Number(match[1]);
}
