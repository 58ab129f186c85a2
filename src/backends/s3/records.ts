import { randomBytes } from "node:crypto";
import type { Checksums, ObjectMetadata } from "../storage-backend.js";

/**
 * An object's record: the commit point of every write to it. Its bytes always hold a fresh
 * nonce, so its store ETag is unique to one write: If-Match on it is a true compare-and-swap,
 * and a parsed record can be cached by that ETag across replicas.
 */

export type LiveVersion = {
  /** The blob id (`<m>d/<blob>`). */
  blob: string;
  size: number;
  /** The ETag fencegate reports, quoted: MD5 hex, or `<hex>-N` for a multipart completion. */
  etag: string;
  lastModified: number;
  metadata: ObjectMetadata;
  checksums?: Checksums;
  /** The multipart upload it completes, for a completion retried after its answer was lost. */
  upload?: string;
};

export type ObjectRecord = {
  v: 1;
  key: string;
  /** The HCT; null when no fenced write ever reached the key. */
  hct: number | null;
  nonce: string;
  /**
   * live: the bytes are `live.blob`. deleted: a tombstone (it also hides a plain object at the
   * key, which fencegate never deletes). plain: only an HCT; the bytes are the plain object at
   * the key, when there is one.
   */
  state: "live" | "deleted" | "plain";
  live?: LiveVersion;
  /** When the record was written (fencegate's clock). */
  written: number;
  /** The id of the write that made this record (absent on records older than write ids). */
  w?: string;
  /** The ids of the writes before it, oldest first (with `w`, at most WRITE_HISTORY). */
  h?: string[];
  /**
   * The garbage collector's mark: blobs of this key staged before this time (ms, the stager's
   * clock, from the blob id) may be collected, so no commit may name them any more.
   */
  gc?: number;
  /** The note of the last write that put or deleted the object (FencedCommit.note). */
  a?: string;
  /**
   * A fenced transaction's write staged over this state (commit-port.ts Pending): visible only
   * once the transaction's record (`<m>t/<id>`) says committed and lists it.
   */
  p?: StoredPending;
};

export type StoredPending = {
  tx: string;
  token: number;
  kind: "put" | "delete";
  live?: LiveVersion;
  /** The staging write's id. */
  w: string;
  a?: string;
};

/** A record as read, with the store ETag that a replacement's If-Match names. */
export type ReadRecord = { record: ObjectRecord; etag: string };

export const newNonce = (): string => randomBytes(12).toString("base64url");

export function serializeRecord(record: ObjectRecord): Buffer {
  return Buffer.from(JSON.stringify(record), "utf8");
}

/** Parses a record; throws when the bytes are not one (a foreign object under the meta prefix). */
export function parseRecord(text: string, where: string): ObjectRecord {
  const value = JSON.parse(text) as Partial<ObjectRecord>;
  const ok =
    value !== null &&
    typeof value === "object" &&
    value.v === 1 &&
    typeof value.key === "string" &&
    (value.hct === null || Number.isSafeInteger(value.hct)) &&
    typeof value.nonce === "string" &&
    (value.w === undefined || typeof value.w === "string") &&
    (value.h === undefined || (Array.isArray(value.h) && value.h.every((id) => typeof id === "string"))) &&
    (value.gc === undefined || Number.isSafeInteger(value.gc)) &&
    (value.a === undefined || typeof value.a === "string") &&
    (value.p === undefined || isPending(value.p)) &&
    (value.state === "deleted" ||
      value.state === "plain" ||
      (value.state === "live" && typeof value.live?.blob === "string"));
  if (!ok) throw new Error(`${where} is not a fencegate record`);
  return value as ObjectRecord;
}

function isPending(p: StoredPending): boolean {
  return (
    typeof p === "object" &&
    p !== null &&
    typeof p.tx === "string" &&
    Number.isSafeInteger(p.token) &&
    typeof p.w === "string" &&
    (p.kind === "delete" || (p.kind === "put" && typeof p.live?.blob === "string"))
  );
}

/**
 * The record as it is once its pending write is rolled forward (its transaction committed):
 * what a reader serves before anyone has written that roll-forward.
 */
export function rolledForward(record: ObjectRecord): ObjectRecord {
  const p = record.p;
  if (!p) return record;
  const { p: _, live: __, ...rest } = record;
  return {
    ...rest,
    hct: Math.max(record.hct ?? p.token, p.token),
    state: p.kind === "put" ? "live" : "deleted",
    ...(p.kind === "put" && p.live ? { live: p.live } : {}),
    ...(p.a !== undefined ? { a: p.a } : {}),
  };
}

/** The record without its pending write (its transaction did not commit it). */
export function withoutPending(record: ObjectRecord): ObjectRecord {
  if (!record.p) return record;
  const { p: _, ...rest } = record;
  return rest;
}

/** The live version a record describes, or null (tombstone, or plain). */
export const liveOf = (record: ObjectRecord | null): LiveVersion | null =>
  record?.state === "live" && record.live ? record.live : null;

/** The ids of the writes that made a record and the records before it, oldest first. */
export function writesOf(record: ObjectRecord | null): string[] {
  if (!record) return [];
  const before = record.h ?? [];
  return record.w === undefined ? [...before] : [...before, record.w];
}
