export { EMPTY_SHA256, UNSIGNED_PAYLOAD } from "./payload-hash.js";
export { headerValue, type RequestHeaders } from "./request-headers.js";
export { type AuthResult, authenticateRequest, type CredentialLookup } from "./sigv4.js";
