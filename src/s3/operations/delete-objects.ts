import { assertValidObjectKey } from "../../backends/key-rules.js";
import { isDomainError } from "../../core/errors.js";
import type { S3Operation } from "../context.js";
import { toS3Error } from "../errors.js";
import { fenceTokenOf } from "../fence-token.js";
import { readBounded } from "../request-body.js";
import type { XmlNode } from "../xml.js";
import { children, malformed, parseXmlDocument, text } from "../xml-input.js";
import { bucketOf } from "./buckets.js";
import { acceptedHeaders } from "./objects.js";

const MAX_KEYS = 1000;
const MAX_BODY_BYTES = 2 * 1024 * 1024;

/**
 * DeleteObjects: each key is its own fenced write, decided and audited separately with the
 * request's token; the answer lists a result per key (only errors when Quiet).
 */
export const deleteObjects: S3Operation = async (req, { backend, fencer }) => {
  const bucket = bucketOf(req);
  await backend.headBucket(bucket);
  const tokenString = fenceTokenOf(req);
  // Reading through the decoder verifies Content-MD5 or the x-amz-checksum-* header before anything is deleted.
  const decoded = req.decodeBody();
  const body = await readBounded(decoded.stream, MAX_BODY_BYTES);
  await decoded.done;
  const doc = parseXmlDocument(body, "Delete");
  const objects = children(doc, "Object");
  if (objects.length === 0 || objects.length > MAX_KEYS) throw malformed(`between 1 and ${MAX_KEYS} keys`);
  const quiet = text(doc, "Quiet")?.trim().toLowerCase() === "true";

  const deleted: XmlNode[] = [];
  const errors: XmlNode[] = [];
  let acceptedToken: number | null = null;
  for (const o of objects) {
    const key = text(o, "Key");
    if (key === undefined) throw malformed("every Object needs a Key");
    const versionId = text(o, "VersionId");
    try {
      const ctx = {
        op: "DeleteObjects",
        bucket,
        key,
        tokenString,
        principal: req.principal,
        requestId: req.requestId,
      };
      try {
        assertValidObjectKey(key);
      } catch (e) {
        await fencer.recordRefusal(ctx, e);
        throw e;
      }
      const result = await fencer.write(ctx, (fence, hooks) =>
        backend.deleteObject({ bucket, key, fence }, hooks),
      );
      acceptedToken = result.token ?? acceptedToken;
      if (!quiet) deleted.push({ Key: key, VersionId: versionId });
    } catch (e) {
      if (!isDomainError(e) && !(e as { code?: unknown }).code) throw e;
      const err = toS3Error(e);
      errors.push({ Key: key, VersionId: versionId, Code: err.code, Message: err.message });
    }
  }
  return {
    status: 200,
    headers: acceptedHeaders(acceptedToken),
    xml: { root: "DeleteResult", body: { Deleted: deleted, Error: errors } },
  };
};
