import { assertValidObjectKey } from "../../backends/key-rules.js";
import type { ObjectMetadata } from "../../backends/storage-backend.js";
import { DomainError } from "../../core/errors.js";
import { checkCopySourceConditions } from "../conditions.js";
import { header, type S3Operation, type S3Request } from "../context.js";
import { fenceTokenOf } from "../fence-token.js";
import { metadataFromHeaders } from "../object-headers.js";
import { acceptedHeaders, objectTarget, writeConditions } from "./objects.js";

/** CopyObject: a fenced write of the destination whose bytes stream from the source object. */
export const copyObject: S3Operation = async (req, { backend, fencer }) => {
  const { bucket, key } = objectTarget(req);
  const source = copySource(req);
  const directive = (header(req, "x-amz-metadata-directive") ?? "COPY").toUpperCase();
  if (directive !== "COPY" && directive !== "REPLACE") {
    throw new DomainError("InvalidArgument", "Unknown metadata directive.");
  }
  if (source.bucket === bucket && source.key === key && directive === "COPY") {
    throw new DomainError(
      "InvalidRequest",
      "This copy request is illegal because it is trying to copy an object to itself without changing the " +
        "object's metadata, storage class, website redirect location or encryption attributes.",
    );
  }
  await backend.headBucket(bucket);
  const sourceInfo = await backend.headObject(source.bucket, source.key);
  checkCopySourceConditions(req.headers, sourceInfo);
  const metadata: ObjectMetadata =
    directive === "REPLACE"
      ? metadataFromHeaders(req.headers)
      : {
          headers: { ...sourceInfo.headers },
          userMetadata: { ...sourceInfo.userMetadata },
          ...(sourceInfo.checksums ? { checksums: { ...sourceInfo.checksums } } : {}),
        };
  const tokenString = fenceTokenOf(req);
  const conditions = writeConditions(req);
  const result = await fencer.write(
    { op: "CopyObject", bucket, key, tokenString, principal: req.principal, requestId: req.requestId },
    async (fence, hooks) => {
      const src = await backend.getObject(source.bucket, source.key);
      try {
        // The source may have changed since the conditions were checked; they must hold for the bytes copied.
        checkCopySourceConditions(req.headers, src.info);
        return await backend.putObject({ bucket, key, body: src.body, metadata, fence, conditions }, hooks);
      } finally {
        // A refused copy leaves the source unread; its file must not stay open.
        src.body.destroy();
      }
    },
  );
  return {
    status: 200,
    headers: acceptedHeaders(result.token),
    xml: { root: "CopyObjectResult", body: { ETag: result.etag, LastModified: result.lastModified } },
  };
};

/** x-amz-copy-source: `bucket/key` or `/bucket/key`, URL-encoded, optionally `?versionId=null`. */
export function copySource(req: S3Request): { bucket: string; key: string } {
  const raw = header(req, "x-amz-copy-source");
  if (!raw) throw new DomainError("InvalidArgument", "Copy Source must mention the source bucket and key");
  const [pathPart = "", query = ""] = raw.split("?", 2);
  const versionId = new URLSearchParams(query).get("versionId");
  if (versionId !== null && versionId !== "null") {
    throw new DomainError("InvalidArgument", "Invalid version id specified");
  }
  let decoded: string;
  try {
    decoded = decodeURIComponent(pathPart);
  } catch {
    throw new DomainError("InvalidArgument", "Invalid copy source encoding");
  }
  const path = decoded.startsWith("/") ? decoded.slice(1) : decoded;
  const slash = path.indexOf("/");
  if (slash <= 0 || slash === path.length - 1) {
    throw new DomainError(
      "InvalidArgument",
      "Copy Source must mention the source bucket and key: sourcebucket/sourcekey",
    );
  }
  const key = path.slice(slash + 1);
  assertValidObjectKey(key);
  return { bucket: path.slice(0, slash), key };
}
