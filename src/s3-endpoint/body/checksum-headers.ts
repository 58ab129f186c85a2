import { DomainError } from "../../core/errors.js";
import { headerValue, type RequestHeaders } from "../../http/sigv4/request-headers.js";
import {
  algorithmOfHeader,
  type ChecksumAlgorithm,
  decodeChecksumValue,
  parseAlgorithmName,
} from "./checksum-algorithms.js";

export type DeclaredChecksum = { algorithm: ChecksumAlgorithm; name: string; expected: Buffer };

export type ChecksumExpectations = {
  contentMd5: Buffer | undefined;
  /** At most one: S3 refuses several x-amz-checksum-* headers. */
  header: DeclaredChecksum | undefined;
  /** The checksum trailer announced by x-amz-trailer, verified when the trailer arrives. */
  trailer: ChecksumAlgorithm | undefined;
  /** x-amz-sdk-checksum-algorithm: computed (and stored) even if no value accompanies it. */
  sdkAlgorithm: ChecksumAlgorithm | undefined;
};

/** x-amz-checksum-* headers that are not checksums of the body. */
const NOT_A_CHECKSUM = new Set(["x-amz-checksum-mode", "x-amz-checksum-type", "x-amz-checksum-algorithm"]);

/**
 * Reads what the client says the body's digests are. Checksum *query* parameters are ignored
 * on purpose: presigned PutObject URLs from the AWS SDK carry the CRC of an empty body there.
 */
export function readChecksumHeaders(headers: RequestHeaders): ChecksumExpectations {
  const declared: DeclaredChecksum[] = [];
  for (const name of Object.keys(headers)) {
    if (!name.startsWith("x-amz-checksum-") || NOT_A_CHECKSUM.has(name)) continue;
    const value = headerValue(headers, name);
    if (value === undefined) continue;
    const algorithm = algorithmOfHeader(name);
    // An algorithm we cannot compute must not pass as verified.
    if (!algorithm) throw new DomainError("InvalidRequest", `The checksum header ${name} is not supported.`);
    const expected = decodeChecksumValue(algorithm, value.trim());
    if (!expected) throw new DomainError("InvalidRequest", `Value for ${name} header is invalid.`);
    declared.push({ algorithm, name, expected });
  }
  if (declared.length > 1) {
    throw new DomainError(
      "InvalidRequest",
      "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.",
    );
  }
  const trailer = readTrailerDeclaration(headers);
  const header = declared[0];
  if (header && trailer && header.algorithm !== trailer) {
    throw new DomainError(
      "InvalidRequest",
      "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.",
    );
  }
  const sdkValue = headerValue(headers, "x-amz-sdk-checksum-algorithm");
  let sdkAlgorithm: ChecksumAlgorithm | undefined;
  if (sdkValue !== undefined) {
    sdkAlgorithm = parseAlgorithmName(sdkValue);
    const named = header?.algorithm ?? trailer;
    if (!sdkAlgorithm || (named && named !== sdkAlgorithm)) {
      throw new DomainError("InvalidRequest", "Value for x-amz-sdk-checksum-algorithm header is invalid.");
    }
  }
  return { contentMd5: readContentMd5(headers), header, trailer, sdkAlgorithm };
}

function readTrailerDeclaration(headers: RequestHeaders): ChecksumAlgorithm | undefined {
  const value = headerValue(headers, "x-amz-trailer");
  if (value === undefined) return undefined;
  const names = value
    .split(",")
    .map((n) => n.trim().toLowerCase())
    .filter((n) => n !== "");
  const algorithms = names.map((n) => algorithmOfHeader(n));
  const [first] = algorithms;
  if (algorithms.length !== 1 || !first) {
    throw new DomainError("InvalidRequest", `The value "${value}" of x-amz-trailer is not supported.`);
  }
  return first;
}

function readContentMd5(headers: RequestHeaders): Buffer | undefined {
  const value = headerValue(headers, "content-md5");
  if (value === undefined) return undefined;
  const bytes = Buffer.from(value.trim(), "base64");
  if (bytes.length !== 16 || bytes.toString("base64") !== value.trim()) {
    throw new DomainError("InvalidDigest", "The Content-MD5 you specified was invalid.");
  }
  return bytes;
}
