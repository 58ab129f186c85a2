import { DomainError } from "../core/errors.js";
import { putBucketAcl, putObjectAcl } from "./operations/acl.js";
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
import {
  abortMultipartUpload,
  completeMultipartUpload,
  createMultipartUpload,
  listMultipartUploads,
  listParts,
  uploadPart,
  uploadPartCopy,
} from "./operations/multipart.js";
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
import { type Need, type Needs, readOrWrite } from "./protocol/access.js";
import type { S3Operation, S3Request } from "./protocol/context.js";

/**
 * The S3 operations, in the order they are matched. Adding an operation is one row here and one
 * operation file. Dispatch takes the first row that matches; `write` marks the operations whose
 * every refusal is a write decision and goes to the audit log.
 */
type Route = {
  name: string;
  /** What the request addresses: no bucket, a bucket, or an object. */
  target: "service" | "bucket" | "object";
  /** HTTP methods (HEAD is matched as itself). */
  methods: readonly string[];
  /** Query sub-resources that must all be present. */
  query?: readonly string[];
  /**
   * Further query parameters a route that changes something takes (besides `query` and the
   * parameters every request may carry, CARRIED_PARAMS): any other one is refused (400), never
   * ignored (`DELETE /bucket?someNewSubresource` must not delete the bucket).
   */
  params?: readonly string[];
  /** A further condition on the request. */
  when?: (req: S3Request) => boolean;
  /** A fenced write: carries a token, and its refusals are audited. */
  write?: boolean;
  /**
   * The rights the caller needs (src/access), checked by the handler before `run`: nothing runs,
   * no body is read, for a caller without them. Required, so no route can forget it.
   */
  access: Needs;
  /**
   * An operation S3 defines and fencegate does not implement, whose answer (501 NotImplemented,
   * with this message) is the same for every caller: given before authentication, for requests
   * that S3 authenticates some other way (an HTML form's signed policy).
   */
  notImplemented?: string;
  run: S3Operation;
};

const READ_KEY: readonly Need[] = [{ action: "read", on: "key" }];
const WRITE_KEY: readonly Need[] = [{ action: "write", on: "key" }];
const COPY: readonly Need[] = [...WRITE_KEY, { action: "read", on: "copy-source" }];
const LIST: readonly Need[] = [{ action: "read", on: "prefix" }];
const PROBE_BUCKET: readonly Need[] = [{ action: "read", on: "somewhere" }];
const WHOLE_BUCKET: readonly Need[] = [{ action: "write", on: "bucket" }];
/**
 * ListBuckets needs no right: it lists only the buckets where the caller may read something
 * (operations/buckets.ts). The service's MethodNotAllowed touches nothing and names no bucket.
 */
const NONE: readonly Need[] = [];
const OBJECT_FIXED_ANSWER = readOrWrite("key", "key");
const BUCKET_FIXED_ANSWER = readOrWrite("somewhere", "bucket");

/** Bucket sub-resources S3 defines that fencegate does not serve (beyond the read-only answers below). */
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
  "policyStatus",
  "metadataTable",
  "metadataConfiguration",
  "metadataInventoryTable",
  "metadataJournalTable",
  "session",
];

const UNSUPPORTED_OBJECT_SUBRESOURCES = [
  "acl",
  "tagging",
  "retention",
  "legal-hold",
  "torrent",
  "restore",
  "select",
  "attributes",
  "renameObject",
];

/** An HTML-form upload: S3 authenticates it with a signed policy among the form's fields. */
const isFormUpload = (req: S3Request) =>
  /^multipart\/form-data\b/i.test(String(req.headers["content-type"] ?? ""));

const POST_OBJECT =
  "POST uploads from HTML forms (PostObject) are not implemented by fencegate; use PutObject or a presigned PUT URL";

const hasCopySource = (req: S3Request) => req.headers["x-amz-copy-source"] !== undefined;

const anyOf = (names: readonly string[]) => (req: S3Request) => names.some((n) => req.query.has(n));

const notImplemented =
  (names: readonly string[]): S3Operation =>
  async (req) => {
    const name = names.find((n) => req.query.has(n));
    throw new DomainError("NotImplemented", `the ${name} sub-resource is not implemented by fencegate`);
  };

const methodNotAllowed: S3Operation = async () => {
  throw new DomainError("MethodNotAllowed", "The specified method is not allowed against this resource.");
};

const ALL_METHODS = ["GET", "HEAD", "PUT", "POST", "DELETE", "PATCH", "OPTIONS"];

export const ROUTES: readonly Route[] = [
  { name: "ListBuckets", target: "service", methods: ["GET"], access: NONE, run: listBuckets },
  {
    name: "MethodNotAllowed",
    target: "service",
    methods: ALL_METHODS,
    access: NONE,
    run: methodNotAllowed,
  },

  // multipart uploads
  {
    name: "ListMultipartUploads",
    target: "bucket",
    methods: ["GET"],
    query: ["uploads"],
    access: LIST,
    run: listMultipartUploads,
  },
  {
    name: "CreateMultipartUpload",
    target: "object",
    methods: ["POST"],
    query: ["uploads"],
    write: true,
    access: WRITE_KEY,
    run: createMultipartUpload,
  },
  {
    name: "UploadPartCopy",
    target: "object",
    methods: ["PUT"],
    query: ["uploadId", "partNumber"],
    when: hasCopySource,
    write: true,
    access: COPY,
    run: uploadPartCopy,
  },
  {
    name: "UploadPart",
    target: "object",
    methods: ["PUT"],
    query: ["uploadId", "partNumber"],
    write: true,
    access: WRITE_KEY,
    run: uploadPart,
  },
  {
    name: "CompleteMultipartUpload",
    target: "object",
    methods: ["POST"],
    query: ["uploadId"],
    write: true,
    access: WRITE_KEY,
    run: completeMultipartUpload,
  },
  {
    name: "AbortMultipartUpload",
    target: "object",
    methods: ["DELETE"],
    query: ["uploadId"],
    access: WRITE_KEY,
    run: abortMultipartUpload,
  },
  {
    name: "ListParts",
    target: "object",
    methods: ["GET"],
    query: ["uploadId"],
    access: READ_KEY,
    run: listParts,
  },

  // bucket reads
  {
    name: "GetBucketLocation",
    target: "bucket",
    methods: ["GET"],
    query: ["location"],
    access: PROBE_BUCKET,
    run: getBucketLocation,
  },
  {
    name: "ListObjectVersions",
    target: "bucket",
    methods: ["GET"],
    query: ["versions"],
    access: LIST,
    run: listObjectVersions,
  },
  ...DEFAULT_DOCUMENT_SUBRESOURCES.map(
    (sub): Route => ({
      name: `GetBucket.${sub}`,
      target: "bucket",
      methods: ["GET"],
      query: [sub],
      access: PROBE_BUCKET,
      run: defaultDocument(sub)!,
    }),
  ),
  {
    name: "GetBucketAcl",
    target: "bucket",
    methods: ["GET"],
    query: ["acl"],
    access: PROBE_BUCKET,
    run: getBucketAcl,
  },
  {
    name: "PutBucketAcl",
    target: "bucket",
    methods: ["PUT"],
    query: ["acl"],
    access: WHOLE_BUCKET,
    run: putBucketAcl,
  },
  ...NOT_CONFIGURED_SUBRESOURCES.map(
    (sub): Route => ({
      name: `GetBucket.${sub}`,
      target: "bucket",
      methods: ["GET"],
      query: [sub],
      access: PROBE_BUCKET,
      run: notConfigured(sub)!,
    }),
  ),
  {
    name: "UnsupportedBucketSubresource",
    target: "bucket",
    methods: ALL_METHODS,
    when: anyOf(UNSUPPORTED_BUCKET_SUBRESOURCES),
    access: BUCKET_FIXED_ANSWER,
    run: notImplemented(UNSUPPORTED_BUCKET_SUBRESOURCES),
  },
  {
    name: "ListObjectsV2",
    target: "bucket",
    methods: ["GET"],
    when: (req) => req.query.get("list-type") === "2",
    access: LIST,
    run: listObjectsV2,
  },
  { name: "ListObjects", target: "bucket", methods: ["GET"], access: LIST, run: listObjectsV1 },

  // bucket writes
  {
    name: "DeleteObjects",
    target: "bucket",
    methods: ["POST"],
    query: ["delete"],
    write: true,
    // Each key is checked again, and refused in the result, by the operation; a caller who may
    // write nowhere in the bucket is refused before its body is read.
    access: [{ action: "write", on: "somewhere" }],
    run: deleteObjects,
  },
  {
    name: "PostObject",
    target: "bucket",
    methods: ["POST"],
    when: isFormUpload,
    write: true,
    notImplemented: POST_OBJECT,
    access: [{ action: "write", on: "somewhere" }],
    run: async () => {
      throw new DomainError("NotImplemented", POST_OBJECT);
    },
  },
  { name: "CreateBucket", target: "bucket", methods: ["PUT"], access: WHOLE_BUCKET, run: createBucket },
  { name: "HeadBucket", target: "bucket", methods: ["HEAD"], access: PROBE_BUCKET, run: headBucket },
  { name: "DeleteBucket", target: "bucket", methods: ["DELETE"], access: WHOLE_BUCKET, run: deleteBucket },
  {
    name: "MethodNotAllowed",
    target: "bucket",
    methods: ALL_METHODS,
    access: BUCKET_FIXED_ANSWER,
    run: methodNotAllowed,
  },

  // objects
  {
    name: "GetObjectAcl",
    target: "object",
    methods: ["GET"],
    query: ["acl"],
    access: READ_KEY,
    run: getObjectAcl,
  },
  {
    name: "PutObjectAcl",
    target: "object",
    methods: ["PUT"],
    query: ["acl"],
    access: WRITE_KEY,
    run: putObjectAcl,
  },
  {
    name: "GetObjectTagging",
    target: "object",
    methods: ["GET"],
    query: ["tagging"],
    access: READ_KEY,
    run: getObjectTagging,
  },
  {
    name: "UnsupportedObjectSubresource",
    target: "object",
    methods: ALL_METHODS,
    when: anyOf(UNSUPPORTED_OBJECT_SUBRESOURCES),
    access: OBJECT_FIXED_ANSWER,
    run: notImplemented(UNSUPPORTED_OBJECT_SUBRESOURCES),
  },
  {
    name: "CopyObject",
    target: "object",
    methods: ["PUT"],
    when: hasCopySource,
    write: true,
    access: COPY,
    run: copyObject,
  },
  { name: "PutObject", target: "object", methods: ["PUT"], write: true, access: WRITE_KEY, run: putObject },
  { name: "GetObject", target: "object", methods: ["GET"], access: READ_KEY, run: getObject },
  { name: "HeadObject", target: "object", methods: ["HEAD"], access: READ_KEY, run: headObject },
  {
    name: "DeleteObject",
    target: "object",
    methods: ["DELETE"],
    params: ["versionId"],
    write: true,
    access: WRITE_KEY,
    run: deleteObject,
  },
  {
    name: "MethodNotAllowed",
    target: "object",
    methods: ALL_METHODS,
    access: OBJECT_FIXED_ANSWER,
    run: methodNotAllowed,
  },
];

/**
 * Query parameters any request may carry: a presigned URL's signature and the headers it hoists
 * (x-amz-*, and SigV2's three), the SDK's operation name (x-id), fencegate's own (x-fence-*).
 */
const CARRIED_PARAMS = new Set(["x-id", "awsaccesskeyid", "signature", "expires"]);
const isCarried = (name: string) => {
  const lower = name.toLowerCase();
  return CARRIED_PARAMS.has(lower) || lower.startsWith("x-amz-") || lower.startsWith("x-fence-");
};

/** Routes that answer a refusal whatever their query (nothing runs). */
const REFUSALS = new Set([
  "MethodNotAllowed",
  "UnsupportedBucketSubresource",
  "UnsupportedObjectSubresource",
  "PostObject",
]);

/**
 * A change (PUT, POST, DELETE) with a query parameter its operation does not take: S3 has many
 * sub-resources, and one fencegate does not know must not run as the plain operation (a DELETE
 * of the bucket, a PUT of an empty object). Refused 400 InvalidArgument.
 */
function unknownParameter(route: Route, method: string, query: URLSearchParams): string | undefined {
  if (REFUSALS.has(route.name) || !["PUT", "POST", "DELETE"].includes(method)) return undefined;
  const known = new Set([...(route.query ?? []), ...(route.params ?? [])]);
  return [...query.keys()].find((name) => !known.has(name) && !isCarried(name));
}

/** The route of a request: the first row that matches its method, address and query. */
export function routeOf(req: Pick<S3Request, "method" | "bucket" | "key" | "query" | "headers">): Route {
  const target = req.bucket === null ? "service" : req.key === null ? "bucket" : "object";
  for (const route of ROUTES) {
    if (route.target !== target || !route.methods.includes(req.method)) continue;
    if (route.query && !route.query.every((q) => req.query.has(q))) continue;
    if (route.when && !route.when(req as S3Request)) continue;
    const unknown = unknownParameter(route, req.method, req.query);
    if (unknown !== undefined) {
      // A bad request (4xx), not a sub-resource S3 defines and fencegate lacks (501, above).
      const name = unknown.slice(0, 64);
      return {
        name: target === "bucket" ? "UnsupportedBucketSubresource" : "UnsupportedObjectSubresource",
        target,
        methods: route.methods,
        access: target === "bucket" ? BUCKET_FIXED_ANSWER : OBJECT_FIXED_ANSWER,
        run: async () => {
          throw new DomainError("InvalidArgument", `${route.name} takes no query parameter ${name}`, {
            ArgumentName: name,
          });
        },
      };
    }
    return route;
  }
  // Methods outside ALL_METHODS (TRACE, CONNECT, ...).
  const access =
    target === "service" ? NONE : target === "bucket" ? BUCKET_FIXED_ANSWER : OBJECT_FIXED_ANSWER;
  return { name: "MethodNotAllowed", target, methods: [], access, run: methodNotAllowed };
}
