/**
 * Cuts a byte stream of the Redis protocol (RESP2 and RESP3) into whole frames, for the Redis
 * fault proxy: a client's commands (arrays of bulk strings, or inline commands) and a server's
 * replies. Frames are returned as the bytes that came, so that they can be passed on unchanged.
 */
export class RespReader {
  private chunks: Buffer[] = [];
  private length = 0;
  /** Bytes needed before a frame can be complete: no scan until then (large bulk strings). */
  private need = 0;

  /** `commands`: a client's side, where inline commands (a plain line) may come. */
  constructor(private readonly side: "commands" | "replies") {}

  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.length += chunk.length;
  }

  /** The next whole frame, or undefined until more bytes come. Throws on bytes that are not RESP. */
  next(): Buffer | undefined {
    if (this.length === 0 || this.length < this.need) return undefined;
    const buf = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.length);
    this.chunks = [buf];
    const scan = { need: 0 };
    const end = this.side === "commands" && buf[0] !== STAR ? inlineEnd(buf) : frameEnd(buf, 0, scan);
    if (end < 0) {
      this.need = Math.max(scan.need, buf.length + 1);
      return undefined;
    }
    this.need = 0;
    const rest = buf.subarray(end);
    this.chunks = rest.length > 0 ? [rest] : [];
    this.length = rest.length;
    return buf.subarray(0, end);
  }

  /** Everything buffered and not yet returned as a frame (when the stream stops being paired). */
  rest(): Buffer {
    const rest = Buffer.concat(this.chunks, this.length);
    this.chunks = [];
    this.length = 0;
    this.need = 0;
    return rest;
  }
}

const STAR = 0x2a;

/** The end of the inline command (one line) at the start of `buf`, or -1. */
function inlineEnd(buf: Buffer): number {
  const eol = buf.indexOf(0x0a);
  return eol < 0 ? -1 : eol + 1;
}

/**
 * The end offset of the frame that starts at `at`, or -1 while it is incomplete (`scan.need` is
 * then how many bytes it takes at least, when a length says so).
 */
function frameEnd(buf: Buffer, at: number, scan: { need: number }): number {
  if (at >= buf.length) return -1;
  const eol = buf.indexOf("\r\n", at);
  if (eol < 0) return -1;
  const type = String.fromCharCode(buf[at]!);
  const after = eol + 2;
  switch (type) {
    // One line: simple string, error, integer, null, double, boolean, big number.
    case "+":
    case "-":
    case ":":
    case "_":
    case ",":
    case "#":
    case "(":
      return after;
    // A length, then that many bytes: bulk string, bulk error, verbatim string.
    case "$":
    case "!":
    case "=": {
      const n = lengthOf(buf, at, eol);
      if (n < 0) return after;
      const end = after + n + 2;
      if (end > buf.length) {
        scan.need = end;
        return -1;
      }
      return end;
    }
    // A count, then that many frames: array, set, push; a map or attribute has pairs.
    case "*":
    case "~":
    case ">":
    case "%":
    case "|": {
      const n = lengthOf(buf, at, eol);
      if (n < 0) return after;
      let cursor = after;
      const items = type === "%" || type === "|" ? 2 * n : n;
      for (let i = 0; i < items; i++) {
        cursor = frameEnd(buf, cursor, scan);
        if (cursor < 0) return -1;
      }
      // An attribute comes before the reply it is about: they go together.
      return type === "|" ? frameEnd(buf, cursor, scan) : cursor;
    }
    default:
      throw new Error(
        `not RESP: ${JSON.stringify(buf.toString("latin1", at, Math.min(at + 40, buf.length)))}`,
      );
  }
}

function lengthOf(buf: Buffer, at: number, eol: number): number {
  const n = Number(buf.toString("latin1", at + 1, eol));
  if (!Number.isInteger(n)) throw new Error(`not a RESP length: ${buf.toString("latin1", at, eol)}`);
  return n;
}

/** The arguments of a command frame (an array of bulk strings, or an inline line). */
export function commandArgs(frame: Buffer): string[] {
  if (frame[0] !== STAR) {
    return frame.toString("utf8").trim().split(/\s+/).filter(Boolean);
  }
  const args: string[] = [];
  let eol = frame.indexOf("\r\n");
  const count = Number(frame.toString("latin1", 1, eol));
  let at = eol + 2;
  for (let i = 0; i < count; i++) {
    eol = frame.indexOf("\r\n", at);
    const n = Number(frame.toString("latin1", at + 1, eol));
    args.push(frame.toString("utf8", eol + 2, eol + 2 + n));
    at = eol + 2 + n + 2;
  }
  return args;
}

/** A short account of a reply for the record: its first line, e.g. "+OK", ":3", "-NOSCRIPT …". */
export function replySummary(frame: Buffer): string {
  const eol = frame.indexOf("\r\n");
  const line = frame.toString("utf8", 0, Math.min(eol < 0 ? frame.length : eol, 120));
  // A short bulk string says more by its content than by its length.
  if (line.startsWith("$") && Number(line.slice(1)) >= 0 && Number(line.slice(1)) <= 60) {
    return `$${frame.toString("utf8", eol + 2, frame.length - 2)}`;
  }
  return line;
}
