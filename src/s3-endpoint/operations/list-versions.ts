import { DomainError } from "../../core/errors.js";
import type { S3Operation } from "../protocol/context.js";
import { textParam } from "../protocol/query.js";
import { bucketOf, ownerOf } from "./buckets.js";
import { encoderFor, maxKeysOf } from "./list-objects.js";

/**
 * ListObjectVersions on buckets without versioning: every key has exactly one version,
 * "null", which is the latest. Tools that always list versions (sync, clean-up) work as on S3.
 */
export const listObjectVersions: S3Operation = async (req, { backend }) => {
  const bucket = bucketOf(req);
  const q = req.query;
  const encode = encoderFor(req);
  const keyMarker = textParam(q, "key-marker") ?? "";
  const versionIdMarker = q.get("version-id-marker") ?? "";
  if (versionIdMarker !== "" && versionIdMarker !== "null") {
    throw new DomainError("InvalidArgument", "Invalid version id specified");
  }
  if (versionIdMarker !== "" && keyMarker === "") {
    throw new DomainError("InvalidArgument", "A version-id marker cannot be specified without a key marker.");
  }
  const prefix = textParam(q, "prefix") ?? "";
  const delimiter = textParam(q, "delimiter") || undefined;
  const maxKeys = maxKeysOf(req);
  const result = await backend.listObjects({
    bucket,
    prefix,
    delimiter,
    startAfter: keyMarker || undefined,
    maxKeys,
  });
  const owner = ownerOf(req.principal);
  const next = result.isTruncated ? result.nextStartAfter : undefined;
  return {
    status: 200,
    xml: {
      root: "ListVersionsResult",
      body: {
        Name: bucket,
        Prefix: encode(prefix),
        KeyMarker: encode(keyMarker),
        VersionIdMarker: versionIdMarker,
        MaxKeys: maxKeys,
        Delimiter: delimiter !== undefined ? encode(delimiter) : undefined,
        EncodingType: q.get("encoding-type") ?? undefined,
        IsTruncated: result.isTruncated,
        NextKeyMarker: next !== undefined ? encode(next) : undefined,
        NextVersionIdMarker: next !== undefined ? "null" : undefined,
        Version: result.objects.map((o) => ({
          Key: encode(o.key),
          VersionId: "null",
          IsLatest: true,
          LastModified: o.lastModified,
          ETag: o.etag,
          Size: o.size,
          Owner: owner,
          StorageClass: "STANDARD",
        })),
        CommonPrefixes: result.commonPrefixes.map((p) => ({ Prefix: encode(p) })),
      },
    },
  };
};
