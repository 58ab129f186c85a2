import { DomainError } from "../../core/errors.js";
import { formatAmzDate, parseAmzDate, parseHttpDate } from "./amz-date.js";
import { parseAuthorizationHeader, sigV2NotSupported } from "./authorization-header.js";
import {
  type CredentialScope,
  checkScopeDate,
  HEADER_STYLE,
  QUERY_STYLE,
  scopeString,
} from "./credential-scope.js";
import {
  INVALID_PAYLOAD_HASH_MESSAGE,
  isKnownPayloadHash,
  STREAMING_SIGNED_PAYLOAD,
  STREAMING_SIGNED_PAYLOAD_TRAILER,
  UNSIGNED_PAYLOAD,
} from "./payload-hash.js";
import { isPresignedQuery, parsePresignedQuery } from "./presigned-query.js";
import { parseRawQuery, type RawQueryParam } from "./query-string.js";
import { headerValue, type RequestHeaders } from "./request-headers.js";
import { verifySignature } from "./signature-check.js";
import { deriveSigningKey } from "./signing-key.js";

export type SigV4Request = {
  method: string;
  /** The request target's path exactly as received, still percent-encoded, without the query. */
  rawPath: string;
  /**
   * The query string exactly as received, without the "?" ("" when there is none). It must be
   * the raw text: the canonical query is rebuilt from its original encoding and order.
   */
  rawQuery: string;
  /** Lower-case names as Node gives them; pass req.headersDistinct to keep repeated headers apart. */
  headers: RequestHeaders;
  /** Server time, ms since the epoch. */
  now: number;
};

/** The secret for an access key, or undefined if the key is unknown. */
export type CredentialLookup = (accessKeyId: string) => string | undefined;

export type AuthResult = {
  accessKeyId: string;
  /** SigV4 signing key of the credential scope, for chunk and trailer signatures. */
  signingKey: Buffer;
  scope: CredentialScope;
  /** The verified request signature, lower-case hex: the first "previous signature" of chunks. */
  seedSignature: string;
  /** x-amz-content-sha256 as signed (for presigned URLs UNSIGNED-PAYLOAD unless one was signed). */
  payloadHash: string;
  /** The request timestamp in ISO 8601 basic format, as in the string to sign. */
  amzDate: string;
  presigned: boolean;
  signedHeaders: string[];
};

const MAX_CLOCK_SKEW_MS = 15 * 60 * 1000;

/**
 * Authenticates a SigV4 request (Authorization header or presigned query). Throws
 * DomainError with S3's code; anonymous requests are refused with AccessDenied.
 */
export function authenticateRequest(req: SigV4Request, lookupSecret: CredentialLookup): AuthResult {
  const params = parseRawQuery(req.rawQuery);
  const authorization = headerValue(req.headers, "authorization");
  const presigned = isPresignedQuery(params);
  if (authorization !== undefined && presigned) {
    throw new DomainError(
      "InvalidArgument",
      "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, Signature query string parameter or the Authorization header should be specified",
      { ArgumentName: "Authorization", ArgumentValue: authorization },
    );
  }
  if (authorization !== undefined) return authenticateHeader(req, params, authorization, lookupSecret);
  if (presigned) return authenticatePresigned(req, params, lookupSecret);
  if (params.some(([name]) => name === "AWSAccessKeyId" || name === "Signature")) throw sigV2NotSupported();
  throw new DomainError("AccessDenied", "Access Denied");
}

function authenticateHeader(
  req: SigV4Request,
  params: readonly RawQueryParam[],
  authorization: string,
  lookupSecret: CredentialLookup,
): AuthResult {
  const auth = parseAuthorizationHeader(authorization);
  const { amzDate, signedAt, rawDate } = requestTime(req.headers);
  checkScopeDate(auth.scope, amzDate, HEADER_STYLE);
  if (Math.abs(req.now - signedAt) > MAX_CLOCK_SKEW_MS) {
    throw new DomainError(
      "RequestTimeTooSkewed",
      "The difference between the request time and the current time is too large.",
      {
        RequestTime: rawDate,
        ServerTime: new Date(req.now).toISOString(),
        MaxAllowedSkewMilliseconds: String(MAX_CLOCK_SKEW_MS),
      },
    );
  }
  const payloadHash = headerValue(req.headers, "x-amz-content-sha256");
  if (payloadHash === undefined) {
    throw new DomainError("MissingSecurityHeader", "Your request was missing a required header", {
      MissingHeaderName: "x-amz-content-sha256",
    });
  }
  checkPayloadHash(payloadHash);
  return finish(req, params, lookupSecret, {
    ...auth,
    amzDate,
    payloadHash,
    presigned: false,
  });
}

function authenticatePresigned(
  req: SigV4Request,
  params: readonly RawQueryParam[],
  lookupSecret: CredentialLookup,
): AuthResult {
  const q = parsePresignedQuery(params);
  const signedAt = parseAmzDate(q.amzDate);
  if (signedAt === undefined) {
    throw new DomainError(
      "AuthorizationQueryParametersError",
      "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"",
    );
  }
  checkScopeDate(q.scope, q.amzDate, QUERY_STYLE);
  if (signedAt - req.now > MAX_CLOCK_SKEW_MS) {
    throw new DomainError("AccessDenied", "Request is not valid yet", {
      "X-Amz-Date": q.amzDate,
      ServerTime: new Date(req.now).toISOString(),
    });
  }
  const expiresAt = signedAt + q.expiresSeconds * 1000;
  if (req.now > expiresAt) {
    throw new DomainError("AccessDenied", "Request has expired", {
      "X-Amz-Expires": String(q.expiresSeconds),
      // A negative expiry far out of range has no date to show.
      ...(Math.abs(expiresAt) <= 8.64e15 ? { Expires: new Date(expiresAt).toISOString() } : {}),
      ServerTime: new Date(req.now).toISOString(),
    });
  }
  // The payload hash line is UNSIGNED-PAYLOAD unless the signer put one in the query or a header.
  const payloadHash = q.contentSha256 ?? headerValue(req.headers, "x-amz-content-sha256") ?? UNSIGNED_PAYLOAD;
  checkPayloadHash(payloadHash);
  if (payloadHash === STREAMING_SIGNED_PAYLOAD || payloadHash === STREAMING_SIGNED_PAYLOAD_TRAILER) {
    // Chunk signatures chain from a header signature; a URL signature cannot seed them.
    throw new DomainError("InvalidArgument", `${payloadHash} is not supported with a presigned URL`, {
      ArgumentName: "x-amz-content-sha256",
      ArgumentValue: payloadHash,
    });
  }
  return finish(req, params, lookupSecret, { ...q, payloadHash, presigned: true });
}

type Verified = {
  accessKeyId: string;
  scope: CredentialScope;
  signedHeaders: string[];
  signature: string;
  amzDate: string;
  payloadHash: string;
  presigned: boolean;
};

function finish(
  req: SigV4Request,
  params: readonly RawQueryParam[],
  lookupSecret: CredentialLookup,
  v: Verified,
): AuthResult {
  const secret = lookupSecret(v.accessKeyId);
  if (secret === undefined) {
    throw new DomainError(
      "InvalidAccessKeyId",
      "The AWS Access Key Id you provided does not exist in our records.",
      { AWSAccessKeyId: v.accessKeyId },
    );
  }
  checkAllSigned(req.headers, v.signedHeaders);
  const signingKey = deriveSigningKey(secret, v.scope.date, v.scope.region, v.scope.service);
  const seedSignature = verifySignature({
    method: req.method,
    rawPath: req.rawPath,
    params,
    headers: req.headers,
    signedHeaders: v.signedHeaders,
    payloadHash: v.payloadHash,
    amzDate: v.amzDate,
    scope: scopeString(v.scope),
    signingKey,
    accessKeyId: v.accessKeyId,
    providedSignature: v.signature,
  });
  return {
    accessKeyId: v.accessKeyId,
    signingKey,
    scope: v.scope,
    seedSignature,
    payloadHash: v.payloadHash,
    amzDate: v.amzDate,
    presigned: v.presigned,
    signedHeaders: v.signedHeaders,
  };
}

/**
 * Host must be signed, and so must every x-amz-* header: they carry the semantics of the
 * request (copy source, checksums, metadata), and an unsigned one could be added in transit.
 * x-amz-content-sha256 is exempt: its value is the canonical request's last line anyway.
 */
function checkAllSigned(headers: RequestHeaders, signedHeaders: readonly string[]): void {
  const signed = new Set(signedHeaders);
  const missing = Object.keys(headers).filter(
    (name) =>
      headers[name] !== undefined &&
      name.startsWith("x-amz-") &&
      name !== "x-amz-content-sha256" &&
      !signed.has(name),
  );
  if (!signed.has("host")) missing.unshift("host");
  if (missing.length > 0) {
    throw new DomainError("AccessDenied", "There were headers present in the request which were not signed", {
      HeadersNotSigned: missing.join(", "),
    });
  }
}

function checkPayloadHash(value: string): void {
  if (!isKnownPayloadHash(value)) {
    throw new DomainError("InvalidArgument", INVALID_PAYLOAD_HASH_MESSAGE, {
      ArgumentName: "x-amz-content-sha256",
      ArgumentValue: value,
    });
  }
}

/** x-amz-date wins over Date; the string to sign always uses the ISO 8601 basic form. */
function requestTime(headers: RequestHeaders): { amzDate: string; signedAt: number; rawDate: string } {
  const xAmzDate = headerValue(headers, "x-amz-date");
  const date = headerValue(headers, "date");
  const raw = xAmzDate ?? date;
  if (raw === undefined) {
    throw new DomainError("MissingSecurityHeader", "Your request was missing a required header", {
      MissingHeaderName: "x-amz-date",
    });
  }
  const trimmed = xAmzDate?.trim();
  const signedAt = trimmed !== undefined ? parseAmzDate(trimmed) : parseHttpDate(raw);
  if (signedAt === undefined) {
    throw new DomainError("AccessDenied", "AWS authentication requires a valid Date or x-amz-date header");
  }
  // A valid x-amz-date is already in the basic form (parseAmzDate accepts only what it would write).
  return { amzDate: trimmed ?? formatAmzDate(signedAt), signedAt, rawDate: raw };
}
