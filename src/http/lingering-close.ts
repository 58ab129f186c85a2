import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";

/** How long a connection may linger after its answer, its request body still arriving. */
export const LINGER_MS = 5_000;
/** How much of a request body answered early is read and discarded before the connection is cut. */
const LINGER_BYTES = 64 * 1024 * 1024;

/**
 * A request answered before its body was read to the end (a body over an operation's limit, a
 * write refused before its body is needed, a request refused before routing): the rest of the
 * body is read and discarded, for at most LINGER_MS and LINGER_BYTES, before the connection is
 * closed. Closing a socket whose peer is still sending makes the kernel answer with a reset,
 * and a reset makes the client drop the answer it had not read yet: the client would see EPIPE
 * or ECONNRESET instead of the S3 error. When the connection stays open (keep-alive), the next
 * request starts where the discarded body ends; when it closes (the client sent Connection:
 * close, or the answer did), the gateway's side is shut first and the socket is destroyed once
 * the body has arrived.
 */
export function lingerAfterEarlyAnswer(req: IncomingMessage, res: ServerResponse): void {
  // Before Node's own finish handler, which closes the connection the answer ends.
  res.prependOnceListener("finish", () => {
    if (req.complete || req.destroyed) return;
    const socket = req.socket as Socket;
    let read = 0;
    const cut = () => socket.destroy();
    const timer = setTimeout(cut, LINGER_MS);
    timer.unref();
    const done = () => {
      clearTimeout(timer);
      // The instance override ends with this request; the prototype's method shows through again.
      delete (socket as { destroySoon?: unknown }).destroySoon;
    };
    req.unpipe();
    req.on("data", (chunk: Buffer) => {
      read += chunk.length;
      if (read > LINGER_BYTES) cut();
    });
    req.once("end", done);
    socket.once("close", done);
    // Node calls destroySoon when the answer closes the connection: end our side now, destroy
    // once the body has been read (the peer's data no longer meets a closed socket).
    socket.destroySoon = () => {
      socket.end();
      if (req.complete) socket.destroy();
      else req.once("end", () => socket.destroy());
    };
    req.resume();
  });
}
