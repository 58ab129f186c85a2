import { createHash, createHmac, type Hash, timingSafeEqual } from "node:crypto";
import { DomainError } from "../../core/errors.js";
import { EMPTY_SHA256 } from "../../http/sigv4/payload-hash.js";

type ChunkSigningContext = {
  signingKey: Buffer;
  amzDate: string;
  /** "<date>/<region>/s3/aws4_request" */
  scope: string;
  /** The verified request signature the chain starts from. */
  seedSignature: string;
};

const mismatch = (what: string) =>
  new DomainError(
    "SignatureDoesNotMatch",
    `The ${what} signature we calculated does not match the signature you provided. Check your key and signing method.`,
  );

const parseSignature = (value: string | undefined, what: string): Buffer => {
  if (value === undefined || !/^[0-9a-fA-F]{64}$/.test(value)) throw mismatch(what);
  return Buffer.from(value, "hex");
};

/**
 * Verifies the signature chain of a STREAMING-AWS4-HMAC-SHA256-PAYLOAD(-TRAILER) body: each
 * chunk is signed over the previous signature, so chunks cannot be dropped, reordered or
 * spliced from another upload without breaking the chain.
 */
export class ChunkSignatureChain {
  private previous: string;
  private hash: Hash | undefined;
  private provided: Buffer | undefined;

  constructor(private readonly ctx: ChunkSigningContext) {
    this.previous = ctx.seedSignature.toLowerCase();
  }

  beginChunk(signature: string | undefined): void {
    this.provided = parseSignature(signature, "chunk");
    this.hash = createHash("sha256");
  }

  update(data: Buffer): void {
    this.hash?.update(data);
  }

  endChunk(): void {
    if (!this.hash || !this.provided) throw mismatch("chunk");
    const stringToSign = [
      "AWS4-HMAC-SHA256-PAYLOAD",
      this.ctx.amzDate,
      this.ctx.scope,
      this.previous,
      EMPTY_SHA256,
      this.hash.digest("hex"),
    ].join("\n");
    this.previous = this.check(stringToSign, this.provided, "chunk");
    this.hash = undefined;
    this.provided = undefined;
  }

  /** Trailer lines are signed as "name:value\n" each, in the order sent. */
  verifyTrailer(trailers: readonly (readonly [string, string])[], signature: string | undefined): void {
    const provided = parseSignature(signature, "trailer");
    const canonical = trailers.map(([n, v]) => `${n}:${v}\n`).join("");
    const stringToSign = [
      "AWS4-HMAC-SHA256-TRAILER",
      this.ctx.amzDate,
      this.ctx.scope,
      this.previous,
      createHash("sha256").update(canonical, "utf8").digest("hex"),
    ].join("\n");
    this.previous = this.check(stringToSign, provided, "trailer");
  }

  private check(stringToSign: string, provided: Buffer, what: string): string {
    const expected = createHmac("sha256", this.ctx.signingKey).update(stringToSign, "utf8").digest();
    if (!timingSafeEqual(expected, provided)) throw mismatch(what);
    return expected.toString("hex");
  }
}
