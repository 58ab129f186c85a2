import type { ServerResponse } from "node:http";
import type { Readable } from "node:stream";
import { memoryBytes } from "../core/memory-body.js";

/**
 * Object bodies bypass the Fetch API on their way out: a handler answers with a body-less
 * Response that carries a mark and leaves the Node stream with the connection's ServerResponse;
 * once every middleware has set its headers, `sendNodeBody` writes the head and pipes the stream
 * straight into the socket (backpressure, and a client that goes away destroys the stream).
 * Going through a Web ReadableStream instead costs a promise and a copy per chunk.
 */
const NODE_BODY = Symbol("fencegate.nodeBody");
const MARK = "x-fencegate-node-body";

type WithNodeBody = ServerResponse & { [NODE_BODY]?: Readable };

/** The Response a handler returns for `stream`, to be sent by `sendNodeBody`. */
export function nodeBodyResponse(
  outgoing: ServerResponse,
  stream: Readable,
  status: number,
  headers: Headers,
): Response {
  const previous = (outgoing as WithNodeBody)[NODE_BODY];
  previous?.destroy();
  (outgoing as WithNodeBody)[NODE_BODY] = stream;
  headers.set(MARK, "1");
  return new Response(null, { status, headers });
}

/**
 * A header value as the bytes to send, one latin1 character per byte: stored header text goes out
 * as UTF-8 (Node writes header strings as latin1 once a Buffer follows them). User metadata values
 * are bytes already (one latin1 character per byte received, src/s3-endpoint/protocol/metadata-encoding.ts)
 * and go out as they are, as on every other path.
 */
function wireValue(name: string, value: string): string {
  if (name.startsWith("x-amz-meta-")) return value;
  return /^[\x00-\x7f]*$/.test(value) ? value : Buffer.from(value, "utf8").toString("latin1");
}

/** What the Node adapter must not write: the answer already went out by `sendNodeBody`. */
function alreadySent(): Response {
  return new Response(null, { headers: { "x-hono-already-sent": "true" } });
}

/**
 * Sends the final response's Node body, if the handler left one; answers the Response the Node
 * adapter should write (one that says it was already sent, or `res` itself).
 */
export function sendNodeBody(res: Response, outgoing: ServerResponse): Response {
  const stream = (outgoing as WithNodeBody)[NODE_BODY];
  if (!stream) return res;
  delete (outgoing as WithNodeBody)[NODE_BODY];
  if (!res.headers.has(MARK) || res.body !== null) {
    // Something after the handler answered differently (an error): the stream is not sent.
    stream.destroy();
    return res;
  }
  const head: Record<string, string> = {};
  res.headers.forEach((value, name) => {
    if (name !== MARK) head[name] = wireValue(name, value);
  });
  if (outgoing.destroyed) {
    stream.destroy();
    return alreadySent();
  }
  outgoing.writeHead(res.status, head);
  pipeBody(stream, outgoing);
  return alreadySent();
}

/**
 * An error on either side ends both: a read error cuts the answer short (the client sees a body
 * shorter than its Content-Length), a client that goes away closes the stream (and its file).
 * What stream.pipeline does, without the AbortController it makes per call and the AbortError
 * (a DOMException, with its stack) it builds when every pipeline ends, on every GET.
 */
function pipeBody(stream: Readable, outgoing: ServerResponse): void {
  const inMemory = memoryBytes(stream);
  if (inMemory !== undefined) {
    // Bytes already in memory (an inline object) go out with the head, in one write.
    stream.destroy();
    outgoing.end(inMemory);
    return;
  }
  const stop = () => {
    if (!stream.readableEnded && !stream.destroyed) stream.destroy();
  };
  stream.once("error", (err) => outgoing.destroy(err));
  // (A listener of its own: pipe() rethrows a destination's error that nobody else listens to.)
  outgoing.on("error", stop);
  outgoing.once("close", stop);
  stream.pipe(outgoing);
}
