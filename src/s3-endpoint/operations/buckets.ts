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

/**
 * The bucket keeps its LocationConstraint for GetBucketLocation. A bucket the caller already owns
 * is answered as S3 answers it: in us-east-1, 200 with nothing changed (S3's legacy behaviour in
 * that region: the objects and the bucket's constraint stay); in any other region 409
 * BucketAlreadyOwnedByYou.
 */
export const createBucket: S3Operation = async (req, { backend, region }) => {
  checkRequestedAcl(req, "bucket");
  if (header(req, "x-amz-bucket-object-lock-enabled")?.trim().toLowerCase() === "true") {
    throw new DomainError("NotImplemented", "Object Lock is not implemented by fencegate");
  }
  const decoded = req.decodeBody();
  const body = await readBounded(decoded.stream, MAX_CREATE_BODY);
  await decoded.digest;
  const location = checkCreateBucketConfiguration(body, req.signingRegion, region);
  const bucket = bucketOf(req);
  try {
    await backend.createBucket(bucket, { location });
  } catch (e) {
    if (!(e instanceof DomainError && e.code === "BucketAlreadyOwnedByYou") || region !== "us-east-1")
      throw e;
    // Only a bucket the gateway can use is the caller's: a store bucket of another account is not.
    await backend.headBucket(bucket).catch(() => {
      throw e;
    });
  }
  return { status: 200, headers: { location: `/${bucket}` } };
};

/** The elements S3 accepts in a CreateBucketConfiguration. */
const CONFIGURATION_ELEMENTS = new Set(["LocationConstraint", "Location", "Bucket", "Tags"]);

/**
 * An optional CreateBucketConfiguration, parsed as S3 parses it (an empty body is none): the
 * root element and its children must be S3's, and a LocationConstraint must be a location this
 * endpoint can claim. The gateway is one location that answers for every region a client signs
 * for, so it accepts its own region (server.region), us-east-1, the region the request was
 * signed for, and `default` (the name S3-compatible servers such as Ceph give their one
 * location, which conformance suites send); it refuses other region names as a regional S3
 * endpoint does (IllegalLocationConstraintException) and anything else as not a location
 * (InvalidLocationConstraint). Returns the constraint the bucket keeps: "" for none and for
 * us-east-1, which S3 reports as an empty LocationConstraint.
 */
function checkCreateBucketConfiguration(body: Buffer, signingRegion: string, region: string): string {
  if (body.toString("utf8").trim() === "") return "";
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
  if (constraint === "" || constraint === "us-east-1") return "";
  if (constraint === "default" || constraint === region) return constraint;
  if (!/^[a-z]{2}(-[a-z]+)+-\d{1,2}$/.test(constraint) && constraint !== "EU") {
    throw new DomainError("InvalidLocationConstraint", "The specified location-constraint is not valid", {
      LocationConstraint: constraint.slice(0, 64),
    });
  }
  if (constraint !== signingRegion) {
    throw new DomainError(
      "IllegalLocationConstraintException",
      `The ${constraint} location constraint is incompatible for the region specific endpoint this request was sent to.`,
    );
  }
  return constraint;
}

export const headBucket: S3Operation = async (req, { backend, region }) => {
  await backend.headBucket(bucketOf(req));
  return { status: 200, headers: { "x-amz-bucket-region": region } };
};

export const deleteBucket: S3Operation = async (req, { backend, fencer }) => {
  // Commits in flight on any replica, so that the deletion is atomic with respect to them.
  await backend.deleteBucket(bucketOf(req), (bucket) => fencer.inFlight(bucket));
  return { status: 204 };
};

/** The constraint the bucket was created with; none (us-east-1) as an empty element, as S3 does. */
export const getBucketLocation: S3Operation = async (req, { backend }) => {
  const location = await backend.bucketLocation(bucketOf(req));
  return {
    status: 200,
    xml: { root: "LocationConstraint", body: location === "" ? {} : { "#text": location } },
  };
};

export function bucketOf(req: S3Request): string {
  return req.bucket!;
}
