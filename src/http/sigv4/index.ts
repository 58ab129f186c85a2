export type { CredentialScope } from "./credential-scope.js";
export {
  EMPTY_SHA256,
  STREAMING_SIGNED_PAYLOAD,
  STREAMING_SIGNED_PAYLOAD_TRAILER,
  STREAMING_UNSIGNED_PAYLOAD,
  STREAMING_UNSIGNED_PAYLOAD_TRAILER,
  UNSIGNED_PAYLOAD,
} from "./payload-hash.js";
export { headerValue, type RequestHeaders } from "./request-headers.js";
export {
  type AuthResult,
  authenticateRequest,
  type CredentialLookup,
  MAX_CLOCK_SKEW_MS,
  type SigV4Request,
} from "./sigv4.js";
