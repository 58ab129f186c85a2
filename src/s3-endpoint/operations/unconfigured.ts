import { DomainError, type DomainErrorCode } from "../../core/errors.js";
import type { S3Operation } from "../protocol/context.js";
import type { XmlNode } from "../protocol/xml.js";
import { bucketOf, ownerOf } from "./buckets.js";
import { objectTarget } from "./objects.js";

/**
 * Read-only answers for bucket and object settings fencegate does not manage. Tools ask for
 * them (sync, info, ls); they get what S3 says for a bucket where nothing was ever configured.
 */

/** Bucket settings whose S3 answer, when never configured, is a default document. */
const DEFAULT_DOCUMENTS: Record<string, { root: string; body: XmlNode }> = {
  versioning: { root: "VersioningConfiguration", body: {} },
  requestPayment: { root: "RequestPaymentConfiguration", body: { Payer: "BucketOwner" } },
  logging: { root: "BucketLoggingStatus", body: {} },
  notification: { root: "NotificationConfiguration", body: {} },
  accelerate: { root: "AccelerateConfiguration", body: {} },
};

export function defaultDocument(subresource: string): S3Operation | undefined {
  const doc = DEFAULT_DOCUMENTS[subresource];
  if (!doc) return undefined;
  return async (req, { backend }) => {
    await backend.headBucket(bucketOf(req));
    return { status: 200, xml: doc };
  };
}

export const DEFAULT_DOCUMENT_SUBRESOURCES = Object.keys(DEFAULT_DOCUMENTS);

const fullControlAcl = (principal: string) => {
  const owner = ownerOf(principal);
  return {
    Owner: owner,
    AccessControlList: {
      Grant: {
        // s3cmd (info, setacl) and boto read the grantee's type from xsi:type, as S3 sends it.
        Grantee: {
          "@xmlns:xsi": "http://www.w3.org/2001/XMLSchema-instance",
          "@xsi:type": "CanonicalUser",
          ID: owner.ID,
          DisplayName: owner.DisplayName,
        },
        Permission: "FULL_CONTROL",
      },
    },
  };
};

export const getBucketAcl: S3Operation = async (req, { backend }) => {
  await backend.headBucket(bucketOf(req));
  return { status: 200, xml: { root: "AccessControlPolicy", body: fullControlAcl(req.principal) } };
};

export const getObjectAcl: S3Operation = async (req, { backend }) => {
  const { bucket, key } = objectTarget(req);
  await backend.headObject(bucket, key);
  return { status: 200, xml: { root: "AccessControlPolicy", body: fullControlAcl(req.principal) } };
};

export const getObjectTagging: S3Operation = async (req, { backend }) => {
  const { bucket, key } = objectTarget(req);
  await backend.headObject(bucket, key);
  return { status: 200, xml: { root: "Tagging", body: { TagSet: {} } } };
};

/** Settings that are never configured: S3's "not found" answer for each. */
const NOT_CONFIGURED: Record<string, [code: DomainErrorCode, message: string]> = {
  policy: ["NoSuchBucketPolicy", "The bucket policy does not exist"],
  cors: ["NoSuchCORSConfiguration", "The CORS configuration does not exist"],
  lifecycle: ["NoSuchLifecycleConfiguration", "The lifecycle configuration does not exist"],
  tagging: ["NoSuchTagSet", "The TagSet does not exist"],
  website: ["NoSuchWebsiteConfiguration", "The specified bucket does not have a website configuration"],
  encryption: [
    "ServerSideEncryptionConfigurationNotFoundError",
    "The server side encryption configuration was not found",
  ],
  "object-lock": [
    "ObjectLockConfigurationNotFoundError",
    "Object Lock configuration does not exist for this bucket",
  ],
  ownershipControls: ["OwnershipControlsNotFoundError", "The bucket ownership controls were not found"],
  publicAccessBlock: [
    "NoSuchPublicAccessBlockConfiguration",
    "The public access block configuration was not found",
  ],
  replication: ["ReplicationConfigurationNotFoundError", "The replication configuration was not found"],
};

export function notConfigured(subresource: string): S3Operation | undefined {
  const entry = NOT_CONFIGURED[subresource];
  if (!entry) return undefined;
  const [code, message] = entry;
  return async (req, { backend }) => {
    await backend.headBucket(bucketOf(req));
    throw new DomainError(code, message);
  };
}

export const NOT_CONFIGURED_SUBRESOURCES = Object.keys(NOT_CONFIGURED);
