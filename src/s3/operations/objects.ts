import { DomainError } from "../../core/errors.js";
import { header, type S3Operation, type S3Request } from "../context.js";
import { fenceTokenOf } from "../fence-token.js";
import { metadataFromHeaders, objectResponseHeaders } from "../object-headers.js";
import { parseRange } from "../range.js";

export const putObject: S3Operation = async (req, { backend, fencer }) => {
  const { bucket, key } = target(req);
  const tokenString = fenceTokenOf(req);
  const metadata = metadataFromHeaders(req.headers);
  // Refuse a write to a missing bucket before anything else, without reading the body.
  await backend.headBucket(bucket);
  const result = await fencer.write(
    { op: "PutObject", bucket, key, tokenString, principal: req.principal, requestId: req.requestId },
    async (fence, hooks) => {
      const decoded = req.decodeBody();
      return backend.putObject(
        {
          bucket,
          key,
          body: decoded.stream,
          metadata,
          fence,
          conditions: { ifMatch: header(req, "if-match"), ifNoneMatch: header(req, "if-none-match") },
        },
        hooks,
      );
    },
  );
  return { status: 200, headers: { etag: result.etag, ...acceptedHeaders(result.token) } };
};

export const deleteObject: S3Operation = async (req, { backend, fencer }) => {
  const { bucket, key } = target(req);
  const tokenString = fenceTokenOf(req);
  await backend.headBucket(bucket);
  const result = await fencer.write(
    { op: "DeleteObject", bucket, key, tokenString, principal: req.principal, requestId: req.requestId },
    (fence, hooks) => backend.deleteObject({ bucket, key, fence }, hooks),
  );
  return { status: 204, headers: acceptedHeaders(result.token) };
};

export const getObject: S3Operation = async (req, { backend }) => {
  const { bucket, key } = target(req);
  const rangeHeader = header(req, "range");
  const range = rangeHeader ? parseRange(rangeHeader) : undefined;
  const { info, body, range: served } = await backend.getObject(bucket, key, range);
  const headers = { ...objectResponseHeaders(info), ...responseOverrides(req) };
  if (served) {
    headers["content-range"] = `bytes ${served.start}-${served.end}/${info.size}`;
    headers["content-length"] = String(served.end - served.start + 1);
    return { status: 206, headers, stream: body };
  }
  headers["content-length"] = String(info.size);
  return { status: 200, headers, stream: body };
};

export const headObject: S3Operation = async (req, { backend }) => {
  const { bucket, key } = target(req);
  const info = await backend.headObject(bucket, key);
  return { status: 200, headers: { ...objectResponseHeaders(info), "content-length": String(info.size) } };
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
    if (v !== null) out[name.slice("response-".length)] = v;
  }
  return out;
}

function acceptedHeaders(token: number | null): Record<string, string> {
  return token === null ? {} : { "x-fence-token-accepted": String(token) };
}

function target(req: S3Request): { bucket: string; key: string } {
  if (req.bucket === null || req.key === null) {
    throw new DomainError("InvalidRequest", "this operation needs a bucket and a key");
  }
  return { bucket: req.bucket, key: req.key };
}
