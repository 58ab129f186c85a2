import type { Readable } from "node:stream";
import type { Credentials } from "../config/resolve.js";
import type { Clock } from "../core/clock.js";
import { type AuthResult, authenticateRequest, type RequestHeaders } from "./auth/index.js";
import { decodeRequestBody } from "./body/index.js";
import type { DecodedBody } from "./context.js";

export type AuthInput = { method: string; rawPath: string; rawQuery: string; headers: RequestHeaders };

/** SigV4 authentication and body decoding bound to the configured access keys and clock. */
export type RequestAuthenticator = {
  authenticate(req: AuthInput): AuthResult;
  decodeBody(body: Readable, headers: RequestHeaders, auth: AuthResult): DecodedBody;
};

export function createRequestAuthenticator(opts: {
  credentials: Credentials;
  clock: Clock;
}): RequestAuthenticator {
  const lookup = (accessKeyId: string) => opts.credentials.get(accessKeyId);
  return {
    authenticate: (req) => authenticateRequest({ ...req, now: opts.clock() }, lookup),
    decodeBody: (body, headers, auth) => decodeRequestBody({ body, headers, auth }),
  };
}
