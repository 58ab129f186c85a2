import { createHash } from "node:crypto";
import type { IncomingMessage } from "node:http";
import type { Context } from "hono";
import { DomainError } from "../core/errors.js";
import type { RequestAuthenticator } from "../http/authenticator.js";
import { continueBody } from "../http/expect-continue.js";
import { splitRawUrl } from "../http/raw-url.js";
import { EMPTY_SHA256, UNSIGNED_PAYLOAD } from "../http/sigv4/index.js";
import type { ApiEnv } from "./lease-api.js";

/** Lease API request bodies are small JSON documents. */
const MAX_BODY_BYTES = 64 * 1024;
const EMPTY = Buffer.alloc(0);

/**
 * SigV4 for the lease API, with the S3 access keys. Unlike S3, generic SigV4 clients (curl
 * --aws-sigv4, for instance) may omit x-amz-content-sha256; the payload hash is then the
 * body's own SHA-256, which is what they signed.
 */
export function apiAuthenticator(auth: RequestAuthenticator) {
  return async (c: Context<ApiEnv>): Promise<{ principal: string; body: Buffer }> => {
    const incoming = c.env.incoming;
    continueBody(incoming);
    const body = await readBody(incoming);
    const bodyHash = body.length === 0 ? EMPTY_SHA256 : createHash("sha256").update(body).digest("hex");
    // Each value apart: a repeated header's canonical form joins its values with ",".
    const headers: Record<string, string | readonly string[] | undefined> = { ...incoming.headersDistinct };
    const claimed = incoming.headers["x-amz-content-sha256"];
    if (claimed === undefined) headers["x-amz-content-sha256"] = bodyHash;
    else if (claimed !== UNSIGNED_PAYLOAD && claimed !== bodyHash) {
      throw new DomainError(
        "XAmzContentSHA256Mismatch",
        "The provided 'x-amz-content-sha256' header does not match what was computed.",
      );
    }
    const result = auth.authenticate({
      method: incoming.method ?? "GET",
      ...splitRawUrl(incoming.url),
      headers,
    });
    return { principal: result.accessKeyId, body };
  };
}

/**
 * The whole (small) body, read from the Node request itself: going through the Fetch API's
 * Request would wrap it in a Web stream first, which costs more than the rest of a lease call's
 * parsing; an async iterator over the stream costs more than these listeners too. Nothing else
 * reads the body before this. A body past the limit destroys the request, as leaving a `for
 * await` over it would.
 */
function readBody(incoming: IncomingMessage): Promise<Buffer> {
  const length = incoming.headers["content-length"];
  // No Content-Length and no Transfer-Encoding: HTTP/1.1 says there is no body (a DELETE, a GET).
  if ((length === undefined || length === "0") && incoming.headers["transfer-encoding"] === undefined) {
    return Promise.resolve(EMPTY);
  }
  const declared = Number(length ?? 0);
  if (declared > MAX_BODY_BYTES) return Promise.reject(tooLarge());
  const prematureClose = () =>
    Object.assign(new Error("Premature close"), { code: "ERR_STREAM_PREMATURE_CLOSE" });
  // Gone before anything read it: its end or close has already been and will not come again.
  if (incoming.destroyed || incoming.readableEnded) return Promise.reject(prematureClose());
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = (err: Error | null) => {
      incoming.off("data", onData);
      incoming.off("end", onEnd);
      incoming.off("error", onError);
      incoming.off("close", onClose);
      if (err) reject(err);
      else resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    };
    const onData = (chunk: Buffer) => {
      size += chunk.byteLength;
      if (size > MAX_BODY_BYTES) {
        done(tooLarge());
        incoming.destroy();
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => done(null);
    const onError = (err: Error) => done(err);
    // Closed before its end: the client went away half-way through the body.
    const onClose = () => done(prematureClose());
    incoming.on("data", onData);
    incoming.once("end", onEnd);
    incoming.once("error", onError);
    incoming.once("close", onClose);
  });
}

function tooLarge(): DomainError {
  return new DomainError("InvalidRequest", `the request body exceeds ${MAX_BODY_BYTES} bytes`);
}
