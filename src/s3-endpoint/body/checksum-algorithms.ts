import { createHash } from "node:crypto";
import { crc32 } from "node:zlib";
import { crc32c } from "./crc32c.js";
import { Crc64Nvme } from "./crc64nvme.js";

/** The flexible-checksum algorithms of S3 (x-amz-checksum-<lower-case name>). */
export type ChecksumAlgorithm = "CRC32" | "CRC32C" | "SHA1" | "SHA256" | "CRC64NVME";

export const CHECKSUM_ALGORITHMS: readonly ChecksumAlgorithm[] = [
  "CRC32",
  "CRC32C",
  "SHA1",
  "SHA256",
  "CRC64NVME",
];

export type Hasher = { update(data: Buffer): void; digest(): Buffer };

const DIGEST_LENGTH: Readonly<Record<ChecksumAlgorithm, number>> = {
  CRC32: 4,
  CRC32C: 4,
  SHA1: 20,
  SHA256: 32,
  CRC64NVME: 8,
};

export const checksumHeaderName = (algorithm: ChecksumAlgorithm): string =>
  `x-amz-checksum-${algorithm.toLowerCase()}`;

/** The algorithm a header or trailer name such as x-amz-checksum-crc32 stands for. */
export function algorithmOfHeader(name: string): ChecksumAlgorithm | undefined {
  return CHECKSUM_ALGORITHMS.find((a) => checksumHeaderName(a) === name.toLowerCase());
}

/** An algorithm name as clients write it (x-amz-sdk-checksum-algorithm: crc32 or CRC32). */
export function parseAlgorithmName(name: string): ChecksumAlgorithm | undefined {
  return CHECKSUM_ALGORITHMS.find((a) => a === name.trim().toUpperCase());
}

const uint32 = (value: number): Buffer => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(value >>> 0);
  return b;
};

class RunningCrc32 implements Hasher {
  constructor(
    private readonly fn: (data: Buffer, previous: number) => number,
    private value = 0,
  ) {}
  update(data: Buffer): void {
    this.value = this.fn(data, this.value);
  }
  digest(): Buffer {
    return uint32(this.value);
  }
}

export function createHasher(algorithm: ChecksumAlgorithm): Hasher {
  switch (algorithm) {
    case "CRC32":
      return new RunningCrc32(crc32);
    case "CRC32C":
      return new RunningCrc32(crc32c);
    case "CRC64NVME":
      return new Crc64Nvme();
    case "SHA1":
      return createHash("sha1");
    case "SHA256":
      return createHash("sha256");
  }
}

/**
 * Decodes a checksum value as sent (base64). Only the canonical padded encoding of exactly the
 * algorithm's digest length is accepted, so a value never silently compares as a prefix.
 */
export function decodeChecksumValue(algorithm: ChecksumAlgorithm, value: string): Buffer | undefined {
  const bytes = Buffer.from(value, "base64");
  return bytes.length === DIGEST_LENGTH[algorithm] && bytes.toString("base64") === value ? bytes : undefined;
}
