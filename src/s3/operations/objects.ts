import { DomainError } from "../../core/errors.js";
import { checksumHeaders, requestedChecksumHeaders } from "../checksum-headers.js";
import { evaluateReadConditions } from "../conditions.js";
import { header, type S3Operation, type S3Request } from "../context.js";
import { fenceTokenOf } from "../fence-token.js";
import { metadataFromHeaders, objectResponseHeaders } from "../object-headers.js";
import { parseRange } from "../range.js";
import { requireDeclaredLength } from "../request-body.js";

export const putObject: S3Operation = async (req, { backend, fencer }) => {
  const { bucket, key } = objectTarget(req);
  const tokenString = fenceTokenOf(req);
  const metadata = metadataFromHeaders(req.headers);
  requireDeclaredLength(req.headers);
  // Refuse a write to a missing bucket before anything else, without reading the body.
  await backend.headBucket(bucket);
  let written: Record<string, string> = {};
  const result = await fencer.write(
    { op: "PutObject", bucket, key, tokenString, principal: req.principal, requestId: req.requestId },
    async (fence, hooks) => {
      const decoded = req.decodeBody();
      return backend.putObject(
        { bucket, key, body: decoded.stream, metadata, fence, conditions: writeConditions(req) },
        {
          ...hooks,
          beforeCommit: async () => {
            // The body has been read in full and verified: its checksums are stored with the object.
            const digest = await decoded.done;
            written = digest.checksums;
            if (Object.keys(digest.checksums).length > 0) metadata.checksums = digest.checksums;
            await hooks.beforeCommit?.();
          },
        },
      );
    },
  );
  return {
    status: 200,
    headers: { etag: result.etag, ...checksumHeaders(written), ...acceptedHeaders(result.token) },
  };
};

export const deleteObject: S3Operation = async (req, { backend, fencer }) => {
  const { bucket, key } = objectTarget(req);
  rejectVersionId(req);
  const tokenString = fenceTokenOf(req);
  await backend.headBucket(bucket);
  const result = await fencer.write(
    { op: "DeleteObject", bucket, key, tokenString, principal: req.principal, requestId: req.requestId },
    (fence, hooks) => backend.deleteObject({ bucket, key, fence }, hooks),
  );
  return { status: 204, headers: acceptedHeaders(result.token) };
};

export const getObject: S3Operation = async (req, { backend }) => {
  const { bucket, key } = objectTarget(req);
  rejectVersionId(req);
  const rangeHeader = header(req, "range");
  const range = rangeHeader ? parseRange(rangeHeader) : undefined;
  const { info, body, range: served } = await backend.getObject(bucket, key, range);
  try {
    if (evaluateReadConditions(req.headers, info) === "not-modified") {
      body.destroy();
      return { status: 304, headers: { etag: info.etag, "last-modified": info.lastModified.toUTCString() } };
    }
  } catch (e) {
    body.destroy();
    throw e;
  }
  const headers = {
    ...objectResponseHeaders(info),
    ...requestedChecksumHeaders(req, info, served !== undefined),
    ...responseOverrides(req),
  };
  if (served) {
    headers["content-range"] = `bytes ${served.start}-${served.end}/${info.size}`;
    headers["content-length"] = String(served.end - served.start + 1);
    return { status: 206, headers, stream: body };
  }
  headers["content-length"] = String(info.size);
  return { status: 200, headers, stream: body };
};

export const headObject: S3Operation = async (req, { backend }) => {
  const { bucket, key } = objectTarget(req);
  rejectVersionId(req);
  const info = await backend.headObject(bucket, key);
  if (evaluateReadConditions(req.headers, info) === "not-modified") {
    return { status: 304, headers: { etag: info.etag, "last-modified": info.lastModified.toUTCString() } };
  }
  const headers: Record<string, string> = {
    ...objectResponseHeaders(info),
    ...requestedChecksumHeaders(req, info, false),
    "content-length": String(info.size),
  };
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

export function writeConditions(req: S3Request): { ifMatch?: string; ifNoneMatch?: string } {
  const ifNoneMatch = header(req, "if-none-match");
  if (ifNoneMatch !== undefined && ifNoneMatch.trim() !== "*") {
    throw new DomainError("NotImplemented", "If-None-Match on a write supports only *", {
      s3Code: "NotImplemented",
    });
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

export function objectTarget(req: S3Request): { bucket: string; key: string } {
  if (req.bucket === null || req.key === null) {
    throw new DomainError("InvalidRequest", "this operation needs a bucket and a key");
  }
  return { bucket: req.bucket, key: req.key };
}
