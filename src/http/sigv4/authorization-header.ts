import { DomainError } from "../../core/errors.js";
import {
  HEADER_STYLE,
  type ParsedCredential,
  parseCredential,
  parseSignedHeaders,
} from "./credential-scope.js";

export const SIGV4_ALGORITHM = "AWS4-HMAC-SHA256";

type ParsedAuthorization = ParsedCredential & { signedHeaders: string[]; signature: string };

const COMPONENTS: ReadonlySet<string> = new Set(["Credential", "SignedHeaders", "Signature"]);

/**
 * Signature Version 2 (`Authorization: AWS id:signature`, or `AWSAccessKeyId`/`Signature` in the
 * query): refused as S3 refuses it in the regions that accept only Signature Version 4.
 */
export const sigV2NotSupported = () =>
  new DomainError(
    "InvalidRequest",
    "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.",
  );

const malformed = (why: string) => new DomainError("AuthorizationHeaderMalformed", HEADER_STYLE.prefix + why);

/**
 * Parses `AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…, Signature=…`. Clients differ in the
 * whitespace after the commas (and some put none), so components are split on "," and trimmed.
 */
export function parseAuthorizationHeader(value: string): ParsedAuthorization {
  const trimmed = value.trim();
  const space = trimmed.search(/\s/);
  const algorithm = space < 0 ? trimmed : trimmed.slice(0, space);
  if (algorithm === "AWS") throw sigV2NotSupported();
  if (algorithm !== SIGV4_ALGORITHM) {
    // SigV4a and other schemes are not supported; S3 answers this for unknown schemes.
    throw new DomainError("InvalidArgument", "Unsupported Authorization Type", {
      ArgumentName: "Authorization",
      ArgumentValue: algorithm,
    });
  }
  const fields = new Map<string, string>();
  for (const part of trimmed.slice(algorithm.length).split(",")) {
    const item = part.trim();
    const eq = item.indexOf("=");
    if (eq <= 0) throw malformed(`the authorization component "${item}" is malformed.`);
    const name = item.slice(0, eq);
    // Only the three SigV4 components exist; anything else is not a header we can vouch for.
    if (!COMPONENTS.has(name)) throw malformed(`the authorization component "${name}" is not recognized.`);
    if (fields.has(name)) throw malformed(`the authorization component "${name}" is repeated.`);
    fields.set(name, item.slice(eq + 1));
  }
  const credential = fields.get("Credential");
  const signedHeadersValue = fields.get("SignedHeaders");
  const signature = fields.get("Signature");
  if (credential === undefined)
    throw malformed('the authorization header requires a "Credential" component.');
  if (signedHeadersValue === undefined) {
    throw malformed('the authorization header requires a "SignedHeaders" component.');
  }
  if (signature === undefined) throw malformed('the authorization header requires a "Signature" component.');
  const signedHeaders = parseSignedHeaders(signedHeadersValue);
  if (!signedHeaders) throw malformed(`the SignedHeaders component "${signedHeadersValue}" is malformed.`);
  return { ...parseCredential(credential, HEADER_STYLE), signedHeaders, signature };
}
