import type { Server } from "node:http";
import type { Socket } from "node:net";
import type { Logger } from "../log.js";
import { renderS3Error, S3Error } from "../s3/errors.js";

/**
 * Requests Node rejects before they reach the app (oversized headers, broken HTTP) still get
 * an S3 error body, not a bare status line or a dropped connection.
 */
export function installClientErrorHandler(server: Server, log: Logger): void {
  server.on("clientError", (err: NodeJS.ErrnoException, socket: Socket) => {
    if (!socket.writable || (err as { code?: string }).code === "ECONNRESET") {
      socket.destroy();
      return;
    }
    const tooLarge = err.code === "HPE_HEADER_OVERFLOW";
    const s3err = tooLarge
      ? new S3Error(
          "RequestHeaderSectionTooLarge",
          "Your request header section exceeds the maximum allowed size.",
          400,
        )
      : new S3Error("BadRequest", "The request could not be parsed.", 400);
    const requestId = Math.random().toString(16).slice(2, 18).toUpperCase().padEnd(16, "0");
    const body = renderS3Error(s3err, "/", requestId);
    log.info({ code: err.code }, "malformed HTTP request refused");
    socket.end(
      `HTTP/1.1 ${s3err.status} Bad Request\r\nContent-Type: application/xml\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
        `x-amz-request-id: ${requestId}\r\nConnection: close\r\n\r\n${body}`,
    );
  });
}
