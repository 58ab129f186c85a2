import type { Readable } from "node:stream";
import { DomainError } from "../../core/errors.js";
import { scopeString } from "../../http/sigv4/credential-scope.js";
import { UNSIGNED_PAYLOAD } from "../../http/sigv4/payload-hash.js";
import { headerValue, type RequestHeaders } from "../../http/sigv4/request-headers.js";
import type { AuthResult } from "../../http/sigv4/sigv4.js";
import type { BodyDigestResult } from "./body-digest.js";
import { bodyModeOf } from "./body-mode.js";
import type { ChecksumAlgorithm } from "./checksum-algorithms.js";
import { readChecksumHeaders } from "./checksum-headers.js";
import { ChunkSignatureChain } from "./chunk-signature.js";
import { RequestBodyDecoder } from "./request-body-decoder.js";

/** The parts of an authentication result the body layer needs. */
export type BodyAuth = Pick<
  AuthResult,
  "payloadHash" | "signingKey" | "scope" | "seedSignature" | "amzDate" | "presigned"
>;

export type DecodeRequestBodyOptions = {
  /** The raw request body (the IncomingMessage itself). It is piped, never destroyed here. */
  body: Readable;
  headers: RequestHeaders;
  /** The request's authentication; its payloadHash decides the framing. Required for signed chunks. */
  auth?: BodyAuth;
  /** Checksums to compute even if the request names none (e.g. CRC64NVME, S3's default). */
  computeChecksums?: readonly ChecksumAlgorithm[];
  /** Largest decoded body accepted (EntityTooLarge beyond). Default: unlimited. */
  maxSize?: number;
};

type DecodedRequestBody = {
  /** The decoded object bytes; errors (DomainError) instead of ending if verification fails. */
  stream: Readable;
  /** Resolves once the whole body is verified; rejects with the stream's error. */
  digest: Promise<BodyDigestResult>;
};

/**
 * Turns a request body into the object's bytes, verifying whatever the request promised:
 * payload hash, chunk and trailer signatures, decoded length, Content-MD5 and checksum
 * headers or trailers. Problems visible from the headers alone throw DomainError here.
 */
export function decodeRequestBody(options: DecodeRequestBodyOptions): DecodedRequestBody {
  const { body, headers, auth } = options;
  const payloadHash = auth?.payloadHash ?? headerValue(headers, "x-amz-content-sha256") ?? UNSIGNED_PAYLOAD;
  const mode = bodyModeOf(payloadHash);
  const expectations = readChecksumHeaders(headers);
  if (expectations.trailer && !(mode.kind === "chunked" && mode.trailers)) {
    throw new DomainError(
      "InvalidRequest",
      `x-amz-trailer cannot be used with x-amz-content-sha256: ${payloadHash}.`,
    );
  }
  let chain: ChunkSignatureChain | undefined;
  if (mode.kind === "chunked" && mode.signed) {
    if (!auth || auth.presigned) {
      throw new DomainError("InvalidRequest", `${payloadHash} requires Authorization header authentication.`);
    }
    chain = new ChunkSignatureChain({
      signingKey: auth.signingKey,
      amzDate: auth.amzDate,
      scope: scopeString(auth.scope),
      seedSignature: auth.seedSignature,
    });
  }
  const expectedLength =
    mode.kind === "chunked"
      ? lengthHeader(headers, "x-amz-decoded-content-length")
      : headerValue(headers, "transfer-encoding") === undefined
        ? lengthHeader(headers, "content-length")
        : undefined;
  const maxSize = options.maxSize ?? Number.POSITIVE_INFINITY;
  if (expectedLength !== undefined && expectedLength > maxSize) {
    throw new DomainError("EntityTooLarge", "Your proposed upload exceeds the maximum allowed size", {
      ProposedSize: String(expectedLength),
      MaxSizeAllowed: String(maxSize),
    });
  }
  const algorithms = new Set<ChecksumAlgorithm>(options.computeChecksums ?? []);
  for (const a of [expectations.header?.algorithm, expectations.trailer, expectations.sdkAlgorithm]) {
    if (a) algorithms.add(a);
  }

  const decoder = new RequestBodyDecoder({ mode, expectations, algorithms, chain, expectedLength, maxSize });
  connect(body, decoder);
  return { stream: decoder, digest: decoder.done };
}

function lengthHeader(headers: RequestHeaders, name: string): number | undefined {
  const value = headerValue(headers, name);
  if (value === undefined) return undefined;
  const n = Number(value.trim());
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n)) {
    throw new DomainError("InvalidArgument", `Invalid ${name} header.`, {
      ArgumentName: name,
      ArgumentValue: value,
    });
  }
  return n;
}

/**
 * pipe(), not pipeline(): on a verification error the source must stay alive (destroying an
 * IncomingMessage destroys its socket, and the client would never see the S3 error response).
 */
function connect(body: Readable, decoder: RequestBodyDecoder): void {
  const cut = (cause?: unknown) => {
    if (decoder.destroyed) return;
    decoder.destroy(
      new DomainError("IncompleteBody", "The request body terminated unexpectedly", {}, { cause }),
    );
  };
  body.on("error", cut);
  body.on("close", () => {
    if (!body.readableEnded) cut();
  });
  body.pipe(decoder);
}
