import type { ObjectMetadata } from "../../backends/storage-backend.js";
import { DomainError } from "../../core/errors.js";
import { checkCopySourceConditions } from "../protocol/conditions.js";
import { header, type S3Operation } from "../protocol/context.js";
import { copySource } from "../protocol/copy-source.js";
import { metadataFromRequest } from "../protocol/object-headers.js";
import { checkRequestedAcl } from "./acl-request.js";
import { acceptedHeaders, objectTarget, writeConditions, writeContext } from "./objects.js";
import { checkObjectOptions } from "./storage-class.js";

/** CopyObject: a fenced write of the destination whose bytes stream from the source object. */
export const copyObject: S3Operation = async (req, { backend, fencer }) => {
  const { bucket, key } = objectTarget(req);
  const source = copySource(req);
  checkRequestedAcl(req, "object");
  checkObjectOptions(req);
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
  // The destination bucket first, as S3 answers a copy into a missing bucket.
  await backend.headBucket(bucket);
  const sourceInfo = await backend.headObject(source.bucket, source.key);
  checkCopySourceConditions(req.headers, sourceInfo);
  const metadata: ObjectMetadata =
    directive === "REPLACE"
      ? metadataFromRequest(req)
      : { headers: { ...sourceInfo.headers }, userMetadata: { ...sourceInfo.userMetadata } };
  const result = await fencer.write(writeContext(req, "CopyObject", writeConditions(req)), async (commit) => {
    const src = await backend.getObject(source.bucket, source.key, undefined, commit.signal);
    try {
      // The source may have changed since the conditions were checked; they must hold for the bytes copied.
      checkCopySourceConditions(req.headers, src.info);
      // The source's bytes were verified when they were written; with COPY its checksums come along.
      const checksums = directive === "COPY" ? { ...(src.info.checksums ?? {}) } : {};
      const body = { stream: src.body, digest: Promise.resolve({ size: src.info.size, checksums }) };
      return await backend.putObject({ bucket, key, body, metadata }, commit);
    } finally {
      // A refused copy leaves the source unread; its file must not stay open.
      src.body.destroy();
    }
  });
  return {
    status: 200,
    headers: acceptedHeaders(result.token),
    xml: { root: "CopyObjectResult", body: { ETag: result.etag, LastModified: result.lastModified } },
  };
};
