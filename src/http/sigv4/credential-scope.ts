import { DomainError, type DomainErrorCode } from "../../core/errors.js";

export type CredentialScope = { date: string; region: string; service: string };

export type ParsedCredential = { accessKeyId: string; scope: CredentialScope };

/** How a malformed credential is reported: header and query auth use different S3 codes. */
type ScopeErrorStyle = { code: DomainErrorCode; prefix: string };

export const HEADER_STYLE: ScopeErrorStyle = {
  code: "AuthorizationHeaderMalformed",
  prefix: "The authorization header is malformed; ",
};

export const QUERY_STYLE: ScopeErrorStyle = {
  code: "AuthorizationQueryParametersError",
  prefix: "Error parsing the X-Amz-Credential parameter; ",
};

/**
 * Parses "<AKID>/<yyyymmdd>/<region>/s3/aws4_request". Any region is accepted: the gateway
 * serves one namespace, and the region only feeds the signing key derivation.
 */
export function parseCredential(value: string, style: ScopeErrorStyle): ParsedCredential {
  const fail = (why: string) => new DomainError(style.code, style.prefix + why);
  const parts = value.split("/");
  const [accessKeyId, date, region, service, terminal] = parts;
  if (parts.length !== 5 || !accessKeyId || !date || !region || !service || !terminal) {
    throw fail('the Credential is mal-formed; expecting "<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request".');
  }
  if (!/^\d{8}$/.test(date)) throw fail(`invalid credential date "${date}".`);
  if (service !== "s3") throw fail(`incorrect service "${service}". This endpoint belongs to "s3".`);
  if (terminal !== "aws4_request") {
    throw fail(`incorrect terminal "${terminal}". This endpoint uses "aws4_request".`);
  }
  return { accessKeyId, scope: { date, region, service } };
}

/** The credential date must be the day of the request timestamp. */
export function checkScopeDate(scope: CredentialScope, amzDate: string, style: ScopeErrorStyle): void {
  if (scope.date !== amzDate.slice(0, 8)) {
    throw new DomainError(
      style.code,
      `${style.prefix}Invalid credential date "${scope.date}". This date is not the same as X-Amz-Date: "${amzDate.slice(0, 8)}".`,
    );
  }
}

export const scopeString = (s: CredentialScope): string => `${s.date}/${s.region}/${s.service}/aws4_request`;

const TOKEN = /^[a-z0-9!#$%&'*+.^_`|~-]+$/;

/** SignedHeaders: lower-case header names separated by ";". Undefined when malformed. */
export function parseSignedHeaders(value: string): string[] | undefined {
  const names = value.split(";");
  return names.every((n) => TOKEN.test(n)) ? names : undefined;
}
