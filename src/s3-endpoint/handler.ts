import type { IncomingMessage, ServerResponse } from "node:http";
import { Readable } from "node:stream";
import type { Context } from "hono";
import type { VerifiedBody } from "../backends/storage-backend.js";
import { DomainError, isDomainError } from "../core/errors.js";
import { assertValidObjectKey } from "../core/key-rules.js";
import type { Logger, RequestSummary } from "../core/log.js";
import type { RequestAuthenticator } from "../http/authenticator.js";
import { continueBody } from "../http/expect-continue.js";
import { nodeBodyResponse } from "../http/node-body.js";
import { splitRawUrl } from "../http/raw-url.js";
import { claimedAccessKeyId } from "../http/sigv4/claimed-identity.js";
import { EMPTY_SHA256, type RequestHeaders } from "../http/sigv4/index.js";
import { addressRequest } from "./addressing.js";
import { decodeRequestBody } from "./body/index.js";
import { accessDenied, checkNeeds, isAccessDenial } from "./protocol/access.js";
import type { S3Request, S3Response, S3Services } from "./protocol/context.js";
import { renderS3Error, type S3WireError, toS3Error } from "./protocol/errors.js";
import { fenceTokenOf } from "./protocol/fence-token.js";
import { parseS3Query } from "./protocol/query.js";
import { renderXml } from "./protocol/xml.js";
import { routeOf } from "./routes.js";

type S3HandlerOptions = {
  services: S3Services;
  authenticator: RequestAuthenticator;
  domain?: string;
  log: Logger;
};

type Bindings = { incoming: IncomingMessage; outgoing: ServerResponse };
export type S3Env = {
  Bindings: Bindings;
  /** `op`: the S3 operation the request was routed to, once known (metrics, logs). */
  Variables: { requestId: string; log: Logger; summary?: RequestSummary; op?: string };
};

/**
 * A request refused before its fencing decision, as the audit log records it: a write, a request
 * the policy denied, or one whose signature failed.
 */
type Refusal = {
  op: string;
  bucket: string | null;
  key: string | null;
  headers: IncomingMessage["headers"];
  query: URLSearchParams;
  /** The verified access key id, or until the signature verifies the one the request claims. */
  principal: string | null;
  requestId: string;
};

/** The S3 wire protocol: address, authenticate, route, render. */
export function s3Handler(opts: S3HandlerOptions) {
  return async (c: Context<S3Env>): Promise<Response> => {
    const incoming = c.env.incoming;
    const requestId = c.get("requestId");
    const log = c.get("log");
    const summary: RequestSummary = c.get("summary") ?? {};
    const { rawPath, rawQuery } = splitRawUrl(incoming.url);
    const method = incoming.method ?? "GET";
    let resource = rawPath;
    let refusal: Refusal | undefined;
    try {
      const addressed = addressRequest(rawPath, incoming.headers.host, opts.domain);
      resource = `/${addressed.bucket ?? ""}${addressed.key !== null ? `/${addressed.key}` : ""}`;
      const query = parseS3Query(rawQuery);
      const route = routeOf({
        method,
        bucket: addressed.bucket,
        key: addressed.key,
        query,
        headers: incoming.headers,
      });
      summary.operation = route.name;
      summary.bucket = addressed.bucket;
      summary.key = addressed.key;
      summary.principal = claimedAccessKeyId(incoming.headers, query);
      c.set("op", route.name);
      // Known before authentication: a write refused for its signature is a write decision too.
      if (route.write) {
        refusal = {
          op: route.name,
          bucket: addressed.bucket,
          key: addressed.key,
          headers: incoming.headers,
          query,
          principal: claimedAccessKeyId(incoming.headers, query),
          requestId,
        };
      }
      // The same answer for every caller, so before authentication (S3 signs these another way).
      if (route.notImplemented !== undefined) throw new DomainError("NotImplemented", route.notImplemented);
      let auth: ReturnType<RequestAuthenticator["authenticate"]>;
      try {
        auth = opts.authenticator.authenticate({
          method,
          rawPath,
          rawQuery,
          headers: withImpliedPayloadHash(incoming),
        });
      } catch (err) {
        // A request refused for its signature is recorded whatever it asked, against the access
        // key it claims; an anonymous read claims nobody and is not.
        const claimed = claimedAccessKeyId(incoming.headers, query);
        if (!refusal && claimed !== null) {
          refusal = {
            op: route.name,
            bucket: addressed.bucket,
            key: addressed.key,
            headers: incoming.headers,
            query,
            principal: claimed,
            requestId,
          };
        }
        throw err;
      }
      if (refusal) refusal.principal = auth.accessKeyId;
      summary.principal = auth.accessKeyId;
      const req: S3Request = {
        requestId,
        method,
        bucket: addressed.bucket,
        key: addressed.key,
        query,
        headers: incoming.headers,
        body: incoming,
        principal: auth.accessKeyId,
        presigned: auth.presigned,
        signingRegion: auth.scope.region,
        decodeBody: (decodeOpts) =>
          decodeOnFirstRead(() => {
            continueBody(incoming);
            const headers =
              decodeOpts?.objectChecksums === false
                ? withoutChecksumHeaders(incoming.headers)
                : incoming.headers;
            return decodeRequestBody({ body: incoming, headers, auth });
          }),
        signal: clientGone(c.env.outgoing),
        log,
      };
      // The one validation of the key on the request path: backends receive valid keys.
      if (addressed.key !== null) assertValidObjectKey(addressed.key);
      try {
        // Before the operation runs: a caller without the rights gets nothing read, not even
        // the body an Expect: 100-continue client is holding back.
        checkNeeds(route.access, req, opts.services.access);
      } catch (err) {
        // Writes are audited whatever refuses them; reads the policy refused are audited too.
        if (isAccessDenial(err)) refusal ??= refusalOf(route.name, req);
        throw err;
      }
      log.debug({ op: route.name, bucket: req.bucket, key: req.key, principal: req.principal }, "s3 request");
      const res = await route.run(req, opts.services);
      const accepted = Number(res.headers?.["x-fence-token-accepted"]);
      if (Number.isSafeInteger(accepted)) summary.token = accepted;
      summary.decision = "accepted";
      return toResponse(res, method, c.env.outgoing);
    } catch (err) {
      const s3err = toS3Error(err);
      summary.decision = s3err.outcome === "unknown" ? "unknown" : "rejected";
      summary.code = s3err.code;
      const token = isDomainError(err) ? err.details.token : undefined;
      if (typeof token === "number") summary.token = token;
      logOutcome(log, err, s3err);
      if (refusal) {
        // A fresh copy for the log: the fencer adds the object's HCT to the error it records, and
        // a caller without rights must not learn it from the answer.
        const recorded = await auditRefusal(
          opts.services,
          refusal,
          isAccessDenial(err) ? accessDenied() : err,
          log,
        );
        if (!recorded) return errorResponse(toS3Error(auditUnavailable()), resource, requestId, method);
      }
      return errorResponse(s3err, resource, requestId, method);
    }
  };
}

function refusalOf(op: string, req: S3Request): Refusal {
  const { bucket, key, headers, query, principal, requestId } = req;
  return { op, bucket, key, headers, query, principal, requestId };
}

/**
 * Refusals are the client's doing and go to the info level, NotImplemented included (a client
 * can send them as fast as it likes); only faults of the gateway or its dependencies are errors.
 */
function logOutcome(log: Logger, err: unknown, s3err: S3WireError): void {
  if (!isDomainError(err) || err.code === "InternalError") log.error({ err }, "request failed");
  else if (s3err.status >= 500 && s3err.status !== 501) {
    log.error(
      { code: s3err.code, status: s3err.status, reason: s3err.message, cause: err.cause },
      "request failed",
    );
  } else log.info({ code: s3err.code, status: s3err.status, reason: s3err.message }, "request refused");
}

/** Aborted when the connection closes before the response is complete. */
function clientGone(res: ServerResponse | undefined): AbortSignal {
  const controller = new AbortController();
  res?.once("close", () => {
    if (!res.writableFinished) controller.abort();
  });
  return controller.signal;
}

/**
 * The decoded body, started only when something reads it: until then the request is not
 * consumed, so a write refused before its body is needed neither asks an Expect: 100-continue
 * client for the body nor leaves it half-piped (the rest of an unread body is discarded after the answer: http/lingering-close.ts).
 */
function decodeOnFirstRead(open: () => VerifiedBody): VerifiedBody {
  let settle!: { resolve: (d: Awaited<VerifiedBody["digest"]>) => void; reject: (e: unknown) => void };
  const digest = new Promise<Awaited<VerifiedBody["digest"]>>((resolve, reject) => {
    settle = { resolve, reject };
  });
  digest.catch(() => undefined);
  let inner: VerifiedBody | undefined;
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
      inner.digest.then(settle.resolve, settle.reject);
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
  return { stream, digest };
}

/**
 * Writes refused before the fencing decision (bad key, missing bucket, malformed request) are
 * recorded too; those refused by the fencing core already were.
 */
async function auditRefusal(
  services: S3Services,
  refusal: Refusal,
  err: unknown,
  log: Logger,
): Promise<boolean> {
  let tokenString: string | null = null;
  try {
    tokenString = fenceTokenOf(refusal);
  } catch {
    // Conflicting tokens: the refusal is recorded without one.
  }
  try {
    await services.fencer.recordRefusal(
      {
        op: refusal.op,
        bucket: refusal.bucket ?? "",
        key: refusal.key,
        tokenString,
        principal: refusal.principal,
        requestId: refusal.requestId,
      },
      err,
    );
    return true;
  } catch (auditErr) {
    log.error({ err: auditErr }, "could not record a refused write in the audit log");
    return false;
  }
}

/** A decision the audit log could not take is never answered as if it had been: 503. */
function auditUnavailable(): DomainError {
  return new DomainError("ServiceUnavailable", "the audit log could not record the decision on this request");
}

/**
 * S3 requires x-amz-content-sha256 on header-signed requests. Generic SigV4 signers (curl
 * --aws-sigv4) leave it out; for a request without a body the hash can only be that of the
 * empty string, so such requests are accepted too. Requests with a body still need the header.
 */
function withImpliedPayloadHash(incoming: IncomingMessage): RequestHeaders {
  // Each value apart: a repeated header's canonical form joins its values with "," (Node's
  // \`headers\` joins them with ", ", which no signer signed).
  const distinct = incoming.headersDistinct;
  const h = incoming.headers;
  if (h["x-amz-content-sha256"] !== undefined || h.authorization === undefined) return distinct;
  const bodyless =
    (h["content-length"] === undefined || h["content-length"] === "0") && !h["transfer-encoding"];
  return bodyless ? { ...distinct, "x-amz-content-sha256": EMPTY_SHA256 } : distinct;
}

/** The headers without the checksum claims of x-amz-checksum-* and x-amz-sdk-checksum-algorithm. */
function withoutChecksumHeaders(headers: IncomingMessage["headers"]): IncomingMessage["headers"] {
  return Object.fromEntries(
    Object.entries(headers).filter(
      ([name]) => !name.startsWith("x-amz-checksum-") && name !== "x-amz-sdk-checksum-algorithm",
    ),
  );
}

function toResponse(res: S3Response, method: string, outgoing: ServerResponse): Response {
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
    return nodeBodyResponse(outgoing, res.stream, res.status, headers);
  }
  // No body: said with Content-Length 0, except on a 204 or 304, which carry none (RFC 9110).
  const bodiless = res.status === 204 || res.status === 304;
  if (bodiless) headers.delete("content-length");
  else if (!headers.has("content-length") && method !== "HEAD") headers.set("content-length", "0");
  return new Response(null, { status: res.status, headers });
}

function errorResponse(err: S3WireError, resource: string, requestId: string, method: string): Response {
  const headers = new Headers();
  const highest = err.extra.HighestToken;
  if (typeof highest === "number") headers.set("x-fence-highest-token", String(highest));
  if (err.retryAfterSeconds !== undefined) headers.set("retry-after", String(err.retryAfterSeconds));
  if (err.outcome === "unknown") headers.set("x-fence-outcome", "unknown");
  if (err.status === 304 || method === "HEAD") {
    // HEAD answers carry no body; the code goes in a header for clients that want it.
    headers.set("x-amz-error-code", err.code);
    return new Response(null, { status: err.status, headers });
  }
  headers.set("content-type", "application/xml");
  return new Response(renderS3Error(err, resource, requestId), { status: err.status, headers });
}
