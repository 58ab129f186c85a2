import { createHash } from "node:crypto";
import { DomainError } from "../../core/errors.js";
import { header, type S3Operation, type S3Request } from "../protocol/context.js";
import { readBounded } from "../protocol/request-body.js";
import { malformed, parseXmlDocument, text } from "../protocol/xml-input.js";
import { checkRequestedAcl } from "./acl-request.js";

export function ownerOf(principal: string) {
  return { ID: createHash("sha256").update(principal).digest("hex"), DisplayName: principal };
}

/**
 * Only the buckets where the caller may read something (any prefix), as on a shared gateway
 * each team expects to see its own buckets and not the others': `aws s3 ls` works for a key
 * limited to one prefix, and names no bucket it cannot use. Refusing would break that listing
 * for every key without rights on all buckets.
 */
export const listBuckets: S3Operation = async (req, { backend, access }) => {
  const buckets = (await backend.listBuckets()).filter((b) =>
    access.allowsSomewhere(req.principal, "read", b.name),
  );
  return {
    status: 200,
    xml: {
      root: "ListAllMyBucketsResult",
      body: {
        Owner: ownerOf(req.principal),
        Buckets: { Bucket: buckets.map((b) => ({ Name: b.name, CreationDate: b.creationDate })) },
      },
    },
  };
};

/** A CreateBucketConfiguration is a few hundred bytes; 64 KiB is generous. */
const MAX_CREATE_BODY = 64 * 1024;

export const createBucket: S3Operation = async (req, { backend }) => {
  checkRequestedAcl(req, "bucket");
  if (header(req, "x-amz-bucket-object-lock-enabled")?.trim().toLowerCase() === "true") {
    throw new DomainError("NotImplemented", "Object Lock is not implemented by fencegate");
  }
  const decoded = req.decodeBody();
  const body = await readBounded(decoded.stream, MAX_CREATE_BODY);
  await decoded.digest;
  checkCreateBucketConfiguration(body, req.signingRegion);
  await backend.createBucket(bucketOf(req));
  return { status: 200, headers: { location: `/${bucketOf(req)}` } };
};

/** The elements S3 accepts in a CreateBucketConfiguration. */
const CONFIGURATION_ELEMENTS = new Set(["LocationConstraint", "Location", "Bucket", "Tags"]);

/**
 * An optional CreateBucketConfiguration, parsed as S3 parses it (an empty body is none): the
 * root element and its children must be S3's, and a LocationConstraint must be a region name
 * this endpoint can claim. The gateway is one location that answers for every region a client
 * signs for, so it accepts us-east-1 (what it reports, as an empty LocationConstraint) and the
 * region the request was signed for, and refuses others as a regional S3 endpoint does.
 */
export function checkCreateBucketConfiguration(body: Buffer, signingRegion: string): void {
  if (body.toString("utf8").trim() === "") return;
  const doc = parseXmlDocument(body, "CreateBucketConfiguration");
  for (const name of Object.keys(doc)) {
    if (name === "#text" && String(doc[name]).trim() === "") continue;
    if (!CONFIGURATION_ELEMENTS.has(name)) throw malformed(`unexpected element ${name.slice(0, 64)}`);
  }
  if (doc.Location !== undefined || doc.Bucket !== undefined) {
    throw new DomainError("NotImplemented", "Directory buckets are not implemented by fencegate");
  }
  if (doc.Tags !== undefined) {
    throw new DomainError("NotImplemented", "Bucket tags are not implemented by fencegate");
  }
  const constraint = text(doc, "LocationConstraint")?.trim() ?? "";
  if (constraint === "") return;
  if (!/^[a-z]{2}(-[a-z]+)+-\d{1,2}$/.test(constraint) && constraint !== "EU") {
    throw new DomainError("InvalidLocationConstraint", "The specified location-constraint is not valid", {
      LocationConstraint: constraint.slice(0, 64),
    });
  }
  if (constraint !== "us-east-1" && constraint !== signingRegion) {
    throw new DomainError(
      "IllegalLocationConstraintException",
      `The ${constraint} location constraint is incompatible for the region specific endpoint this request was sent to.`,
    );
  }
}

export const headBucket: S3Operation = async (req, { backend }) => {
  await backend.headBucket(bucketOf(req));
  return { status: 200, headers: { "x-amz-bucket-region": "us-east-1" } };
};

export const deleteBucket: S3Operation = async (req, { backend, fencer }) => {
  // Commits in flight on any replica, so that the deletion is atomic with respect to them.
  await backend.deleteBucket(bucketOf(req), (bucket) => fencer.inFlight(bucket));
  return { status: 204 };
};

export const getBucketLocation: S3Operation = async (req, { backend }) => {
  await backend.headBucket(bucketOf(req));
  // us-east-1 is reported as an empty LocationConstraint, as S3 does.
  return { status: 200, xml: { root: "LocationConstraint", body: {} } };
};

export function bucketOf(req: S3Request): string {
  return req.bucket!;
}
