import { createHash, timingSafeEqual } from "node:crypto";
import { DomainError } from "../../core/errors.js";
import { canonicalHeaders } from "./canonical-headers.js";
import { canonicalUriCandidates } from "./canonical-uri.js";
import { canonicalQueryCandidates, decodeQueryComponent, type RawQueryParam } from "./query-string.js";
import type { RequestHeaders } from "./request-headers.js";
import { hmacSha256 } from "./signing-key.js";

type SignatureInput = {
  method: string;
  rawPath: string;
  params: readonly RawQueryParam[];
  headers: RequestHeaders;
  signedHeaders: readonly string[];
  payloadHash: string;
  amzDate: string;
  scope: string;
  signingKey: Buffer;
  accessKeyId: string;
  /** As the client sent it; compared case-insensitively, in constant time. */
  providedSignature: string;
};

/**
 * Node hands over header values as latin1 strings (one character per byte received), and
 * the rest of the canonical request is ASCII after re-encoding, so hashing the latin1 bytes
 * hashes exactly the bytes on the wire — as S3 does. UTF-8 user metadata then verifies.
 */
const sha256Hex = (s: string): string => createHash("sha256").update(s, "latin1").digest("hex");

const isSignatureParam = (rawName: string): boolean =>
  decodeQueryComponent(rawName).toLowerCase() === "x-amz-signature";

/**
 * Verifies the request signature and returns it (lower-case hex, the seed of any chunk
 * signatures). Clients disagree on a few encodings that a server cannot tell apart (path
 * characters left unescaped, "+" as space in queries), so each plausible canonical form —
 * at most four — is tried; all are fixed functions of the received bytes, so a match still
 * proves the client signed exactly this request.
 */
export function verifySignature(input: SignatureInput): string {
  const provided = input.providedSignature.toLowerCase();
  const providedBytes = /^[0-9a-f]{64}$/.test(provided) ? Buffer.from(provided, "hex") : undefined;
  const headerBlock = canonicalHeaders(input.headers, input.signedHeaders);
  const signedList = input.signedHeaders.join(";");
  let first: { canonicalRequest: string; stringToSign: string } | undefined;
  for (const uri of canonicalUriCandidates(input.rawPath)) {
    for (const query of canonicalQueryCandidates(input.params, isSignatureParam)) {
      const canonicalRequest = [input.method, uri, query, headerBlock, signedList, input.payloadHash].join(
        "\n",
      );
      const stringToSign = ["AWS4-HMAC-SHA256", input.amzDate, input.scope, sha256Hex(canonicalRequest)].join(
        "\n",
      );
      first ??= { canonicalRequest, stringToSign };
      const expected = hmacSha256(input.signingKey, stringToSign);
      if (providedBytes && timingSafeEqual(expected, providedBytes)) return provided;
    }
  }
  throw new DomainError(
    "SignatureDoesNotMatch",
    "The request signature we calculated does not match the signature you provided. Check your key and signing method.",
    {
      AWSAccessKeyId: input.accessKeyId,
      StringToSign: first?.stringToSign ?? "",
      SignatureProvided: input.providedSignature,
      CanonicalRequest: first?.canonicalRequest ?? "",
    },
  );
}
