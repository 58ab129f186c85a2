import type { IncomingMessage } from "node:http";
import { Readable } from "node:stream";
import type { Context } from "hono";
import { assertValidObjectKey } from "../backends/key-rules.js";
import type { Logger } from "../log.js";
import { continueBody } from "../server/expect-continue.js";
import { addressRequest, splitRawUrl } from "./addressing.js";
import { EMPTY_SHA256 } from "./auth/index.js";
import type { DecodedBody, S3Request, S3Response, S3Services } from "./context.js";
import { selectOperation } from "./dispatch.js";
import { renderS3Error, type S3Error, toS3Error } from "./errors.js";
import { fenceTokenOf } from "./fence-token.js";
import type { RequestAuthenticator } from "./request-auth.js";
import { renderXml } from "./xml.js";

export type S3HandlerOptions = {
  services: S3Services;
  authenticator: RequestAuthenticator;
  domain?: string;
  log: Logger;
};

type Bindings = { incoming: IncomingMessage };
export type S3Env = { Bindings: Bindings; Variables: { requestId: string; log: Logger } };

/** The S3 wire protocol: address, authenticate, dispatch, render. */
export function s3Handler(opts: S3HandlerOptions) {
  return async (c: Context<S3Env>): Promise<Response> => {
    const incoming = c.env.incoming;
    const requestId = c.get("requestId");
    const log = c.get("log");
    const { rawPath, rawQuery } = splitRawUrl(incoming.url);
    const method = incoming.method ?? "GET";
    let resource = rawPath;
    let refusal: { op: string; req: S3Request } | undefined;
    try {
      const addressed = addressRequest(rawPath, incoming.headers.host, opts.domain);
      resource = `/${addressed.bucket ?? ""}${addressed.key !== null ? `/${addressed.key}` : ""}`;
      const auth = opts.authenticator.authenticate({
        method,
        rawPath,
        rawQuery,
        headers: withImpliedPayloadHash(incoming),
      });
      const req: S3Request = {
        requestId,
        method,
        bucket: addressed.bucket,
        key: addressed.key,
        query: new URLSearchParams(rawQuery),
        headers: incoming.headers,
        body: incoming,
        principal: auth.accessKeyId,
        decodeBody: () =>
          decodeOnFirstRead(() => {
            continueBody(incoming);
            return opts.authenticator.decodeBody(incoming, incoming.headers, auth);
          }),
        log,
      };
      const op = selectOperation(req);
      if (WRITE_OPERATIONS.has(op.name)) refusal = { op: op.name, req };
      if (addressed.key !== null) assertValidObjectKey(addressed.key);
      log.debug({ op: op.name, bucket: req.bucket, key: req.key, principal: req.principal }, "s3 request");
      const res = await op.run(req, opts.services);
      return toResponse(res, method);
    } catch (err) {
      const s3err = toS3Error(err);
      if (s3err.status >= 500) log.error({ err }, "request failed");
      else log.info({ code: s3err.code, status: s3err.status, msg: s3err.message }, "request refused");
      if (refusal) await auditRefusal(opts.services, refusal, err, log);
      return errorResponse(s3err, resource, requestId, method);
    }
  };
}

/**
 * The decoded body, started only when something reads it: until then the request is not
 * consumed, so a write refused before its body is needed neither asks an Expect: 100-continue
 * client for the body nor leaves it half-piped (Node discards an unread body after the answer).
 */
function decodeOnFirstRead(open: () => DecodedBody): DecodedBody {
  let settle!: { resolve: (d: Awaited<DecodedBody["done"]>) => void; reject: (e: unknown) => void };
  const done = new Promise<Awaited<DecodedBody["done"]>>((resolve, reject) => {
    settle = { resolve, reject };
  });
  done.catch(() => undefined);
  let inner: DecodedBody | undefined;
  const stream = new Readable({
    read() {
      if (inner) {
        inner.stream.resume();
        return;
      }
      try {
        inner = open();
      } catch (e) {
        settle.reject(e);
        stream.destroy(e as Error);
        return;
      }
      inner.done.then(settle.resolve, settle.reject);
      inner.stream.on("data", (chunk: Buffer) => {
        if (!stream.push(chunk)) inner!.stream.pause();
      });
      inner.stream.once("end", () => stream.push(null));
      inner.stream.once("error", (e) => stream.destroy(e));
    },
    destroy(err, callback) {
      inner?.stream.destroy();
      callback(err);
    },
  });
  return { stream, done };
}

/** Operations that write: every refusal of one is a write decision and goes to the audit log. */
const WRITE_OPERATIONS = new Set([
  "PutObject",
  "CopyObject",
  "DeleteObject",
  "DeleteObjects",
  "CreateMultipartUpload",
  "UploadPart",
  "UploadPartCopy",
  "CompleteMultipartUpload",
]);

/**
 * Writes refused before the fencing decision (bad key, missing bucket, malformed request) are
 * recorded too; those refused by the fencing core already were.
 */
async function auditRefusal(
  services: S3Services,
  refusal: { op: string; req: S3Request },
  err: unknown,
  log: Logger,
): Promise<void> {
  const { op, req } = refusal;
  let tokenString: string | null = null;
  try {
    tokenString = fenceTokenOf(req);
  } catch {
    // Conflicting tokens: the refusal is recorded without one.
  }
  try {
    await services.fencer.recordRefusal(
      {
        op,
        bucket: req.bucket ?? "",
        key: req.key,
        tokenString,
        principal: req.principal,
        requestId: req.requestId,
      },
      err,
    );
  } catch (auditErr) {
    log.error({ err: auditErr }, "could not record a refused write in the audit log");
  }
}

/**
 * S3 requires x-amz-content-sha256 on header-signed requests. Generic SigV4 signers (curl
 * --aws-sigv4) leave it out; for a request without a body the hash can only be that of the
 * empty string, so such requests are accepted too. Requests with a body still need the header.
 */
function withImpliedPayloadHash(incoming: IncomingMessage): IncomingMessage["headers"] {
  const h = incoming.headers;
  if (h["x-amz-content-sha256"] !== undefined || h.authorization === undefined) return h;
  const bodyless =
    (h["content-length"] === undefined || h["content-length"] === "0") && !h["transfer-encoding"];
  return bodyless ? { ...h, "x-amz-content-sha256": EMPTY_SHA256 } : h;
}

function toResponse(res: S3Response, method: string): Response {
  let headers: Headers;
  try {
    headers = new Headers(res.headers);
  } catch (e) {
    res.stream?.destroy();
    throw e;
  }
  if (res.xml) {
    headers.set("content-type", "application/xml");
    return new Response(renderXml(res.xml.root, res.xml.body), { status: res.status, headers });
  }
  if (res.stream) {
    if (method === "HEAD") {
      res.stream.destroy();
      return new Response(null, { status: res.status, headers });
    }
    return new Response(Readable.toWeb(res.stream) as ReadableStream, { status: res.status, headers });
  }
  if (!headers.has("content-length") && method !== "HEAD") headers.set("content-length", "0");
  return new Response(null, { status: res.status, headers });
}

export function errorResponse(err: S3Error, resource: string, requestId: string, method: string): Response {
  const headers = new Headers();
  const highest = err.extra.HighestToken;
  if (typeof highest === "number") headers.set("x-fence-highest-token", String(highest));
  if (err.status === 304 || method === "HEAD") {
    // HEAD answers carry no body; the code goes in a header for clients that want it.
    headers.set("x-amz-error-code", err.code);
    return new Response(null, { status: err.status, headers });
  }
  headers.set("content-type", "application/xml");
  return new Response(renderS3Error(err, resource, requestId), { status: err.status, headers });
}
