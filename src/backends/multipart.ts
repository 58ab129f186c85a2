import { createHash } from "node:crypto";
import { DomainError } from "../core/errors.js";
import { type CompletedPart, MAX_PART_NUMBER, MIN_PART_NUMBER } from "./storage-backend.js";

/** S3's multipart rules that every backend applies the same way. */

export function assertPartNumber(partNumber: number): void {
  if (!Number.isSafeInteger(partNumber) || partNumber < MIN_PART_NUMBER || partNumber > MAX_PART_NUMBER) {
    throw new DomainError(
      "InvalidArgument",
      `Part number must be an integer between ${MIN_PART_NUMBER} and ${MAX_PART_NUMBER}, inclusive`,
      { partNumber },
    );
  }
}

/** The part list of a completion must name each part once, in ascending order. */
export function assertPartOrder(parts: readonly CompletedPart[]): void {
  if (parts.length === 0) throw new DomainError("MalformedXML", "You must specify at least one part");
  let previous = 0;
  for (const part of parts) {
    if (
      !Number.isSafeInteger(part.partNumber) ||
      part.partNumber < MIN_PART_NUMBER ||
      part.partNumber > MAX_PART_NUMBER
    ) {
      throw new DomainError("InvalidPart", `part number ${part.partNumber} is not a valid part number`, {
        partNumber: part.partNumber,
      });
    }
    if (part.partNumber <= previous) {
      throw new DomainError(
        "InvalidPartOrder",
        "The list of parts was not in ascending order. Parts must be ordered by part number.",
        { partNumber: part.partNumber },
      );
    }
    previous = part.partNumber;
  }
}

/** `"<md5 of the concatenated binary part md5s>-N"`, as S3 computes a multipart ETag. */
export function multipartEtag(partMd5Hexes: readonly string[]): string {
  const md5 = createHash("md5");
  for (const hex of partMd5Hexes) md5.update(Buffer.from(hex, "hex"));
  return `"${md5.digest("hex")}-${partMd5Hexes.length}"`;
}

/** An ETag as a client may send it (quoted or not, weak or not) reduced to its bare value. */
export { normalizeEtag as bareEtag } from "../core/etag.js";
