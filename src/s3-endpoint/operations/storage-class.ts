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

/**
 * What a write (PutObject, CopyObject, CreateMultipartUpload) asks of the stored object beyond its
 * bytes and metadata: accepted when fencegate does it or it changes nothing here, refused when it
 * would be silently dropped (tags, customer or KMS keys, object lock), never stored as if honoured.
 */
export function checkObjectOptions(req: S3Request): void {
  checkStorageClass(req);
  if ((requested(req, "x-amz-tagging") ?? "").trim() !== "") {
    throw new DomainError("NotImplemented", "object tags (x-amz-tagging) are not stored by fencegate");
  }
  const sse = requested(req, "x-amz-server-side-encryption")?.trim();
  if (sse !== undefined && sse !== "AES256") {
    if (!sse.startsWith("aws:kms")) {
      throw new DomainError("InvalidArgument", "The encryption method specified is not supported", {
        ArgumentName: "x-amz-server-side-encryption",
        ArgumentValue: sse.slice(0, 64),
      });
    }
    throw new DomainError(
      "NotImplemented",
      "server-side encryption with KMS keys is not implemented by fencegate",
    );
  }
  if (requested(req, "x-amz-server-side-encryption-customer-algorithm") !== undefined) {
    throw new DomainError(
      "NotImplemented",
      "server-side encryption with customer-provided keys (SSE-C) is not implemented by fencegate",
    );
  }
  const lock = [
    "x-amz-object-lock-mode",
    "x-amz-object-lock-retain-until-date",
    "x-amz-object-lock-legal-hold",
  ];
  if (lock.some((name) => requested(req, name) !== undefined)) {
    throw new DomainError("InvalidRequest", "Bucket is missing Object Lock Configuration");
  }
}

/** x-amz-storage-class on a write: a name S3 does not know is refused as S3 refuses it. */
function checkStorageClass(req: S3Request): void {
  const value = requested(req, "x-amz-storage-class");
  if (value !== undefined && !STORAGE_CLASSES.has(value.trim())) {
    throw new DomainError("InvalidStorageClass", "The storage class you specified is not valid", {
      StorageClassRequested: value.slice(0, 64),
    });
  }
}
