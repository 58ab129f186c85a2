import { createHash } from "node:crypto";
import type { S3Operation, S3Request } from "../context.js";
import { drainBounded } from "../request-body.js";

export function ownerOf(principal: string) {
  return { ID: createHash("sha256").update(principal).digest("hex"), DisplayName: principal };
}

export const listBuckets: S3Operation = async (req, { backend }) => {
  const buckets = await backend.listBuckets();
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

export const createBucket: S3Operation = async (req, { backend }) => {
  // The optional CreateBucketConfiguration (a location constraint) does not change anything here.
  await drainBounded(req.decodeBody().stream, 64 * 1024);
  await backend.createBucket(bucketOf(req));
  return { status: 200, headers: { location: `/${bucketOf(req)}` } };
};

export const headBucket: S3Operation = async (req, { backend }) => {
  await backend.headBucket(bucketOf(req));
  return { status: 200, headers: { "x-amz-bucket-region": "us-east-1" } };
};

export const deleteBucket: S3Operation = async (req, { backend }) => {
  await backend.deleteBucket(bucketOf(req));
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
