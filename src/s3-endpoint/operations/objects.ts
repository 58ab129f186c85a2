import type { WriteConditions } from "../../backends/storage-backend.js";
import { DomainError } from "../../core/errors.js";
import type { WriteContext, WriteFencer } from "../../fence/write-fencer.js";
import { checksumHeaders, requestedChecksumHeaders } from "../protocol/checksum-headers.js";
import { evaluateReadConditions } from "../protocol/conditions.js";
import { header, type S3Operation, type S3Request } from "../protocol/context.js";
import { fenceTokenOf, fenceTransactionOf } from "../protocol/fence-token.js";
import { metadataFromRequest, objectResponseHeaders } from "../protocol/object-headers.js";
import { parseRange } from "../protocol/range.js";
import { requireDeclaredLength } from "../protocol/request-body.js";
import { checkRequestedAcl } from "./acl-request.js";
import { checkServablePart, partNumberRead, wholeObjectAsPart } from "./part-read.js";
import { checkObjectOptions } from "./storage-class.js";

export const putObject: S3Operation = async (req, { backend, fencer }) => {
  const { bucket, key } = objectTarget(req);
  checkRequestedAcl(req, "object");
  checkObjectOptions(req);
  const metadata = metadataFromRequest(req);
  requireDeclaredLength(req.headers);
  const result = await fencer.write(writeContext(req, "PutObject", writeConditions(req)), (commit) =>
    backend.putObject({ bucket, key, body: req.decodeBody(), metadata }, commit),
  );
  return {
    status: 200,
    headers: { etag: result.etag, ...checksumHeaders(result.checksums), ...acceptedHeaders(result.token) },
  };
};

export const deleteObject: S3Operation = async (req, { backend, fencer }) => {
  const { bucket, key } = objectTarget(req);
  rejectVersionId(req);
  // A conditional delete (If-Match, S3's only condition on DeleteObject): checked in the commit.
  const ifMatch = header(req, "if-match");
  const conditions = ifMatch === undefined ? undefined : { ifMatch };
  const result = await fencer.write(writeContext(req, "DeleteObject", conditions), (commit) =>
    backend.deleteObject({ bucket, key }, commit),
  );
  return { status: 204, headers: acceptedHeaders(result.token) };
};

/**
 * A read that carries a fenced transaction (x-fence-transaction) sees the transaction's staged
 * state of the key: the staged version of a put (returned, for the backend's readStaged), or
 * NoSuchKey for a staged delete; undefined when the transaction staged nothing there.
 */
function stagedWrite(req: S3Request, fencer: WriteFencer, bucket: string, key: string): unknown {
  const id = fenceTransactionOf(req);
  if (id === null) return undefined;
  if (!fencer.transactions)
    throw new DomainError("NotImplemented", "this gateway does not offer fenced transactions");
  const staged = fencer.transactions.stagedRead(id, bucket, key, {
    principal: req.principal,
    requestId: req.requestId,
  });
  if (!staged) return undefined;
  if (staged.change.op === "delete") {
    throw new DomainError("NoSuchKey", "The specified key does not exist.", { Key: key });
  }
  return staged.change.version;
}

/** The fencing context of a write to the request's object. */
export function writeContext(
  req: S3Request,
  op: string,
  conditions?: WriteConditions,
  key?: string,
): WriteContext {
  const target = objectTarget(req);
  return {
    op,
    bucket: target.bucket,
    key: key ?? target.key,
    tokenString: fenceTokenOf(req),
    transactionId: fenceTransactionOf(req),
    ...(conditions ? { conditions } : {}),
    principal: req.principal,
    requestId: req.requestId,
    signal: req.signal,
  };
}

export const getObject: S3Operation = async (req, { backend, fencer }) => {
  const { bucket, key } = objectTarget(req);
  rejectVersionId(req);
  const partNumber = partNumberRead(req);
  const rangeHeader = header(req, "range");
  const range = rangeHeader ? parseRange(rangeHeader) : undefined;
  const staged = stagedWrite(req, fencer, bucket, key);
  const {
    info,
    body,
    range: served,
  } = staged
    ? await backend.readStaged!(bucket, key, staged, range)
    : await backend.getObject(bucket, key, range);
  try {
    if (evaluateReadConditions(req.headers, info) === "not-modified") {
      body.destroy();
      return { status: 304, headers: { etag: info.etag, "last-modified": info.lastModified.toUTCString() } };
    }
    if (partNumber !== undefined) checkServablePart(info, partNumber);
  } catch (e) {
    body.destroy();
    throw e;
  }
  const headers = {
    ...objectResponseHeaders(info),
    ...requestedChecksumHeaders(req, info, served !== undefined),
    ...responseOverrides(req),
  };
  if (partNumber !== undefined) return { status: wholeObjectAsPart(info, headers), headers, stream: body };
  if (served) {
    headers["content-range"] = `bytes ${served.start}-${served.end}/${info.size}`;
    headers["content-length"] = String(served.end - served.start + 1);
    return { status: 206, headers, stream: body };
  }
  headers["content-length"] = String(info.size);
  return { status: 200, headers, stream: body };
};

export const headObject: S3Operation = async (req, { backend, fencer }) => {
  const { bucket, key } = objectTarget(req);
  rejectVersionId(req);
  const partNumber = partNumberRead(req);
  const staged = stagedWrite(req, fencer, bucket, key);
  if (staged) {
    // A HEAD inside a transaction answers from the staged version, as its GET would.
    const { info, body } = await backend.readStaged!(bucket, key, staged);
    body.destroy();
    if (evaluateReadConditions(req.headers, info) === "not-modified") {
      return { status: 304, headers: { etag: info.etag, "last-modified": info.lastModified.toUTCString() } };
    }
    return {
      status: 200,
      headers: { ...objectResponseHeaders(info), "content-length": String(info.size) },
    };
  }
  const info = await backend.headObject(bucket, key);
  if (evaluateReadConditions(req.headers, info) === "not-modified") {
    return { status: 304, headers: { etag: info.etag, "last-modified": info.lastModified.toUTCString() } };
  }
  if (partNumber !== undefined) checkServablePart(info, partNumber);
  const headers: Record<string, string> = {
    ...objectResponseHeaders(info),
    ...requestedChecksumHeaders(req, info, false),
    "content-length": String(info.size),
  };
  if (partNumber !== undefined) return { status: wholeObjectAsPart(info, headers), headers };
  const rangeHeader = header(req, "range");
  const range = rangeHeader ? parseRange(rangeHeader) : undefined;
  if (range) {
    // HEAD with a Range answers like the GET would, without the body.
    const { body, range: served } = await backend.getObject(bucket, key, range);
    body.destroy();
    if (served) {
      headers["content-range"] = `bytes ${served.start}-${served.end}/${info.size}`;
      headers["content-length"] = String(served.end - served.start + 1);
      return { status: 206, headers };
    }
  }
  return { status: 200, headers };
};

const OVERRIDES = [
  "response-content-type",
  "response-content-language",
  "response-expires",
  "response-cache-control",
  "response-content-disposition",
  "response-content-encoding",
] as const;

/** GET's response-* query parameters replace the stored headers in the response. */
function responseOverrides(req: S3Request): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of OVERRIDES) {
    const v = req.query.get(name);
    if (v === null) continue;
    // A response header carries printable latin1 only; anything else cannot be sent.
    if (!/^[\t\x20-\x7e\x80-\xff]*$/.test(v)) {
      throw new DomainError("InvalidArgument", `${name} must be printable text without line breaks`);
    }
    out[name.slice("response-".length)] = v;
  }
  return out;
}

export function writeConditions(req: S3Request): WriteConditions {
  const ifNoneMatch = header(req, "if-none-match");
  if (ifNoneMatch !== undefined && ifNoneMatch.trim() !== "*") {
    throw new DomainError("NotImplemented", "If-None-Match on a write supports only *");
  }
  return { ifMatch: header(req, "if-match"), ifNoneMatch };
}

export function acceptedHeaders(token: number | null): Record<string, string> {
  return token === null ? {} : { "x-fence-token-accepted": String(token) };
}

/** Objects have one version, "null"; any other version id names nothing. */
function rejectVersionId(req: S3Request): void {
  const v = req.query.get("versionId");
  if (v !== null && v !== "null") {
    throw new DomainError("InvalidArgument", "Invalid version id specified");
  }
}

export function objectTarget(req: Pick<S3Request, "bucket" | "key">): { bucket: string; key: string } {
  if (req.bucket === null || req.key === null) {
    throw new DomainError("InvalidRequest", "this operation needs a bucket and a key");
  }
  return { bucket: req.bucket, key: req.key };
}
