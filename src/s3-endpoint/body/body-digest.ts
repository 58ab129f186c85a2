import { createHash, type Hash } from "node:crypto";
import { type ChecksumAlgorithm, createHasher, type Hasher } from "./checksum-algorithms.js";

/** What the storage layer keeps about a decoded body. */
export type BodyDigestResult = {
  /** MD5 of the decoded body, lower-case hex, when a Content-MD5 asked for it. */
  md5Hex?: string;
  /** Decoded byte count. */
  size: number;
  /** Base64 digests keyed by algorithm name (CRC32, CRC32C, SHA1, SHA256, CRC64NVME), for those computed. */
  checksums: Record<string, string>;
};

/**
 * Feeds the decoded bytes to every requested checksum in one pass, and to MD5 when a
 * Content-MD5 is to be verified (the storage layer computes the ETag's MD5 itself, so the
 * body is not hashed twice for nothing).
 */
export class BodyDigest {
  private readonly md5: Hash | null;
  private readonly hashers: Map<ChecksumAlgorithm, Hasher>;
  private readonly reported: ReadonlySet<ChecksumAlgorithm>;
  size = 0;

  /**
   * `reported` digests end up in the result (and so in storage); `internal` ones are only for
   * verification (the SHA-256 of a signed payload), so an object does not appear to carry a
   * checksum its client never asked for.
   */
  constructor(
    reported: Iterable<ChecksumAlgorithm>,
    internal: Iterable<ChecksumAlgorithm> = [],
    { md5 = true }: { md5?: boolean } = {},
  ) {
    this.md5 = md5 ? createHash("md5") : null;
    this.reported = new Set(reported);
    const all = new Set([...this.reported, ...internal]);
    this.hashers = new Map([...all].map((a) => [a, createHasher(a)]));
  }

  update(data: Buffer): void {
    this.size += data.length;
    this.md5?.update(data);
    for (const h of this.hashers.values()) h.update(data);
  }

  /** Call once, after the last update. Digests are returned raw for comparison and base64 for storage. */
  finish(): { result: BodyDigestResult; md5: Buffer | null; raw: Map<ChecksumAlgorithm, Buffer> } {
    const md5 = this.md5?.digest() ?? null;
    const raw = new Map([...this.hashers].map(([a, h]) => [a, h.digest()] as const));
    const checksums: Record<string, string> = {};
    for (const [a, d] of raw) if (this.reported.has(a)) checksums[a] = d.toString("base64");
    const result: BodyDigestResult = { size: this.size, checksums };
    if (md5) result.md5Hex = md5.toString("hex");
    return { result, md5, raw };
  }
}
