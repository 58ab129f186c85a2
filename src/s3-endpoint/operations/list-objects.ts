import type { ListEntry } from "../../backends/storage-backend.js";
import { DomainError } from "../../core/errors.js";
import { isValidObjectKey } from "../../core/key-rules.js";
import type { S3Operation, S3Request } from "../protocol/context.js";
import { textParam } from "../protocol/query.js";
import type { XmlNode } from "../protocol/xml.js";
import { bucketOf, ownerOf } from "./buckets.js";

const MAX_KEYS = 1000;

export const listObjectsV2: S3Operation = async (req, { backend }) => {
  const bucket = bucketOf(req);
  const q = req.query;
  const encode = encoderFor(req);
  const continuation = q.get("continuation-token");
  const startAfter = textParam(q, "start-after") ?? undefined;
  const prefix = textParam(q, "prefix") ?? "";
  const delimiter = textParam(q, "delimiter") || undefined;
  const maxKeys = maxKeysOf(req);
  // An empty token is no token (S3 lists from the start and echoes it back empty).
  const after = continuation ? decodeContinuation(continuation) : startAfter;
  const result = await backend.listObjects({ bucket, prefix, delimiter, startAfter: after, maxKeys });
  const owner = q.get("fetch-owner") === "true" ? ownerOf(req.principal) : undefined;
  return {
    status: 200,
    xml: {
      root: "ListBucketResult",
      body: {
        Name: bucket,
        Prefix: encode(prefix),
        Delimiter: delimiter !== undefined ? encode(delimiter) : undefined,
        MaxKeys: maxKeys,
        EncodingType: q.get("encoding-type") ?? undefined,
        KeyCount: result.objects.length + result.commonPrefixes.length,
        IsTruncated: result.isTruncated,
        ContinuationToken: continuation ?? undefined,
        NextContinuationToken:
          result.isTruncated && result.nextStartAfter !== undefined
            ? encodeContinuation(result.nextStartAfter)
            : undefined,
        StartAfter: startAfter !== undefined ? encode(startAfter) : undefined,
        Contents: result.objects.map((o) => contents(o, encode, owner)),
        CommonPrefixes: result.commonPrefixes.map((p) => ({ Prefix: encode(p) })),
      },
    },
  };
};

export const listObjectsV1: S3Operation = async (req, { backend }) => {
  const bucket = bucketOf(req);
  const q = req.query;
  const encode = encoderFor(req);
  const marker = textParam(q, "marker") ?? "";
  const prefix = textParam(q, "prefix") ?? "";
  const delimiter = textParam(q, "delimiter") || undefined;
  const maxKeys = maxKeysOf(req);
  const result = await backend.listObjects({
    bucket,
    prefix,
    delimiter,
    startAfter: marker || undefined,
    maxKeys,
  });
  const body: XmlNode = {
    Name: bucket,
    Prefix: encode(prefix),
    Marker: encode(marker),
    MaxKeys: maxKeys,
    Delimiter: delimiter !== undefined ? encode(delimiter) : undefined,
    EncodingType: q.get("encoding-type") ?? undefined,
    IsTruncated: result.isTruncated,
    // S3 returns NextMarker only with a delimiter; clients without one continue from the last key.
    NextMarker:
      result.isTruncated && delimiter !== undefined && result.nextStartAfter !== undefined
        ? encode(result.nextStartAfter)
        : undefined,
    Contents: result.objects.map((o) => contents(o, encode, ownerOf(req.principal))),
    CommonPrefixes: result.commonPrefixes.map((p) => ({ Prefix: encode(p) })),
  };
  return { status: 200, xml: { root: "ListBucketResult", body } };
};

function contents(o: ListEntry, encode: (s: string) => string, owner?: XmlNode): XmlNode {
  return {
    Key: encode(o.key),
    LastModified: o.lastModified,
    ETag: o.etag,
    Size: o.size,
    Owner: owner,
    StorageClass: "STANDARD",
  };
}

export function maxKeysOf(req: S3Request): number {
  const raw = req.query.get("max-keys");
  if (raw === null || raw === "") return MAX_KEYS;
  if (!/^\d+$/.test(raw)) {
    throw new DomainError("InvalidArgument", "Provided max-keys not an integer or within integer range");
  }
  return Math.min(Number(raw), MAX_KEYS);
}

export function encoderFor(req: S3Request): (s: string) => string {
  const type = req.query.get("encoding-type");
  if (type === null) return (s) => s;
  if (type !== "url")
    throw new DomainError("InvalidArgument", "Invalid Encoding Method specified in Request");
  // S3's url encoding keeps "/" readable, like its own listings.
  return (s) => encodeURIComponent(s).replace(/%2F/g, "/");
}

function encodeContinuation(after: string): string {
  return Buffer.from(`1:${after}`, "utf8").toString("base64url");
}

function decodeContinuation(token: string): string {
  const text = Buffer.from(token, "base64url").toString("utf8");
  if (!text.startsWith("1:")) {
    throw new DomainError("InvalidArgument", "The continuation token provided is incorrect");
  }
  const after = text.slice(2);
  // A token this gateway issued names a key; anything else in it was made up.
  if (!isValidObjectKey(after)) {
    throw new DomainError("InvalidArgument", "The continuation token provided is incorrect");
  }
  return after;
}
