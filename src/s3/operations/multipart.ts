import {
  assertPartNumber,
  assertUploadFence,
  type CompletedPart,
  type MultipartStore,
  type MultipartUpload,
} from "../../backends/multipart.js";
import type { StorageBackend } from "../../backends/storage-backend.js";
import { DomainError } from "../../core/errors.js";
import type { WriteContext } from "../../fence/write-fencer.js";
import { header, type S3Operation, type S3Request } from "../context.js";
import { fenceTokenOf } from "../fence-token.js";
import { metadataFromHeaders } from "../object-headers.js";
import { readBounded, requireDeclaredLength } from "../request-body.js";
import type { XmlNode } from "../xml.js";
import { children, malformed, parseXmlDocument, text } from "../xml-input.js";
import { ownerOf } from "./buckets.js";
import { copySource } from "./copy-object.js";
import { encoderFor } from "./list-objects.js";
import { acceptedHeaders, objectTarget, writeConditions } from "./objects.js";

/**
 * S3 multipart uploads, fenced (contract: CreateMultipartUpload, UploadPart and
 * CompleteMultipartUpload are writes that carry a token).
 *
 * - CreateMultipartUpload goes through the fencer like a PutObject: the token is checked
 *   against the lease and the object's HCT, and the upload is bound to it. Nothing visible
 *   changes, so the HCT is not raised.
 * - UploadPart(Copy) goes through the fencer too (authorization, early HCT refusal, the lease
 *   re-checked just before the part is recorded, an audit record). It carries the upload's own
 *   token, or none: the upload is bound to its lease, which is then checked as if presented.
 *   A token of another lease is FencingTokenScopeMismatch; a lost lease is StaleFencingToken /
 *   LeaseExpired as for any write (see assertUploadFence).
 * - CompleteMultipartUpload is the write that makes the object visible: the same token again,
 *   the lease re-checked before the commit, and the HCT checked in the commit itself.
 * - AbortMultipartUpload is not fenced: see abortMultipartUpload.
 */

/** The multipart route of a request, or null when it is not a multipart operation. */
export function selectMultipartOperation(req: S3Request): { name: string; run: S3Operation } | null {
  const { method, key, query } = req;
  if (key === null) {
    return method === "GET" && query.has("uploads")
      ? { name: "ListMultipartUploads", run: listMultipartUploads }
      : null;
  }
  if (method === "POST" && query.has("uploads")) {
    return { name: "CreateMultipartUpload", run: createMultipartUpload };
  }
  if (!query.has("uploadId")) return null;
  if (method === "PUT" && query.has("partNumber")) {
    return header(req, "x-amz-copy-source") !== undefined
      ? { name: "UploadPartCopy", run: uploadPartCopy }
      : { name: "UploadPart", run: uploadPart };
  }
  if (method === "POST") return { name: "CompleteMultipartUpload", run: completeMultipartUpload };
  if (method === "DELETE") return { name: "AbortMultipartUpload", run: abortMultipartUpload };
  if (method === "GET") return { name: "ListParts", run: listParts };
  return null;
}

export const createMultipartUpload: S3Operation = async (req, { backend, fencer }) => {
  const { bucket, key } = objectTarget(req);
  const store = multipartOf(backend);
  const metadata = metadataFromHeaders(req.headers);
  await backend.headBucket(bucket);
  const ctx = writeContext(req, "CreateMultipartUpload");
  const result = await fencer.write(ctx, async (fence, hooks, auth) => {
    // The fencer has authorized the token; its claims name the lease the upload is bound to.
    const leaseId = auth.fenced ? auth.claims.leaseId : null;
    return store.createUpload({ bucket, key, metadata, fence, leaseId, initiator: req.principal }, hooks);
  });
  return {
    status: 200,
    headers: acceptedHeaders(result.token),
    xml: {
      root: "InitiateMultipartUploadResult",
      body: { Bucket: bucket, Key: key, UploadId: result.uploadId },
    },
  };
};

export const uploadPart: S3Operation = async (req, { backend, fencer }) => {
  const { bucket, key } = objectTarget(req);
  requireDeclaredLength(req.headers);
  const store = multipartOf(backend);
  const partNumber = partNumberOf(req);
  const uploadId = uploadIdOf(req);
  await backend.headBucket(bucket);
  const ctx = await boundWriteContext(req, "UploadPart", store, uploadId);
  const result = await fencer.write(ctx, (fence, hooks) =>
    store.uploadPart({ bucket, key, uploadId, partNumber, body: req.decodeBody().stream, fence }, hooks),
  );
  return { status: 200, headers: { etag: result.etag, ...acceptedHeaders(result.token) } };
};

export const uploadPartCopy: S3Operation = async (req, { backend, fencer }) => {
  const { bucket, key } = objectTarget(req);
  const store = multipartOf(backend);
  const partNumber = partNumberOf(req);
  const uploadId = uploadIdOf(req);
  const source = copySource(req);
  const range = copySourceRangeOf(req);
  await backend.headBucket(bucket);
  const ctx = await boundWriteContext(req, "UploadPartCopy", store, uploadId);
  const result = await fencer.write(ctx, async (fence, hooks) => {
    // Unknown upload or foreign token: refused before the source is opened.
    assertUploadFence(await store.getUpload({ bucket, key, uploadId }), fence);
    const src = await backend.getObject(source.bucket, source.key, range);
    try {
      if (range && range.end >= src.info.size) {
        throw new DomainError(
          "InvalidRange",
          `the copy source range is not valid for a source object of ${src.info.size} bytes`,
        );
      }
      return await store.uploadPart({ bucket, key, uploadId, partNumber, body: src.body, fence }, hooks);
    } finally {
      src.body.destroy();
    }
  });
  return {
    status: 200,
    headers: acceptedHeaders(result.token),
    xml: { root: "CopyPartResult", body: { ETag: result.etag, LastModified: result.lastModified } },
  };
};

/** A CompleteMultipartUpload body lists at most 10,000 parts: 1 MiB is ample. */
const MAX_COMPLETE_BODY = 1024 * 1024;

export const completeMultipartUpload: S3Operation = async (req, { backend, fencer }) => {
  const { bucket, key } = objectTarget(req);
  const store = multipartOf(backend);
  const uploadId = uploadIdOf(req);
  await backend.headBucket(bucket);
  const ctx = await boundWriteContext(req, "CompleteMultipartUpload", store, uploadId);
  const result = await fencer.write(ctx, async (fence, hooks) => {
    // Read inside the write, so that a malformed list is audited like any refusal.
    const parts = parseCompleteBody(await readBounded(req.decodeBody().stream, MAX_COMPLETE_BODY));
    return store.completeUpload(
      {
        bucket,
        key,
        uploadId,
        parts,
        fence,
        conditions: writeConditions(req),
      },
      hooks,
    );
  });
  return {
    status: 200,
    headers: acceptedHeaders(result.token),
    xml: {
      root: "CompleteMultipartUploadResult",
      body: { Location: locationOf(req, bucket, key), Bucket: bucket, Key: key, ETag: result.etag },
    },
  };
};

/**
 * Not fenced: any authenticated caller may abort, with or without a token (a token is
 * ignored). An abort changes no object and no HCT, so it cannot break a safety rule; at
 * worst a later CompleteMultipartUpload answers NoSuchUpload, which changes nothing either.
 * Requiring a current lease would stop exactly the client whose Complete was refused after
 * losing its lease from cleaning up its upload. S3 likewise authorizes aborts by permission.
 */
export const abortMultipartUpload: S3Operation = async (req, { backend }) => {
  const { bucket, key } = objectTarget(req);
  const store = multipartOf(backend);
  await backend.headBucket(bucket);
  await store.abortUpload({ bucket, key, uploadId: uploadIdOf(req) });
  return { status: 204 };
};

const MAX_LISTED = 1000;

export const listParts: S3Operation = async (req, { backend }) => {
  const { bucket, key } = objectTarget(req);
  const store = multipartOf(backend);
  const uploadId = uploadIdOf(req);
  const maxParts = boundedCount(req, "max-parts");
  const marker = req.query.get("part-number-marker");
  const partNumberMarker =
    marker === null || marker === "" ? 0 : nonNegativeInteger(marker, "part-number-marker");
  await backend.headBucket(bucket);
  const result = await store.listParts({ bucket, key, uploadId, maxParts, partNumberMarker });
  return {
    status: 200,
    xml: {
      root: "ListPartsResult",
      body: {
        Bucket: bucket,
        Key: key,
        UploadId: uploadId,
        ...people(result.upload),
        StorageClass: "STANDARD",
        PartNumberMarker: partNumberMarker,
        NextPartNumberMarker: result.nextPartNumberMarker,
        MaxParts: maxParts,
        IsTruncated: result.isTruncated,
        Part: result.parts.map((p) => ({
          PartNumber: p.partNumber,
          LastModified: p.lastModified,
          ETag: p.etag,
          Size: p.size,
        })),
      },
    },
  };
};

export const listMultipartUploads: S3Operation = async (req, { backend }) => {
  const bucket = req.bucket!;
  const store = multipartOf(backend);
  const q = req.query;
  const encode = encoderFor(req);
  const prefix = q.get("prefix") ?? "";
  const delimiter = q.get("delimiter") || undefined;
  const keyMarker = q.get("key-marker") || undefined;
  // S3 ignores upload-id-marker without key-marker.
  const uploadIdMarker = keyMarker !== undefined ? q.get("upload-id-marker") || undefined : undefined;
  const maxUploads = boundedCount(req, "max-uploads");
  const result = await store.listUploads({
    bucket,
    prefix,
    ...(delimiter !== undefined ? { delimiter } : {}),
    ...(keyMarker !== undefined ? { keyMarker } : {}),
    ...(uploadIdMarker !== undefined ? { uploadIdMarker } : {}),
    maxUploads,
  });
  return {
    status: 200,
    xml: {
      root: "ListMultipartUploadsResult",
      body: {
        Bucket: bucket,
        KeyMarker: encode(keyMarker ?? ""),
        UploadIdMarker: uploadIdMarker ?? "",
        NextKeyMarker: result.nextKeyMarker !== undefined ? encode(result.nextKeyMarker) : undefined,
        NextUploadIdMarker: result.nextUploadIdMarker,
        Delimiter: delimiter !== undefined ? encode(delimiter) : undefined,
        Prefix: encode(prefix),
        MaxUploads: maxUploads,
        EncodingType: q.get("encoding-type") ?? undefined,
        IsTruncated: result.isTruncated,
        Upload: result.uploads.map((u) => ({
          Key: encode(u.key),
          UploadId: u.uploadId,
          ...people(u),
          StorageClass: "STANDARD",
          Initiated: u.initiated,
        })),
        CommonPrefixes: result.commonPrefixes.map((p) => ({ Prefix: encode(p) })),
      },
    },
  };
};

/** The part list of a CompleteMultipartUpload body; MalformedXML on anything else. */
export function parseCompleteBody(raw: Buffer): CompletedPart[] {
  const parts = children(parseXmlDocument(raw, "CompleteMultipartUpload"), "Part");
  if (parts.length === 0) throw malformed("at least one Part is required");
  return parts.map((part) => {
    const number = text(part, "PartNumber")?.trim();
    const etag = text(part, "ETag");
    if (number === undefined || !/^\d{1,9}$/.test(number) || etag === undefined) {
      throw malformed("every Part needs a PartNumber and an ETag");
    }
    return { partNumber: Number(number), etag };
  });
}

function multipartOf(backend: StorageBackend): MultipartStore {
  if (!backend.multipart) {
    throw new DomainError("NotImplemented", `the ${backend.kind} backend does not support multipart uploads`);
  }
  return backend.multipart;
}

/**
 * A part or completion without a token is fenced with the lease its upload was bound to at
 * CreateMultipartUpload: aws s3 cp --metadata, s3cmd, rclone --header-upload and the SDKs'
 * Metadata send the token on Create only. A token that is sent must be the upload's own.
 */
async function boundWriteContext(
  req: S3Request,
  op: string,
  store: MultipartStore,
  uploadId: string,
): Promise<WriteContext> {
  const ctx = writeContext(req, op);
  if (ctx.tokenString !== null) return ctx;
  const upload = await store.getUpload({ bucket: ctx.bucket, key: ctx.key, uploadId });
  if (upload.token === null || upload.leaseId === null) return ctx;
  return { ...ctx, bound: { leaseId: upload.leaseId, token: upload.token } };
}

function writeContext(req: S3Request, op: string): WriteContext {
  const { bucket, key } = objectTarget(req);
  return {
    op,
    bucket,
    key,
    tokenString: fenceTokenOf(req),
    principal: req.principal,
    requestId: req.requestId,
  };
}

function uploadIdOf(req: S3Request): string {
  const id = req.query.get("uploadId");
  if (!id) {
    throw new DomainError("NoSuchUpload", "The specified upload does not exist.", { uploadId: id });
  }
  return id;
}

function partNumberOf(req: S3Request): number {
  const raw = req.query.get("partNumber") ?? "";
  const n = /^\d{1,9}$/.test(raw) ? Number(raw) : Number.NaN;
  assertPartNumber(n);
  return n;
}

/** S3 accepts only `bytes=first-last` here (no open ends, no suffixes). */
function copySourceRangeOf(req: S3Request): { start: number; end: number } | undefined {
  const raw = header(req, "x-amz-copy-source-range");
  if (raw === undefined) return undefined;
  const m = /^bytes=(\d{1,15})-(\d{1,15})$/.exec(raw.trim());
  if (!m || Number(m[1]) > Number(m[2])) {
    throw new DomainError(
      "InvalidArgument",
      "The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy",
    );
  }
  return { start: Number(m[1]), end: Number(m[2]) };
}

function boundedCount(req: S3Request, name: string): number {
  const raw = req.query.get(name);
  if (raw === null || raw === "") return MAX_LISTED;
  return Math.min(nonNegativeInteger(raw, name), MAX_LISTED);
}

function nonNegativeInteger(raw: string, name: string): number {
  if (!/^\d{1,15}$/.test(raw)) {
    throw new DomainError("InvalidArgument", `Provided ${name} not an integer or within integer range`);
  }
  return Number(raw);
}

function people(upload: MultipartUpload): XmlNode {
  const who = ownerOf(upload.initiator ?? "");
  return { Initiator: who, Owner: who };
}

function locationOf(req: S3Request, bucket: string, key: string): string {
  const path = `/${encodeURIComponent(bucket)}/${key.split("/").map(encodeURIComponent).join("/")}`;
  const host = header(req, "host");
  return host ? `http://${host}${path}` : path;
}
