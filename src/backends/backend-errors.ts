import { DomainError } from "../core/errors.js";

// The codes and wording every backend answers with: the S3 layer cannot tell the backends apart.

export const noSuchBucket = (bucket: string) =>
  new DomainError("NoSuchBucket", "the specified bucket does not exist", { bucket });

export const noSuchKey = (bucket: string, key: string) =>
  new DomainError("NoSuchKey", "the specified key does not exist", { bucket, key });

export const noSuchUpload = (uploadId: string) =>
  new DomainError(
    "NoSuchUpload",
    "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.",
    { uploadId },
  );

/** A part of a completion replaced (or gone) while the upload was being assembled. */
export const partReplaced = (partNumber: number) =>
  new DomainError("InvalidPart", `part ${partNumber} was replaced while the upload was being completed`, {
    partNumber,
  });

/** The client went away before the commit: nothing is committed. */
export const abandoned = () =>
  new DomainError("IncompleteBody", "the request was abandoned before it committed");

/** A count or marker of a listing (maxKeys, maxUploads, maxParts, partNumberMarker). */
export function assertNonNegative(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new DomainError("InvalidArgument", `${name} must be a non-negative integer`);
  }
}
