import { DomainError, isDomainError } from "../../core/errors.js";
import { assertValidObjectKey } from "../../core/key-rules.js";
import { assertAllowed } from "../protocol/access.js";
import type { S3Operation } from "../protocol/context.js";
import { toS3Error } from "../protocol/errors.js";
import { fenceTokenOf, fenceTransactionOf } from "../protocol/fence-token.js";
import { readBounded } from "../protocol/request-body.js";
import type { XmlNode } from "../protocol/xml.js";
import { children, malformed, parseXmlDocument, text } from "../protocol/xml-input.js";
import { bucketOf } from "./buckets.js";
import { acceptedHeaders } from "./objects.js";

const MAX_KEYS = 1000;
const MAX_BODY_BYTES = 2 * 1024 * 1024;

/** Elements of an Object entry; ETag, LastModifiedTime and Size make a conditional delete. */
const OBJECT_ELEMENTS = new Set(["Key", "VersionId", "ETag", "LastModifiedTime", "Size"]);
const CONDITION_ELEMENTS = ["ETag", "LastModifiedTime", "Size"];

type Entry = { key: string; versionId: string | undefined };

/**
 * DeleteObjects: each key is its own fenced write, decided and audited separately with the
 * request's token; the answer lists a result per key (only errors when Quiet). The whole
 * document is validated before the first key is deleted: a malformed request deletes nothing.
 * A key the caller may not write is AccessDenied in the result, audited, and left alone, as S3
 * answers; the others are deleted.
 */
export const deleteObjects: S3Operation = async (req, { backend, fencer, access }) => {
  const bucket = bucketOf(req);
  await backend.headBucket(bucket);
  const tokenString = fenceTokenOf(req);
  const transactionId = fenceTransactionOf(req);
  // Reading through the decoder verifies Content-MD5 or the x-amz-checksum-* header before anything is deleted.
  const decoded = req.decodeBody();
  const body = await readBounded(decoded.stream, MAX_BODY_BYTES);
  await decoded.digest;
  const { entries, quiet } = parseDeleteBody(body);

  const deleted: XmlNode[] = [];
  const errors: XmlNode[] = [];
  let acceptedToken: number | null = null;
  for (const { key, versionId } of entries) {
    try {
      const ctx = {
        op: "DeleteObjects",
        bucket,
        key,
        tokenString,
        transactionId,
        principal: req.principal,
        requestId: req.requestId,
        signal: req.signal,
      };
      try {
        assertValidObjectKey(key);
        // Objects have one version, "null": deleting any other names nothing, and must not delete the object.
        if (versionId !== undefined && versionId !== "null") {
          throw new DomainError("InvalidArgument", "Invalid version id specified");
        }
        assertAllowed(access, req.principal, "write", bucket, { key });
      } catch (e) {
        await fencer.recordRefusal(ctx, e);
        throw e;
      }
      const result = await fencer.write(ctx, (commit) => backend.deleteObject({ bucket, key }, commit));
      acceptedToken = result.token ?? acceptedToken;
      if (!quiet) deleted.push({ Key: key, VersionId: versionId });
    } catch (e) {
      if (!isDomainError(e)) throw e;
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

/** The whole Delete document, or MalformedXML / NotImplemented before anything is deleted. */
function parseDeleteBody(body: Buffer): { entries: Entry[]; quiet: boolean } {
  const doc = parseXmlDocument(body, "Delete");
  for (const name of Object.keys(doc)) {
    if (name !== "Object" && name !== "Quiet" && !(name === "#text" && String(doc[name]).trim() === "")) {
      throw malformed(`unexpected element ${name.slice(0, 64)}`);
    }
  }
  const objects = children(doc, "Object");
  if (objects.length === 0 || objects.length > MAX_KEYS) throw malformed(`between 1 and ${MAX_KEYS} keys`);
  const quietText = text(doc, "Quiet")?.trim().toLowerCase();
  if (quietText !== undefined && quietText !== "true" && quietText !== "false") {
    throw malformed("Quiet must be true or false");
  }
  const entries = objects.map((o): Entry => {
    for (const name of Object.keys(o)) {
      if (!OBJECT_ELEMENTS.has(name) && !(name === "#text" && String(o[name]).trim() === "")) {
        throw malformed(`unexpected element ${name.slice(0, 64)} in Object`);
      }
    }
    if (CONDITION_ELEMENTS.some((name) => o[name] !== undefined)) {
      throw new DomainError(
        "NotImplemented",
        "Conditional deletes in DeleteObjects are not implemented by fencegate",
      );
    }
    const key = text(o, "Key");
    if (key === undefined) throw malformed("every Object needs a Key");
    return { key, versionId: text(o, "VersionId") };
  });
  return { entries, quiet: quietText === "true" };
}
