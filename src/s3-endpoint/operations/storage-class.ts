import { DomainError } from "../../core/errors.js";
import type { S3Request } from "../protocol/context.js";
import { requested } from "./acl-request.js";

/** S3's storage classes. All objects here are stored alike; listings report STANDARD. */
const STORAGE_CLASSES: ReadonlySet<string> = new Set([
  "STANDARD",
  "REDUCED_REDUNDANCY",
  "STANDARD_IA",
  "ONEZONE_IA",
  "INTELLIGENT_TIERING",
  "GLACIER",
  "DEEP_ARCHIVE",
  "OUTPOSTS",
  "GLACIER_IR",
  "SNOW",
  "EXPRESS_ONEZONE",
]);

/** x-amz-storage-class on a write: a name S3 does not know is refused as S3 refuses it. */
export function checkStorageClass(req: S3Request): void {
  const value = requested(req, "x-amz-storage-class");
  if (value !== undefined && !STORAGE_CLASSES.has(value.trim())) {
    throw new DomainError("InvalidStorageClass", "The storage class you specified is not valid", {
      StorageClassRequested: value.slice(0, 64),
    });
  }
}
