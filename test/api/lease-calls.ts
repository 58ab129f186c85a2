/**
 * Lease API calls as raw signed HTTP requests, so that the tests see exactly what goes over the
 * wire (status, JSON body, request id) whatever client is built on top of the API.
 */
import { type Credentials, signedRequest } from "../support/signed-http.js";

export type ApiAnswer = {
  status: number;
  // biome-ignore lint/suspicious/noExplicitAny: the JSON the API answered, checked by each test
  body: any;
  requestId: string;
};

export async function apiCall(
  endpoint: string,
  who: Credentials,
  method: string,
  path: string,
  body?: unknown,
  query?: Record<string, string>,
): Promise<ApiAnswer> {
  const res = await signedRequest(endpoint, {
    method,
    path: `/_fence/v1${path}`,
    ...(query ? { query } : {}),
    ...(body !== undefined
      ? { body: JSON.stringify(body), headers: { "content-type": "application/json" } }
      : {}),
    credentials: who,
  });
  return {
    status: res.status,
    body: res.text === "" ? null : JSON.parse(res.text),
    requestId: String(res.headers["x-amz-request-id"] ?? ""),
  };
}

/** A client bound to one gateway and one access key. */
export function apiAs(endpoint: string, who: Credentials) {
  return {
    acquire: (body: Record<string, unknown>) => apiCall(endpoint, who, "POST", "/leases", body),
    get: (leaseId: string) => apiCall(endpoint, who, "GET", `/leases/${leaseId}`),
    list: (query: Record<string, string> = {}) => apiCall(endpoint, who, "GET", "/leases", undefined, query),
    renew: (leaseId: string, body: Record<string, unknown> = {}) =>
      apiCall(endpoint, who, "POST", `/leases/${leaseId}/renew`, body),
    release: (leaseId: string) => apiCall(endpoint, who, "DELETE", `/leases/${leaseId}`),
    audit: (query: Record<string, string>) => apiCall(endpoint, who, "GET", "/audit", undefined, query),
  };
}
