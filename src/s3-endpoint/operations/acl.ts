import { DomainError } from "../../core/errors.js";
import type { S3Operation, S3Request } from "../protocol/context.js";
import { readBounded } from "../protocol/request-body.js";
import { children, parseXmlDocument, text, type XmlElement } from "../protocol/xml-input.js";
import { checkRequestedAcl, GRANT_HEADERS, notSupported, requested } from "./acl-request.js";
import { bucketOf, ownerOf } from "./buckets.js";
import { objectTarget } from "./objects.js";

/** An AccessControlPolicy document is small; 64 KiB is generous. */
const MAX_ACL_BODY = 64 * 1024;

const malformedAcl = (detail?: string) =>
  new DomainError(
    "MalformedACLError",
    `The XML you provided was not well-formed or did not validate against our published schema${detail ? ` (${detail})` : ""}`,
  );

/**
 * PutBucketAcl / PutObjectAcl in a single-owner store (see acl-request.ts): accepted, changing
 * nothing, when it grants the owner full control and nothing else.
 */
async function putAcl(req: S3Request, target: "bucket" | "object"): Promise<void> {
  const decoded = req.decodeBody();
  const body = await readBounded(decoded.stream, MAX_ACL_BODY);
  await decoded.digest;
  const hasHeaders =
    requested(req, "x-amz-acl") !== undefined || GRANT_HEADERS.some((n) => requested(req, n) !== undefined);
  const hasBody = body.toString("utf8").trim() !== "";
  if (hasHeaders && hasBody) {
    throw new DomainError("InvalidRequest", "Specifying both an ACL header and an ACL body is not allowed.");
  }
  if (hasHeaders) return checkRequestedAcl(req, target);
  if (!hasBody) throw malformedAcl("the request has neither an ACL header nor an AccessControlPolicy");
  checkPolicyDocument(body, ownerOf(req.principal).ID);
}

function checkPolicyDocument(body: Buffer, ownerId: string): void {
  let doc: XmlElement;
  try {
    doc = parseXmlDocument(body, "AccessControlPolicy");
  } catch (e) {
    throw malformedAcl((e as Error).message.replace(/^.*\((.*)\)$/, "$1"));
  }
  const owner = children(doc, "Owner")[0];
  if (owner && text(owner, "ID") !== undefined && text(owner, "ID")!.trim() !== ownerId) throw notSupported();
  const list = children(doc, "AccessControlList")[0];
  if (!list) throw malformedAcl("AccessControlList is required");
  const grants = children(list, "Grant");
  if (grants.length === 0) throw notSupported();
  for (const grant of grants) {
    const grantee = children(grant, "Grantee")[0];
    const permission = text(grant, "Permission")?.trim();
    if (!grantee || permission === undefined)
      throw malformedAcl("every Grant needs a Grantee and a Permission");
    const id = text(grantee, "ID")?.trim();
    if (id !== ownerId || permission !== "FULL_CONTROL") throw notSupported();
  }
}

export const putBucketAcl: S3Operation = async (req, { backend }) => {
  await backend.headBucket(bucketOf(req));
  await putAcl(req, "bucket");
  return { status: 200 };
};

export const putObjectAcl: S3Operation = async (req, { backend }) => {
  const { bucket, key } = objectTarget(req);
  await backend.headObject(bucket, key);
  await putAcl(req, "object");
  return { status: 200 };
};
