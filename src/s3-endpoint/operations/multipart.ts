import { assertPartNumber, bareEtag, multipartEtag } from "../../backends/multipart.js";
import type { CompletedPart, MultipartUpload, StorageBackend } from "../../backends/storage-backend.js";
import { DomainError, isDomainError } from "../../core/errors.js";
import type { WriteContext } from "../../fence/write-fencer.js";
import {
  type CompletedUploads,
  header,
  type S3Operation,
  type S3Request,
  type S3Response,
} from "../protocol/context.js";
import { copySource } from "../protocol/copy-source.js";
import { fenceTransactionOf } from "../protocol/fence-token.js";
import { metadataFromRequest } from "../protocol/object-headers.js";
import { textParam } from "../protocol/query.js";
import { readBounded, requireDeclaredLength } from "../protocol/request-body.js";
import type { XmlNode } from "../protocol/xml.js";
import { children, malformed, parseXmlDocument, text } from "../protocol/xml-input.js";
import { checkRequestedAcl } from "./acl-request.js";
import { ownerOf } from "./buckets.js";
import { encoderFor } from "./list-objects.js";
import { acceptedHeaders, objectTarget, writeConditions, writeContext } from "./objects.js";
import { checkObjectOptions } from "./storage-class.js";

/**
 * S3 multipart uploads, fenced (contract: CreateMultipartUpload, UploadPart and
 * CompleteMultipartUpload are writes that carry a token).
 *
 * - CreateMultipartUpload goes through the fencer like a PutObject: the token is checked
 *   against the lease and the object's HCT, and the upload is bound to it. Nothing visible
 *   changes, so the HCT is not raised.
 * - UploadPart(Copy) goes through the fencer too (authorization, early HCT refusal, the lease
 *   checked again atomically with recording the part, an audit record). It carries the upload's
 *   own token, or none: the upload is bound to its lease, which is then checked as if presented.
 *   A token of another lease is FencingTokenScopeMismatch; a lost lease is StaleFencingToken /
 *   LeaseExpired as for any write (see src/fence/multipart-rules.ts).
 * - CompleteMultipartUpload is the write that makes the object visible: the same token again,
 *   the lease re-checked before the commit, and the HCT checked in the commit itself.
 * - AbortMultipartUpload is not fenced: see abortMultipartUpload.
 */

export const createMultipartUpload: S3Operation = async (req, { backend, fencer }) => {
  const { bucket, key } = objectTarget(req);
  checkRequestedAcl(req, "object");
  checkObjectOptions(req);
  const metadata = metadataFromRequest(req);
  let created: string | undefined;
  let result: Awaited<ReturnType<typeof backend.multipart.createUpload>> & { token: number | null };
  try {
    result = await fencer.write(writeContext(req, "CreateMultipartUpload"), async (commit, auth) => {
      // The upload is bound to the lease the fencer authorized (none for an unfenced upload).
      const upload = await backend.multipart.createUpload(
        {
          bucket,
          key,
          metadata,
          token: auth.fenced ? auth.claims.token : null,
          leaseId: auth.fenced ? auth.claims.leaseId : null,
          transactionId: fenceTransactionOf(req),
          initiator: req.principal,
        },
        commit,
      );
      created = upload.uploadId;
      return upload;
    });
  } catch (err) {
    // Created, but the audit log could not take the decision (a log outside the backend's
    // transaction): the client is answered 503 and never learns the id, so the upload goes too.
    if (created !== undefined) {
      await backend.multipart.abortUpload({ bucket, key, uploadId: created }).catch((e) => {
        req.log.warn(
          { err: e, uploadId: created },
          "could not remove an upload the audit log did not record",
        );
      });
    }
    throw err;
  }
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
  const partNumber = partNumberOf(req);
  const uploadId = uploadIdOf(req);
  const ctx = await uploadWriteContext(req, "UploadPart", backend, uploadId);
  const result = await fencer.write(ctx, (commit) =>
    backend.multipart.uploadPart({ bucket, key, uploadId, partNumber, body: req.decodeBody() }, commit),
  );
  return { status: 200, headers: { etag: result.etag, ...acceptedHeaders(result.token) } };
};

export const uploadPartCopy: S3Operation = async (req, { backend, fencer }) => {
  const { bucket, key } = objectTarget(req);
  const partNumber = partNumberOf(req);
  const uploadId = uploadIdOf(req);
  const source = copySource(req);
  const range = copySourceRangeOf(req);
  const ctx = await uploadWriteContext(req, "UploadPartCopy", backend, uploadId);
  const result = await fencer.write(ctx, async (commit) => {
    const src = await backend.getObject(source.bucket, source.key, range, commit.signal);
    try {
      if (range && range.end >= src.info.size) {
        throw new DomainError(
          "InvalidRange",
          `the copy source range is not valid for a source object of ${src.info.size} bytes`,
        );
      }
      const size = range ? range.end - range.start + 1 : src.info.size;
      const body = { stream: src.body, digest: Promise.resolve({ size, checksums: {} }) };
      return await backend.multipart.uploadPart({ bucket, key, uploadId, partNumber, body }, commit);
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

export const completeMultipartUpload: S3Operation = async (req, { backend, fencer, completions }) => {
  const { bucket, key } = objectTarget(req);
  const uploadId = uploadIdOf(req);
  let ctx: WriteContext;
  try {
    ctx = await uploadWriteContext(req, "CompleteMultipartUpload", backend, uploadId);
  } catch (e) {
    const replay =
      isDomainError(e) && e.code === "NoSuchUpload" && (await replayedCompletion(req, backend, completions));
    if (replay) return replay;
    throw e;
  }
  const result = await fencer.write({ ...ctx, conditions: writeConditions(req) }, async (commit) => {
    // Read inside the write, so that a malformed list is audited like any refusal. Checksum
    // headers here are the client's claim about the assembled object (minio-go sends a CRC32C of
    // the parts' CRC32Cs); parts' checksums are not kept, so they are not verified.
    const parts = parseCompleteBody(
      await readBounded(req.decodeBody({ objectChecksums: false }).stream, MAX_COMPLETE_BODY),
    );
    return backend.multipart.completeUpload({ bucket, key, uploadId, parts }, commit);
  });
  completions?.remember(uploadId, { bucket, key, etag: result.etag, token: result.token });
  return completionAnswer(req, bucket, key, result.etag, result.token);
};

function completionAnswer(
  req: S3Request,
  bucket: string,
  key: string,
  etag: string,
  token: number | null,
): S3Response {
  return {
    status: 200,
    headers: acceptedHeaders(token),
    xml: {
      root: "CompleteMultipartUploadResult",
      body: { Location: locationOf(req, bucket, key), Bucket: bucket, Key: key, ETag: etag },
    },
  };
}

/**
 * A retried completion of an upload that is gone because it was completed: the same answer
 * again, when the retry lists the same parts (their multipart ETag is the one the completion
 * produced) and the object is still that result. This gateway remembers the completions it made
 * lately; after a restart, or on another replica, the object itself says which upload made it
 * (a completion whose answer was lost, retried later). Nothing is written; the original
 * completion was the decision and is in the audit log. Anything else is S3's NoSuchUpload.
 */
async function replayedCompletion(
  req: S3Request,
  backend: StorageBackend,
  completions: CompletedUploads | undefined,
): Promise<S3Response | undefined> {
  const uploadId = uploadIdOf(req);
  const { bucket, key } = objectTarget(req);
  const remembered = completions?.recall(uploadId);
  const completed =
    remembered && remembered.bucket === bucket && remembered.key === key
      ? remembered
      : await backend.multipart.completedBy({ bucket, key, uploadId }).then(
          (etag) => (etag === null ? undefined : { bucket, key, etag, token: null }),
          () => undefined,
        );
  if (!completed) return undefined;
  const parts = parseCompleteBody(
    await readBounded(req.decodeBody({ objectChecksums: false }).stream, MAX_COMPLETE_BODY),
  );
  const md5s = parts.map((p) => bareEtag(p.etag).toLowerCase());
  if (!md5s.every((m) => /^[0-9a-f]{32}$/.test(m))) return undefined;
  if (multipartEtag(md5s) !== completed.etag) return undefined;
  const current = await backend.headObject(bucket, key).catch(() => undefined);
  if (current?.etag !== completed.etag) return undefined;
  return completionAnswer(req, bucket, key, completed.etag, completed.token);
}

/**
 * Not fenced: any authenticated caller may abort, with or without a token (a token is
 * ignored). An abort changes no object and no HCT, so it cannot break a safety rule; at
 * worst a later CompleteMultipartUpload answers NoSuchUpload, which changes nothing either.
 * Requiring a current lease would stop exactly the client whose Complete was refused after
 * losing its lease from cleaning up its upload. S3 likewise authorizes aborts by permission.
 */
export const abortMultipartUpload: S3Operation = async (req, { backend }) => {
  const { bucket, key } = objectTarget(req);
  await backend.headBucket(bucket);
  await backend.multipart.abortUpload({ bucket, key, uploadId: uploadIdOf(req) });
  return { status: 204 };
};

const MAX_LISTED = 1000;

export const listParts: S3Operation = async (req, { backend }) => {
  const { bucket, key } = objectTarget(req);
  const uploadId = uploadIdOf(req);
  const maxParts = boundedCount(req, "max-parts");
  const marker = req.query.get("part-number-marker");
  const partNumberMarker =
    marker === null || marker === "" ? 0 : nonNegativeInteger(marker, "part-number-marker");
  await backend.headBucket(bucket);
  const result = await backend.multipart.listParts({ bucket, key, uploadId, maxParts, partNumberMarker });
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
  const q = req.query;
  const encode = encoderFor(req);
  const prefix = textParam(q, "prefix") ?? "";
  const delimiter = textParam(q, "delimiter") || undefined;
  const keyMarker = textParam(q, "key-marker") || undefined;
  // S3 ignores upload-id-marker without key-marker.
  const uploadIdMarker = keyMarker !== undefined ? q.get("upload-id-marker") || undefined : undefined;
  const maxUploads = boundedCount(req, "max-uploads");
  const result = await backend.multipart.listUploads({
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
function parseCompleteBody(raw: Buffer): CompletedPart[] {
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

/**
 * A part or completion is fenced with the lease its upload was bound to at CreateMultipartUpload;
 * without a token it is checked as if that lease's token had been sent (aws s3 cp --metadata,
 * s3cmd, rclone --header-upload and the SDKs' Metadata send the token on Create only).
 */
async function uploadWriteContext(
  req: S3Request,
  op: string,
  backend: StorageBackend,
  uploadId: string,
): Promise<WriteContext> {
  const ctx = writeContext(req, op);
  const ref = { bucket: ctx.bucket, key: ctx.key, uploadId };
  const upload = await backend.multipart.getUpload(ref).catch(async (e) => {
    // A missing bucket is NoSuchBucket, as S3 answers, not NoSuchUpload.
    await backend.headBucket(ctx.bucket);
    throw e;
  });
  // An upload created in a transaction stays in it: its parts and completion join it even when
  // only CreateMultipartUpload carried the header (aws s3 cp --metadata sends it on Create only).
  const bound = upload.transactionId ?? null;
  if (ctx.transactionId && bound !== null && ctx.transactionId !== bound) {
    throw new DomainError("InvalidArgument", `the upload was created in transaction ${bound}, not this one`, {
      ArgumentName: "x-fence-transaction",
    });
  }
  return {
    ...ctx,
    transactionId: ctx.transactionId ?? bound,
    upload: { uploadId, token: upload.token, leaseId: upload.leaseId },
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
