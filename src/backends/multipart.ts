import { createHash } from "node:crypto";
import { DomainError } from "../core/errors.js";
import { normalizeEtag } from "../core/etag.js";
import { type CompletedPart, MAX_PART_NUMBER, MIN_PART_NUMBER, MIN_PART_SIZE } from "./storage-backend.js";

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

/** What a completion checks of a part a backend recorded. */
export type RecordedPart = { partNumber: number; md5: string; size: number };

/**
 * The recorded parts a completion names, in its order, checked against S3's rules: each must have
 * been uploaded with the ETag given (InvalidPart), and each but the last must be at least
 * MIN_PART_SIZE (EntityTooSmall). `find` looks a part up by number; `view` reads what is checked.
 */
export function selectParts<T>(
  wanted: readonly CompletedPart[],
  find: (partNumber: number) => T | undefined,
  view: (part: T) => RecordedPart,
): T[] {
  const used = wanted.map((part) => {
    const found = find(part.partNumber);
    if (found === undefined || bareEtag(part.etag) !== view(found).md5) {
      throw new DomainError(
        "InvalidPart",
        "One or more of the specified parts could not be found. The part may not have been uploaded, or the specified entity tag may not match the part's entity tag.",
        { partNumber: part.partNumber },
      );
    }
    return found;
  });
  used.forEach((found, i) => {
    const part = view(found);
    if (i < used.length - 1 && part.size < MIN_PART_SIZE) {
      throw new DomainError(
        "EntityTooSmall",
        "Your proposed upload is smaller than the minimum allowed size",
        {
          partNumber: part.partNumber,
          minSizeAllowed: MIN_PART_SIZE,
          proposedSize: part.size,
        },
      );
    }
  });
  return used;
}

/** `"<md5 of the concatenated binary part md5s>-N"`, as S3 computes a multipart ETag. */
export function multipartEtag(partMd5Hexes: readonly string[]): string {
  const md5 = createHash("md5");
  for (const hex of partMd5Hexes) md5.update(Buffer.from(hex, "hex"));
  return `"${md5.digest("hex")}-${partMd5Hexes.length}"`;
}

/** An ETag as a client may send it (quoted or not, weak or not) reduced to its bare value. */
export const bareEtag = normalizeEtag;
