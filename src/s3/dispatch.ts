import { DomainError } from "../core/errors.js";
import type { S3Operation, S3Request } from "./context.js";
import {
  createBucket,
  deleteBucket,
  getBucketLocation,
  headBucket,
  listBuckets,
} from "./operations/buckets.js";
import { copyObject } from "./operations/copy-object.js";
import { deleteObjects } from "./operations/delete-objects.js";
import { listObjectsV1, listObjectsV2 } from "./operations/list-objects.js";
import { listObjectVersions } from "./operations/list-versions.js";
import { selectMultipartOperation } from "./operations/multipart.js";
import { deleteObject, getObject, headObject, putObject } from "./operations/objects.js";
import {
  DEFAULT_DOCUMENT_SUBRESOURCES,
  defaultDocument,
  getBucketAcl,
  getObjectAcl,
  getObjectTagging,
  NOT_CONFIGURED_SUBRESOURCES,
  notConfigured,
} from "./operations/unconfigured.js";

/** Sub-resources S3 defines that this gateway does not serve: answered with NotImplemented. */
const UNSUPPORTED_BUCKET_SUBRESOURCES = [
  "acl",
  "policy",
  "cors",
  "lifecycle",
  "versioning",
  "website",
  "tagging",
  "notification",
  "replication",
  "encryption",
  "logging",
  "object-lock",
  "ownershipControls",
  "publicAccessBlock",
  "requestPayment",
  "accelerate",
  "analytics",
  "inventory",
  "metrics",
  "intelligent-tiering",
];

/** Picks the S3 operation from the method, the address and the query's sub-resources. */
export function selectOperation(req: S3Request): { name: string; run: S3Operation } {
  const { method, bucket, key, query } = req;
  const m = method === "HEAD" ? "HEAD" : method;
  if (bucket === null) {
    if (m === "GET") return { name: "ListBuckets", run: listBuckets };
    throw methodNotAllowed();
  }
  const multipart = selectMultipartOperation(req);
  if (multipart) return multipart;
  if (key === null) {
    if (m === "GET") {
      if (query.has("location")) return { name: "GetBucketLocation", run: getBucketLocation };
      if (query.has("versions")) return { name: "ListObjectVersions", run: listObjectVersions };
      for (const sub of DEFAULT_DOCUMENT_SUBRESOURCES) {
        if (query.has(sub)) return { name: `GetBucket.${sub}`, run: defaultDocument(sub)! };
      }
      if (query.has("acl")) return { name: "GetBucketAcl", run: getBucketAcl };
      for (const sub of NOT_CONFIGURED_SUBRESOURCES) {
        if (query.has(sub)) return { name: `GetBucket.${sub}`, run: notConfigured(sub)! };
      }
      rejectUnsupported(query);
      if (query.get("list-type") === "2") return { name: "ListObjectsV2", run: listObjectsV2 };
      return { name: "ListObjects", run: listObjectsV1 };
    }
    rejectUnsupported(query);
    if (m === "POST" && query.has("delete")) return { name: "DeleteObjects", run: deleteObjects };
    if (m === "PUT") return { name: "CreateBucket", run: createBucket };
    if (m === "HEAD") return { name: "HeadBucket", run: headBucket };
    if (m === "DELETE") return { name: "DeleteBucket", run: deleteBucket };
    throw methodNotAllowed();
  }
  if (m === "GET" && query.has("acl")) return { name: "GetObjectAcl", run: getObjectAcl };
  if (m === "GET" && query.has("tagging")) return { name: "GetObjectTagging", run: getObjectTagging };
  rejectUnsupported(query, ["acl", "tagging", "retention", "legal-hold", "torrent", "restore", "select"]);
  if (m === "PUT") {
    if (req.headers["x-amz-copy-source"] !== undefined) return { name: "CopyObject", run: copyObject };
    return { name: "PutObject", run: putObject };
  }
  if (m === "GET") return { name: "GetObject", run: getObject };
  if (m === "HEAD") return { name: "HeadObject", run: headObject };
  if (m === "DELETE") return { name: "DeleteObject", run: deleteObject };
  throw methodNotAllowed();
}

function rejectUnsupported(query: URLSearchParams, names = UNSUPPORTED_BUCKET_SUBRESOURCES): void {
  for (const name of names) {
    if (query.has(name)) {
      throw new DomainError("NotImplemented", `the ${name} sub-resource is not implemented by fencegate`);
    }
  }
}

function methodNotAllowed(): DomainError {
  return new DomainError("InvalidRequest", "The specified method is not allowed against this resource.", {
    s3Code: "MethodNotAllowed",
  });
}
