import { DomainError } from "../../core/errors.js";

type ChunkedParserEvents = {
  /** A chunk header was read; size 0 is the final chunk. May throw to reject it. */
  chunkStart(size: number, signature: string | undefined): void;
  /** Decoded bytes of the current chunk (a view into the input: consume or copy at once). */
  data(bytes: Buffer): void;
  /** The current chunk's data is complete (called for the final, empty chunk too). */
  chunkEnd(): void;
};

export type Trailer = readonly [name: string, value: string];

const MAX_LINE_BYTES = 4096;
const MAX_TRAILERS = 16;

type State = "size" | "data" | "data-cr" | "data-lf" | "trailer" | "done";

const malformed = (why: string) => new DomainError("InvalidRequest", `Malformed aws-chunked body: ${why}.`);

/**
 * Incremental aws-chunked decoder: `<hex size>[;chunk-signature=…]\r\n<data>\r\n` … `0…\r\n`,
 * trailer lines, empty line. It holds at most one header line (bounded) and never buffers
 * data, so input may be split anywhere, down to single bytes.
 */
export class AwsChunkedParser {
  private state: State = "size";
  private line: Buffer[] = [];
  private lineBytes = 0;
  private remaining = 0;
  private readonly trailerList: Trailer[] = [];

  constructor(private readonly events: ChunkedParserEvents) {}

  write(input: Buffer): void {
    let i = 0;
    while (i < input.length) {
      switch (this.state) {
        case "size":
        case "trailer":
          i = this.readLine(input, i);
          break;
        case "data": {
          const n = Math.min(this.remaining, input.length - i);
          this.events.data(input.subarray(i, i + n));
          this.remaining -= n;
          i += n;
          if (this.remaining === 0) this.state = "data-cr";
          break;
        }
        case "data-cr":
          if (input[i++] !== 0x0d) throw malformed("chunk data is not followed by CRLF");
          this.state = "data-lf";
          break;
        case "data-lf":
          if (input[i++] !== 0x0a) throw malformed("chunk data is not followed by CRLF");
          this.events.chunkEnd();
          this.state = "size";
          break;
        case "done":
          // Tolerate stray line ends after the terminating empty line, nothing else.
          if (input[i] !== 0x0d && input[i] !== 0x0a) throw malformed("data after the final chunk");
          i++;
          break;
      }
    }
  }

  /** Call at end of input: returns the trailers, or throws if the body stopped short. */
  end(): Trailer[] {
    // A missing final empty line after complete trailer lines is accepted (nothing is lost).
    if (this.state === "done" || (this.state === "trailer" && this.lineBytes === 0)) return this.trailerList;
    throw new DomainError("IncompleteBody", "The request body terminated unexpectedly");
  }

  private readLine(input: Buffer, from: number): number {
    const nl = input.indexOf(0x0a, from);
    const end = nl < 0 ? input.length : nl;
    if (end > from) {
      this.lineBytes += end - from;
      // One extra byte for the CR of CRLF.
      if (this.lineBytes > MAX_LINE_BYTES + 1) throw malformed("header line too long");
      // Copied: the caller may reuse its buffer once write() returns.
      this.line.push(Buffer.from(input.subarray(from, end)));
    }
    if (nl < 0) return input.length;
    let text = Buffer.concat(this.line).toString("latin1");
    if (text.endsWith("\r")) text = text.slice(0, -1);
    this.line = [];
    this.lineBytes = 0;
    if (this.state === "size") this.sizeLine(text);
    else this.trailerLine(text);
    return nl + 1;
  }

  private sizeLine(text: string): void {
    const [sizeText = "", ...extensions] = text.split(";");
    if (!/^[0-9a-fA-F]{1,13}$/.test(sizeText)) throw malformed(`bad chunk size "${sizeText.slice(0, 32)}"`);
    const size = Number.parseInt(sizeText, 16);
    let signature: string | undefined;
    for (const ext of extensions) {
      const eq = ext.indexOf("=");
      if (eq > 0 && ext.slice(0, eq).trim() === "chunk-signature") signature = ext.slice(eq + 1).trim();
    }
    this.events.chunkStart(size, signature);
    if (size === 0) {
      this.events.chunkEnd();
      this.state = "trailer";
    } else {
      this.remaining = size;
      this.state = "data";
    }
  }

  private trailerLine(text: string): void {
    if (text === "") {
      this.state = "done";
      return;
    }
    const colon = text.indexOf(":");
    if (colon <= 0) throw malformed("bad trailer line");
    if (this.trailerList.length >= MAX_TRAILERS) throw malformed("too many trailers");
    this.trailerList.push([text.slice(0, colon).trim().toLowerCase(), text.slice(colon + 1).trim()]);
  }
}
