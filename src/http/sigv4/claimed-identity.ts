import { headerValue, type RequestHeaders } from "./request-headers.js";

/** Access key ids are at most 128 characters (the configuration's bound). */
const MAX_ACCESS_KEY_ID_CHARS = 128;

/**
 * The access key id a request claims (Authorization `Credential=` or `X-Amz-Credential`), whether
 * or not its signature verifies: what a refusal for a bad signature is attributed to. Null when
 * the request names none. Never proof of anything.
 */
export function claimedAccessKeyId(headers: RequestHeaders, query: URLSearchParams): string | null {
  const authorization = headerValue(headers, "authorization");
  const fromHeader = authorization ? /Credential=([^/,\s]+)/.exec(authorization)?.[1] : undefined;
  const fromQuery = query.get("X-Amz-Credential")?.split("/")[0];
  const id = fromHeader ?? fromQuery;
  return id ? id.slice(0, MAX_ACCESS_KEY_ID_CHARS) : null;
}
