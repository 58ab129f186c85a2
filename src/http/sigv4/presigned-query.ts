import { DomainError } from "../../core/errors.js";
import { SIGV4_ALGORITHM } from "./authorization-header.js";
import {
  type ParsedCredential,
  parseCredential,
  parseSignedHeaders,
  QUERY_STYLE,
} from "./credential-scope.js";
import { decodeQueryComponent, type RawQueryParam } from "./query-string.js";

const MAX_PRESIGNED_EXPIRES_SECONDS = 604800;

type ParsedPresigned = ParsedCredential & {
  amzDate: string;
  expiresSeconds: number;
  signedHeaders: string[];
  signature: string;
  /** X-Amz-Content-Sha256 when the signer hoisted it into the query (any name case). */
  contentSha256: string | undefined;
};

const REQUIRED = [
  "X-Amz-Algorithm",
  "X-Amz-Credential",
  "X-Amz-Signature",
  "X-Amz-Date",
  "X-Amz-SignedHeaders",
  "X-Amz-Expires",
] as const;

const paramError = (message: string) => new DomainError("AuthorizationQueryParametersError", message);

export const isPresignedQuery = (params: readonly RawQueryParam[]): boolean =>
  params.some(
    ([name]) => name === "X-Amz-Algorithm" || name === "X-Amz-Credential" || name === "X-Amz-Signature",
  );

/** Reads and validates the SigV4 query parameters (names are case-sensitive, as on S3). */
export function parsePresignedQuery(params: readonly RawQueryParam[]): ParsedPresigned {
  const values = new Map<string, string>();
  let contentSha256: string | undefined;
  for (const [rawName, rawValue] of params) {
    const name = decodeQueryComponent(rawName);
    if (name.toLowerCase() === "x-amz-content-sha256") contentSha256 = decodeQueryComponent(rawValue);
    if (!(REQUIRED as readonly string[]).includes(name)) continue;
    if (values.has(name)) throw paramError(`The ${name} parameter must not be repeated.`);
    values.set(name, decodeQueryComponent(rawValue));
  }
  const get = (name: (typeof REQUIRED)[number]): string => {
    const v = values.get(name);
    if (v === undefined) {
      throw paramError(
        "Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters.",
      );
    }
    return v;
  };
  const algorithm = get("X-Amz-Algorithm");
  const credential = get("X-Amz-Credential");
  const signature = get("X-Amz-Signature");
  const amzDate = get("X-Amz-Date");
  const signedHeadersValue = get("X-Amz-SignedHeaders");
  const expires = get("X-Amz-Expires");

  if (algorithm !== SIGV4_ALGORITHM) throw paramError(`X-Amz-Algorithm only supports "${SIGV4_ALGORITHM}"`);
  if (!/^\d{8}T\d{6}Z$/.test(amzDate)) {
    throw paramError("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"");
  }
  if (!/^-?\d+$/.test(expires)) throw paramError("X-Amz-Expires should be a number");
  const expiresSeconds = Number(expires);
  // A negative expiry (an SDK's expiresIn=-1000) is a URL that expired before it was signed:
  // refused as expired (403 AccessDenied), as S3 refuses it, by the expiry check.
  if (expiresSeconds === 0) throw paramError("X-Amz-Expires must be at least 1 second");
  if (expiresSeconds > MAX_PRESIGNED_EXPIRES_SECONDS) {
    throw paramError(
      "X-Amz-Expires must be less than a week (in seconds) that is; the maximum expires is 604800",
    );
  }
  const signedHeaders = parseSignedHeaders(signedHeadersValue);
  if (!signedHeaders) throw paramError(`X-Amz-SignedHeaders "${signedHeadersValue}" is malformed.`);
  return {
    ...parseCredential(credential, QUERY_STYLE),
    amzDate,
    expiresSeconds,
    signedHeaders,
    signature,
    contentSha256,
  };
}
