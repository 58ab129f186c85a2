import type { Clock } from "../core/clock.js";
import {
  type AuthResult,
  authenticateRequest,
  type CredentialLookup,
  type RequestHeaders,
} from "./sigv4/index.js";

export type AuthInput = { method: string; rawPath: string; rawQuery: string; headers: RequestHeaders };

/** SigV4 authentication, shared by the S3 endpoint and the lease API. */
export type RequestAuthenticator = {
  authenticate(req: AuthInput): AuthResult;
};

export function createRequestAuthenticator(opts: {
  lookup: CredentialLookup;
  clock: Clock;
}): RequestAuthenticator {
  return { authenticate: (req) => authenticateRequest({ ...req, now: opts.clock() }, opts.lookup) };
}
