import { Transform, type TransformCallback } from "node:stream";
import { DomainError } from "../../core/errors.js";
import { AwsChunkedParser, type Trailer } from "./aws-chunked-parser.js";
import { BodyDigest, type BodyDigestResult } from "./body-digest.js";
import type { BodyMode } from "./body-mode.js";
import { type ChecksumAlgorithm, checksumHeaderName, decodeChecksumValue } from "./checksum-algorithms.js";
import type { ChecksumExpectations } from "./checksum-headers.js";
import type { ChunkSignatureChain } from "./chunk-signature.js";

type DecoderPlan = {
  mode: BodyMode;
  expectations: ChecksumExpectations;
  /** Checksums to compute and report. */
  algorithms: ReadonlySet<ChecksumAlgorithm>;
  /** Present for signed aws-chunked bodies. */
  chain: ChunkSignatureChain | undefined;
  /** The decoded length the client announced (x-amz-decoded-content-length / Content-Length). */
  expectedLength: number | undefined;
  maxSize: number;
};

const TRAILER_SIGNATURE = "x-amz-trailer-signature";

/**
 * Decodes and verifies in one pass. Bytes are released as they arrive (never the whole body
 * in memory), so a verification failure surfaces as a stream error before 'end': consumers
 * must treat only a clean end as a valid body and discard what they wrote otherwise.
 */
export class RequestBodyDecoder extends Transform {
  readonly done: Promise<BodyDigestResult>;
  private settle!: { resolve: (r: BodyDigestResult) => void; reject: (e: unknown) => void };
  private settled = false;
  private readonly digest: BodyDigest;
  private readonly parser: AwsChunkedParser | undefined;

  constructor(private readonly plan: DecoderPlan) {
    super();
    this.done = new Promise((resolve, reject) => {
      this.settle = {
        resolve: (r) => {
          this.settled = true;
          resolve(r);
        },
        reject: (e) => {
          this.settled = true;
          reject(e);
        },
      };
    });
    // The stream's own error is what consumers see; the promise must not add an unhandled rejection.
    this.done.catch(() => {});
    this.once("error", (e) => this.settle.reject(e));
    // (Only when nothing settled it: an error built on every close would cost a stack trace per PUT.)
    this.once("close", () => {
      if (!this.settled) {
        this.settle.reject(new DomainError("IncompleteBody", "The request body was not completely read"));
      }
    });
    const verifyOnly: ChecksumAlgorithm[] =
      plan.mode.kind === "plain" && plan.mode.sha256Hex !== undefined ? ["SHA256"] : [];
    this.digest = new BodyDigest(plan.algorithms, verifyOnly, {
      md5: plan.expectations.contentMd5 !== undefined,
    });
    const chain = plan.chain;
    this.parser =
      plan.mode.kind === "chunked"
        ? new AwsChunkedParser({
            chunkStart: (size, signature) => {
              this.checkLength(size);
              chain?.beginChunk(signature);
            },
            data: (bytes) => this.accept(bytes),
            chunkEnd: () => chain?.endChunk(),
          })
        : undefined;
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    try {
      if (this.parser) this.parser.write(chunk);
      else this.accept(chunk);
      callback();
    } catch (e) {
      callback(e as Error);
    }
  }

  override _flush(callback: TransformCallback): void {
    let result: BodyDigestResult;
    try {
      result = this.verify();
    } catch (e) {
      callback(e as Error);
      return;
    }
    this.settle.resolve(result);
    callback();
  }

  private accept(bytes: Buffer): void {
    this.checkLength(bytes.length);
    this.digest.update(bytes);
    this.plan.chain?.update(bytes);
    this.push(bytes);
  }

  /** Fails as soon as the body grows past what was announced or allowed, not at the end. */
  private checkLength(more: number): void {
    const size = this.digest.size + more;
    if (size > this.plan.maxSize) {
      throw new DomainError("EntityTooLarge", "Your proposed upload exceeds the maximum allowed size", {
        MaxSizeAllowed: String(this.plan.maxSize),
      });
    }
    if (this.plan.expectedLength !== undefined && size > this.plan.expectedLength) {
      throw new DomainError(
        "IncompleteBody",
        "The decoded body is longer than the length the request announced.",
      );
    }
  }

  private verify(): BodyDigestResult {
    const trailers = this.parser?.end() ?? [];
    const { result, md5, raw } = this.digest.finish();
    const { mode, expectations } = this.plan;
    if (this.plan.expectedLength !== undefined && result.size !== this.plan.expectedLength) {
      throw new DomainError(
        "IncompleteBody",
        "You did not provide the number of bytes specified by the Content-Length HTTP header.",
      );
    }
    const trailerChecksum = this.checkTrailers(trailers);
    if (mode.kind === "plain" && mode.sha256Hex !== undefined) {
      const computed = raw.get("SHA256")!.toString("hex");
      if (computed !== mode.sha256Hex) {
        throw new DomainError(
          "XAmzContentSHA256Mismatch",
          "The provided 'x-amz-content-sha256' header does not match what was computed.",
          { ClientComputedContentSHA256: mode.sha256Hex, S3ComputedContentSHA256: computed },
        );
      }
    }
    if (expectations.contentMd5 && !(md5 && expectations.contentMd5.equals(md5))) {
      throw new DomainError("BadDigest", "The Content-MD5 you specified did not match what we received.");
    }
    for (const declared of [expectations.header, trailerChecksum]) {
      if (declared && !declared.expected.equals(raw.get(declared.algorithm)!)) {
        throw new DomainError(
          "BadDigest",
          `The ${declared.algorithm} you specified did not match the calculated checksum.`,
        );
      }
    }
    return result;
  }

  /** Checks trailer framing and signature; returns the declared checksum trailer's value. */
  private checkTrailers(trailers: Trailer[]): { algorithm: ChecksumAlgorithm; expected: Buffer } | undefined {
    const { mode, expectations, chain } = this.plan;
    if (mode.kind !== "chunked") return undefined;
    const signature = trailers.find(([n]) => n === TRAILER_SIGNATURE);
    const values = trailers.filter(([n]) => n !== TRAILER_SIGNATURE);
    if (mode.signed && !mode.trailers && trailers.length > 0) {
      throw new DomainError(
        "InvalidRequest",
        "Trailers are not allowed with STREAMING-AWS4-HMAC-SHA256-PAYLOAD.",
      );
    }
    if (chain && mode.trailers && trailers.length > 0) chain.verifyTrailer(values, signature?.[1]);
    if (!chain && signature) throw new DomainError("InvalidRequest", "Unexpected x-amz-trailer-signature.");
    const declared = expectations.trailer;
    const declaredName = declared && checksumHeaderName(declared);
    for (const [name] of values) {
      if (name !== declaredName) {
        throw new DomainError("InvalidRequest", `The trailer ${name} was not declared in x-amz-trailer.`);
      }
    }
    if (!declared) return undefined;
    if (values.length !== 1) {
      throw new DomainError(
        "InvalidRequest",
        values.length === 0
          ? `The ${declaredName} trailer declared in x-amz-trailer is missing.`
          : `The ${declaredName} trailer is repeated.`,
      );
    }
    const expected = decodeChecksumValue(declared, values[0]![1]);
    if (!expected)
      throw new DomainError("InvalidRequest", `Value for ${declaredName} trailing header is invalid.`);
    return { algorithm: declared, expected };
  }
}
