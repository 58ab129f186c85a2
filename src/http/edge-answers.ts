import { type IncomingMessage, type Server, type ServerResponse, STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import { DomainError } from "../core/errors.js";
import type { Logger } from "../core/log.js";
import { LINGER_MS } from "./lingering-close.js";
import { newRequestId } from "./request-id.js";

/** A refusal rendered in the wire format of the endpoint a request was meant for. */
export type EdgeAnswer = { status: number; contentType: string; body: string };

/**
 * Renders a refusal for a request target (path and query as received, when known) and Host
 * header: S3 XML or the lease API's JSON, decided by the caller, which knows the routing.
 */
export type EdgeRenderer = (
  err: DomainError,
  where: { target: string | undefined; host: string | undefined },
  requestId: string,
) => EdgeAnswer;

/**
 * Answers Node would otherwise produce by itself (a bare status line, no request id, or a
 * dropped connection) are given the gateway's own form:
 * - requests the HTTP parser rejects: oversized header sections, broken framing (Content-Length
 *   with Transfer-Encoding), bad request lines, and header or request timeouts;
 * - CONNECT, which Node answers by closing the connection;
 * - an `Expect` other than 100-continue, which Node answers with a bare 417: answered 417
 *   `ExpectationFailed` in the endpoint's form, as S3 answers it, without reading the body, and
 *   the connection is closed (the unread body must not be taken for the next request).
 */
export function installEdgeAnswers(server: Server, opts: { log: Logger; render: EdgeRenderer }): void {
  const { log, render } = opts;
  server.on("clientError", (err: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket: Duplex) => {
    if (!socket.writable || err.code === "ECONNRESET" || err.code === "EPIPE") {
      socket.destroy();
      return;
    }
    const refusal = clientErrorRefusal(err.code);
    const where = requestLineOf(err.rawPacket);
    log.info({ code: err.code, answer: refusal.code }, "malformed HTTP request refused");
    const requestId = newRequestId();
    writeAndClose(socket, render(refusal, where, requestId), requestId);
  });
  server.on("connect", (req: IncomingMessage, socket: Duplex) => {
    log.info({ method: req.method }, "CONNECT refused");
    const refusal = new DomainError(
      "MethodNotAllowed",
      "The specified method is not allowed against this resource.",
    );
    const requestId = newRequestId();
    writeAndClose(socket, render(refusal, { target: req.url, host: req.headers.host }, requestId), requestId);
  });
  server.on("checkExpectation", (req: IncomingMessage, res: ServerResponse) => {
    log.info({ expect: String(req.headers.expect).slice(0, 64) }, "unsupported Expect refused");
    const refusal = new DomainError(
      "ExpectationFailed",
      "Your Expect header is not supported: only 100-continue is accepted.",
    );
    const requestId = newRequestId();
    const answer = render(refusal, { target: req.url, host: req.headers.host }, requestId);
    res.shouldKeepAlive = false;
    res.writeHead(answer.status, {
      "content-type": answer.contentType,
      "content-length": Buffer.byteLength(answer.body),
      "x-amz-request-id": requestId,
      connection: "close",
    });
    res.end(answer.body);
  });
}

/** What a parser or timeout error of Node's HTTP server means for the client. */
function clientErrorRefusal(code: string | undefined): DomainError {
  switch (code) {
    case "HPE_HEADER_OVERFLOW":
      return new DomainError(
        "RequestHeaderSectionTooLarge",
        "Your request header section exceeds the maximum allowed size.",
      );
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return new DomainError(
        "RequestTimeout",
        "Your socket connection to the server was not read from or written to within the timeout period. Idle connections will be closed.",
      );
    default:
      return new DomainError("BadRequest", "The request could not be parsed.");
  }
}

/** The target and Host of a request as far as the parser got, read from the bytes it saw. */
function requestLineOf(raw: Buffer | undefined): {
  target: string | undefined;
  host: string | undefined;
} {
  if (!raw) return { target: undefined, host: undefined };
  const text = raw.subarray(0, 64 * 1024).toString("latin1");
  const target = /^[A-Za-z]+ ([^\s]+) /.exec(text)?.[1];
  const host = /\r\nhost:[ \t]*([^\r\n]*)/i.exec(text)?.[1]?.trim();
  return { target, host };
}

/** Writes a complete response on a raw socket and closes it, cutting it if the peer lingers. */
function writeAndClose(socket: Duplex, answer: EdgeAnswer, requestId: string): void {
  const reason = STATUS_CODES[answer.status] ?? "Error";
  const head =
    `HTTP/1.1 ${answer.status} ${reason}\r\n` +
    `Content-Type: ${answer.contentType}\r\n` +
    `Content-Length: ${Buffer.byteLength(answer.body)}\r\n` +
    `x-amz-request-id: ${requestId}\r\n` +
    "Server: fencegate\r\nConnection: close\r\n\r\n";
  socket.end(head + answer.body);
  const cut = setTimeout(() => socket.destroy(), LINGER_MS);
  cut.unref();
  socket.once("close", () => clearTimeout(cut));
}
