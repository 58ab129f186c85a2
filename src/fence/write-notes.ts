import type { AuditDraft, AuditLog } from "../audit/audit-log.js";

/**
 * A write's note: what a compare-and-swap backend keeps with the state the write makes
 * (FencedCommit.note), so that whoever learns first that the write landed records it, once: its
 * own gateway after the commit, or a grant that fences the object before a newer lease writes
 * there (its gateway may be paused between its commit and its record). Either way the record
 * of an object's write comes before the records of the writes after it. A write that is about to
 * land over another learns too that the other landed, and records it before it is sent
 * (FencedCommit.predecessor): so the state's one note is enough, however many writes came before.
 */
type WriteNote = {
  /** The request id. */
  r: string;
  /** The operation (PutObject, DeleteObject, ...). */
  o: string;
  /** Token and lease id (null for an unfenced write). */
  t: number | null;
  l: string | null;
  /** The lease's owner and the access key that wrote. */
  w: string | null;
  p: string | null;
  /** The gateway that sent the write. */
  g?: string;
};

export function encodeNote(note: WriteNote): string {
  return JSON.stringify(note);
}

function decodeNote(text: string): WriteNote | null {
  try {
    const n = JSON.parse(text) as Partial<WriteNote>;
    return typeof n.r === "string" && typeof n.o === "string" ? (n as WriteNote) : null;
  } catch {
    return null;
  }
}

/** The key under which a write's outcome is recorded once (AuditLog.appendOnce). */
export const outcomeKey = (requestId: string, bucket: string, key: string) => `${requestId} ${bucket}/${key}`;

/** The key of a write's "unknown" record (appended once, and never after its outcome's). */
export const unknownKey = (once: string) => `${once} unknown`;

/** The accepted record of a write whose note the object's state holds. */
function landedRecord(note: WriteNote, bucket: string, key: string): AuditDraft {
  return {
    op: note.o,
    bucket,
    key,
    prefix: null,
    token: note.t,
    leaseId: note.l,
    owner: note.w,
    principal: note.p,
    requestId: note.r,
    decision: "accepted",
    reason: null,
    highestToken: note.t,
    ...(note.g !== undefined ? { gateway: note.g } : {}),
  };
}

/**
 * The fencing of an object for a grant or a break: its HCT raised above every token its ended
 * leases' commits carry, then the record of the last write that landed there, if nobody made it
 * yet (its gateway may be paused between its commit and its record): so that it comes before
 * the records of the newer lease's writes.
 */
export function fencingWithRecords(opts: {
  raise: (bucket: string, key: string, token: number) => Promise<unknown>;
  noteOf: (bucket: string, key: string) => Promise<string | null>;
  audit: AuditLog;
}): (bucket: string, key: string, token: number) => Promise<void> {
  return async (bucket, key, token) => {
    await opts.raise(bucket, key, token);
    const text = await opts.noteOf(bucket, key);
    if (text !== null) await recordLanded(opts.audit, text, bucket, key);
  };
}

/**
 * Appends the accepted record of the write whose note the object's state holds, unless it is
 * there already (AuditLog.appendOnce) or `known` says it is. Answers the key it is recorded under
 * (null for a note that cannot be read).
 */
export async function recordLanded(
  audit: AuditLog,
  text: string,
  bucket: string,
  key: string,
  known: (once: string) => boolean = () => false,
): Promise<string | null> {
  const note = decodeNote(text);
  if (!note) return null;
  const once = outcomeKey(note.r, bucket, key);
  if (!known(once)) await audit.appendOnce(landedRecord(note, bucket, key), once);
  return once;
}
