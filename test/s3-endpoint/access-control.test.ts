import { XMLParser } from "fast-xml-parser";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { S3Request } from "../../src/s3-endpoint/protocol/context.js";
import { ROUTES } from "../../src/s3-endpoint/routes.js";
import {
  objectPath,
  presign,
  type RawResponse,
  rawRequest,
  type SignedRequest,
} from "../support/signed-http.js";
import {
  type AccessGateway,
  as,
  expectDenied,
  PRIVATE,
  READER,
  ROOT,
  SHARED,
  startAccessGateway,
  WRITER,
} from "./access-control-kit.js";

/**
 * Access control on the S3 endpoint: every route checks the caller's rights (src/access) before
 * it runs, refuses with S3's AccessDenied, and records the refusal in the audit log.
 */

let env: AccessGateway;
/** An upload under team-b/ that root started, and one under team-a/ that the writer started. */
let rootUpload: string;
let writerUpload: string;

const xml = new XMLParser({ parseTagValue: false });
const parse = (res: RawResponse) => xml.parse(res.text) as Record<string, Record<string, unknown>>;
const list = <T>(v: T | T[] | undefined): T[] => (v === undefined ? [] : Array.isArray(v) ? v : [v]);
const send = (who: typeof ROOT, req: Omit<SignedRequest, "credentials">) => as(env.gw, who, req);

async function createUpload(who: typeof ROOT, key: string): Promise<string> {
  const res = await send(who, { method: "POST", path: objectPath(SHARED, key), query: { uploads: "" } });
  expect(res.status, res.text).toBe(200);
  return String(parse(res).InitiateMultipartUploadResult!.UploadId);
}

beforeAll(async () => {
  env = await startAccessGateway();
  rootUpload = await createUpload(ROOT, "team-b/mp.bin");
  writerUpload = await createUpload(WRITER, "team-a/mp.bin");
});

afterAll(async () => {
  await env?.stop();
});

type Case = {
  op: string;
  who: typeof ROOT;
  req: () => Omit<SignedRequest, "credentials">;
  /** The key the audit record names (null for bucket-level operations). */
  key?: string | null;
  bucket?: string;
};

const copyFrom = (source: string) => ({ "x-amz-copy-source": source });
const completeBody =
  '<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"x"</ETag></Part></CompleteMultipartUpload>';

const READER_DENIED: Case[] = [
  {
    op: "PutObject",
    who: READER,
    key: "team-a/r.txt",
    req: () => ({ method: "PUT", path: objectPath(SHARED, "team-a/r.txt"), body: "r" }),
  },
  {
    op: "DeleteObject",
    who: READER,
    key: "team-a/seed.txt",
    req: () => ({ method: "DELETE", path: objectPath(SHARED, "team-a/seed.txt") }),
  },
  {
    op: "CopyObject",
    who: READER,
    key: "team-a/copy.txt",
    req: () => ({
      method: "PUT",
      path: objectPath(SHARED, "team-a/copy.txt"),
      headers: copyFrom(`${SHARED}/team-a/seed.txt`),
    }),
  },
  {
    op: "CreateMultipartUpload",
    who: READER,
    key: "team-a/r.bin",
    req: () => ({ method: "POST", path: objectPath(SHARED, "team-a/r.bin"), query: { uploads: "" } }),
  },
  {
    op: "UploadPart",
    who: READER,
    key: "team-a/mp.bin",
    req: () => ({
      method: "PUT",
      path: objectPath(SHARED, "team-a/mp.bin"),
      query: { partNumber: "1", uploadId: writerUpload },
      body: "p",
    }),
  },
  {
    op: "AbortMultipartUpload",
    who: READER,
    key: "team-a/mp.bin",
    req: () => ({
      method: "DELETE",
      path: objectPath(SHARED, "team-a/mp.bin"),
      query: { uploadId: writerUpload },
    }),
  },
  {
    op: "GetObject",
    who: READER,
    bucket: PRIVATE,
    key: "secret.txt",
    req: () => ({ method: "GET", path: objectPath(PRIVATE, "secret.txt") }),
  },
  {
    op: "HeadObject",
    who: READER,
    bucket: PRIVATE,
    key: "secret.txt",
    req: () => ({ method: "HEAD", path: objectPath(PRIVATE, "secret.txt") }),
  },
  {
    op: "ListObjectsV2",
    who: READER,
    bucket: PRIVATE,
    key: null,
    req: () => ({ method: "GET", path: `/${PRIVATE}`, query: { "list-type": "2" } }),
  },
  {
    op: "ListMultipartUploads",
    who: READER,
    bucket: PRIVATE,
    key: null,
    req: () => ({ method: "GET", path: `/${PRIVATE}`, query: { uploads: "" } }),
  },
  {
    op: "GetBucketLocation",
    who: READER,
    bucket: PRIVATE,
    key: null,
    req: () => ({ method: "GET", path: `/${PRIVATE}`, query: { location: "" } }),
  },
  {
    op: "GetBucketAcl",
    who: READER,
    bucket: PRIVATE,
    key: null,
    req: () => ({ method: "GET", path: `/${PRIVATE}`, query: { acl: "" } }),
  },
  {
    op: "GetBucket.versioning",
    who: READER,
    bucket: PRIVATE,
    key: null,
    req: () => ({ method: "GET", path: `/${PRIVATE}`, query: { versioning: "" } }),
  },
  {
    op: "HeadBucket",
    who: READER,
    bucket: PRIVATE,
    key: null,
    req: () => ({ method: "HEAD", path: `/${PRIVATE}` }),
  },
  {
    op: "CreateBucket",
    who: READER,
    bucket: "readers-own",
    key: null,
    req: () => ({ method: "PUT", path: "/readers-own" }),
  },
  { op: "DeleteBucket", who: READER, key: null, req: () => ({ method: "DELETE", path: `/${SHARED}` }) },
  {
    op: "PutBucketAcl",
    who: READER,
    key: null,
    req: () => ({
      method: "PUT",
      path: `/${SHARED}`,
      query: { acl: "" },
      headers: { "x-amz-acl": "private" },
    }),
  },
  // A setting fencegate does not implement: still the access answer first, for a caller without rights.
  {
    op: "UnsupportedBucketSubresource",
    who: READER,
    key: null,
    req: () => ({
      method: "PUT",
      path: `/${SHARED}`,
      query: { versioning: "" },
      body: "<VersioningConfiguration/>",
    }),
  },
  {
    op: "DeleteObjects",
    who: READER,
    key: null,
    req: () => ({
      method: "POST",
      path: `/${SHARED}`,
      query: { delete: "" },
      body: "<Delete><Object><Key>team-a/seed.txt</Key></Object></Delete>",
    }),
  },
];

const WRITER_DENIED: Case[] = [
  {
    op: "PutObject",
    who: WRITER,
    key: "team-b/w.txt",
    req: () => ({ method: "PUT", path: objectPath(SHARED, "team-b/w.txt"), body: "w" }),
  },
  {
    op: "GetObject",
    who: WRITER,
    key: "team-b/seed.txt",
    req: () => ({ method: "GET", path: objectPath(SHARED, "team-b/seed.txt") }),
  },
  {
    op: "HeadObject",
    who: WRITER,
    key: "team-b/seed.txt",
    req: () => ({ method: "HEAD", path: objectPath(SHARED, "team-b/seed.txt") }),
  },
  {
    op: "DeleteObject",
    who: WRITER,
    key: "team-b/seed.txt",
    req: () => ({ method: "DELETE", path: objectPath(SHARED, "team-b/seed.txt") }),
  },
  {
    op: "GetObjectAcl",
    who: WRITER,
    key: "team-b/seed.txt",
    req: () => ({ method: "GET", path: objectPath(SHARED, "team-b/seed.txt"), query: { acl: "" } }),
  },
  {
    op: "PutObjectAcl",
    who: WRITER,
    key: "team-b/seed.txt",
    req: () => ({
      method: "PUT",
      path: objectPath(SHARED, "team-b/seed.txt"),
      query: { acl: "" },
      headers: { "x-amz-acl": "private" },
    }),
  },
  {
    op: "CopyObject",
    who: WRITER,
    key: "team-b/copy.txt",
    req: () => ({
      method: "PUT",
      path: objectPath(SHARED, "team-b/copy.txt"),
      headers: copyFrom(`${SHARED}/team-a/seed.txt`),
    }),
  },
  {
    op: "CopyObject",
    who: WRITER,
    key: "team-a/stolen.txt",
    req: () => ({
      method: "PUT",
      path: objectPath(SHARED, "team-a/stolen.txt"),
      headers: copyFrom(`${SHARED}/team-b/seed.txt`),
    }),
  },
  {
    op: "CopyObject",
    who: WRITER,
    key: "team-a/stolen.txt",
    req: () => ({
      method: "PUT",
      path: objectPath(SHARED, "team-a/stolen.txt"),
      headers: copyFrom(`/${PRIVATE}/secret.txt`),
    }),
  },
  {
    op: "CreateMultipartUpload",
    who: WRITER,
    key: "team-b/w.bin",
    req: () => ({ method: "POST", path: objectPath(SHARED, "team-b/w.bin"), query: { uploads: "" } }),
  },
  {
    op: "UploadPart",
    who: WRITER,
    key: "team-b/mp.bin",
    req: () => ({
      method: "PUT",
      path: objectPath(SHARED, "team-b/mp.bin"),
      query: { partNumber: "1", uploadId: rootUpload },
      body: "p",
    }),
  },
  {
    op: "UploadPartCopy",
    who: WRITER,
    key: "team-a/mp.bin",
    req: () => ({
      method: "PUT",
      path: objectPath(SHARED, "team-a/mp.bin"),
      query: { partNumber: "1", uploadId: writerUpload },
      headers: copyFrom(`${SHARED}/team-b/seed.txt`),
    }),
  },
  {
    op: "UploadPartCopy",
    who: WRITER,
    key: "team-b/mp.bin",
    req: () => ({
      method: "PUT",
      path: objectPath(SHARED, "team-b/mp.bin"),
      query: { partNumber: "1", uploadId: rootUpload },
      headers: copyFrom(`${SHARED}/team-a/seed.txt`),
    }),
  },
  {
    op: "CompleteMultipartUpload",
    who: WRITER,
    key: "team-b/mp.bin",
    req: () => ({
      method: "POST",
      path: objectPath(SHARED, "team-b/mp.bin"),
      query: { uploadId: rootUpload },
      body: completeBody,
    }),
  },
  {
    op: "AbortMultipartUpload",
    who: WRITER,
    key: "team-b/mp.bin",
    req: () => ({
      method: "DELETE",
      path: objectPath(SHARED, "team-b/mp.bin"),
      query: { uploadId: rootUpload },
    }),
  },
  {
    op: "ListParts",
    who: WRITER,
    key: "team-b/mp.bin",
    req: () => ({
      method: "GET",
      path: objectPath(SHARED, "team-b/mp.bin"),
      query: { uploadId: rootUpload },
    }),
  },
  {
    op: "ListObjectsV2",
    who: WRITER,
    key: null,
    req: () => ({ method: "GET", path: `/${SHARED}`, query: { "list-type": "2" } }),
  },
  {
    op: "ListObjectsV2",
    who: WRITER,
    key: null,
    req: () => ({ method: "GET", path: `/${SHARED}`, query: { "list-type": "2", prefix: "team-b/" } }),
  },
  // A prefix that reaches beyond the writer's: it would list team-b/ too.
  {
    op: "ListObjectsV2",
    who: WRITER,
    key: null,
    req: () => ({ method: "GET", path: `/${SHARED}`, query: { "list-type": "2", prefix: "team" } }),
  },
  { op: "ListObjects", who: WRITER, key: null, req: () => ({ method: "GET", path: `/${SHARED}` }) },
  {
    op: "ListObjectVersions",
    who: WRITER,
    key: null,
    req: () => ({ method: "GET", path: `/${SHARED}`, query: { versions: "" } }),
  },
  {
    op: "ListMultipartUploads",
    who: WRITER,
    key: null,
    req: () => ({ method: "GET", path: `/${SHARED}`, query: { uploads: "" } }),
  },
  {
    op: "CreateBucket",
    who: WRITER,
    bucket: "writers-own",
    key: null,
    req: () => ({ method: "PUT", path: "/writers-own" }),
  },
  // A prefix rule does not give the bucket itself.
  { op: "DeleteBucket", who: WRITER, key: null, req: () => ({ method: "DELETE", path: `/${SHARED}` }) },
  {
    op: "PutBucketAcl",
    who: WRITER,
    key: null,
    req: () => ({
      method: "PUT",
      path: `/${SHARED}`,
      query: { acl: "" },
      headers: { "x-amz-acl": "private" },
    }),
  },
  {
    op: "HeadBucket",
    who: WRITER,
    bucket: PRIVATE,
    key: null,
    req: () => ({ method: "HEAD", path: `/${PRIVATE}` }),
  },
  {
    op: "GetBucketLocation",
    who: WRITER,
    bucket: PRIVATE,
    key: null,
    req: () => ({ method: "GET", path: `/${PRIVATE}`, query: { location: "" } }),
  },
];

/** The case's name: who, the operation, the method and the path (the query holds upload ids not known yet). */
const label = (c: Case) => {
  const { method, path, query } = c.req();
  const sub = Object.keys(query ?? {}).join("&");
  return `${c.who.accessKeyId} ${c.op}: ${method} ${path}${sub ? `?${sub}` : ""}`;
};

describe("every S3 operation outside the caller's rights is AccessDenied, and audited", () => {
  it.each([...READER_DENIED, ...WRITER_DENIED].map((c) => [label(c), c] as const))("%s", async (_, c) => {
    const req = c.req();
    const res = await send(c.who, req);
    await expectDenied(env, res, {
      op: c.op,
      who: c.who,
      method: req.method,
      bucket: c.bucket ?? SHARED,
      ...(c.key !== undefined ? { key: c.key } : {}),
    });
  });

  it("changed nothing: the seeds and the uploads are as they were, no bucket was made or removed", async () => {
    for (const [b, k] of [
      [SHARED, "team-a/seed.txt"],
      [SHARED, "team-b/seed.txt"],
      [PRIVATE, "secret.txt"],
    ] as const) {
      const got = await send(ROOT, { method: "GET", path: objectPath(b, k) });
      expect(got.text).toBe(`seed of ${k}`);
    }
    for (const k of [
      "team-a/r.txt",
      "team-a/copy.txt",
      "team-a/stolen.txt",
      "team-b/w.txt",
      "team-b/copy.txt",
    ]) {
      expect((await send(ROOT, { method: "HEAD", path: objectPath(SHARED, k) })).status).toBe(404);
    }
    const parts = await send(ROOT, {
      method: "GET",
      path: objectPath(SHARED, "team-b/mp.bin"),
      query: { uploadId: rootUpload },
    });
    expect(parts.status).toBe(200);
    expect(parse(parts).ListPartsResult!.Part).toBeUndefined();
    for (const b of ["readers-own", "writers-own"]) {
      expect((await send(ROOT, { method: "HEAD", path: `/${b}` })).status).toBe(404);
    }
  });
});

describe("operations within the caller's rights succeed", () => {
  it("the writer writes, reads, copies, lists and deletes under its prefix, but not beside it", async () => {
    const put = await send(WRITER, { method: "PUT", path: objectPath(SHARED, "team-a/w.txt"), body: "mine" });
    expect(put.status, put.text).toBe(200);
    expect((await send(WRITER, { method: "GET", path: objectPath(SHARED, "team-a/w.txt") })).text).toBe(
      "mine",
    );
    expect((await send(WRITER, { method: "HEAD", path: objectPath(SHARED, "team-a/w.txt") })).status).toBe(
      200,
    );
    const copied = await send(WRITER, {
      method: "PUT",
      path: objectPath(SHARED, "team-a/w-copy.txt"),
      headers: copyFrom(`${SHARED}/team-a/w.txt`),
    });
    expect(copied.status, copied.text).toBe(200);
    const listed = await send(WRITER, {
      method: "GET",
      path: `/${SHARED}`,
      query: { "list-type": "2", prefix: "team-a/" },
    });
    expect(listed.status, listed.text).toBe(200);
    const keys = list(parse(listed).ListBucketResult!.Contents as Array<{ Key: string }>).map((c) => c.Key);
    expect(keys).toEqual(["team-a/seed.txt", "team-a/w-copy.txt", "team-a/w.txt"]);
    for (const probe of [
      { method: "HEAD", path: `/${SHARED}` },
      { method: "GET", path: `/${SHARED}`, query: { location: "" } },
    ]) {
      expect((await send(WRITER, probe)).status).toBe(200);
    }
    expect(
      (await send(WRITER, { method: "DELETE", path: objectPath(SHARED, "team-a/w-copy.txt") })).status,
    ).toBe(204);
    const beside = await send(WRITER, { method: "PUT", path: objectPath(SHARED, "team-ab.txt"), body: "x" });
    await expectDenied(env, beside, { op: "PutObject", who: WRITER, key: "team-ab.txt" });
  });

  it("the writer runs a whole multipart upload under its prefix, and is refused a copy part from beside it", async () => {
    const key = "team-a/big.bin";
    const uploadId = await createUpload(WRITER, key);
    const path = objectPath(SHARED, key);
    // Every part but the last is at least 5 MiB, as S3 requires.
    const first = Buffer.alloc(5 * 1024 * 1024, "a");
    const part = await send(WRITER, {
      method: "PUT",
      path,
      query: { partNumber: "1", uploadId },
      body: first,
    });
    expect(part.status, part.text).toBe(200);
    const copyPart = await send(WRITER, {
      method: "PUT",
      path,
      query: { partNumber: "2", uploadId },
      headers: copyFrom(`${SHARED}/team-a/seed.txt`),
    });
    expect(copyPart.status, copyPart.text).toBe(200);
    const refusedPart = await send(WRITER, {
      method: "PUT",
      path,
      query: { partNumber: "3", uploadId },
      headers: copyFrom(`${SHARED}/team-b/seed.txt`),
    });
    await expectDenied(env, refusedPart, { op: "UploadPartCopy", who: WRITER, key });
    const parts = await send(WRITER, { method: "GET", path, query: { uploadId } });
    expect(list(parse(parts).ListPartsResult!.Part as unknown[])).toHaveLength(2);
    const uploads = await send(WRITER, {
      method: "GET",
      path: `/${SHARED}`,
      query: { uploads: "", prefix: "team-a/" },
    });
    expect(uploads.status, uploads.text).toBe(200);
    const etags = [part.headers.etag, String(parse(copyPart).CopyPartResult!.ETag)];
    const body = `<CompleteMultipartUpload>${etags
      .map((e, i) => `<Part><PartNumber>${i + 1}</PartNumber><ETag>${e}</ETag></Part>`)
      .join("")}</CompleteMultipartUpload>`;
    const done = await send(WRITER, { method: "POST", path, query: { uploadId }, body });
    expect(done.status, done.text).toBe(200);
    const got = await send(WRITER, { method: "GET", path });
    expect(got.body.equals(Buffer.concat([first, Buffer.from("seed of team-a/seed.txt")]))).toBe(true);
    const other = await createUpload(WRITER, "team-a/abandoned.bin");
    const aborted = await send(WRITER, {
      method: "DELETE",
      path: objectPath(SHARED, "team-a/abandoned.bin"),
      query: { uploadId: other },
    });
    expect(aborted.status).toBe(204);
  });

  it("the reader reads and lists the whole shared bucket, and writes nothing in it", async () => {
    expect((await send(READER, { method: "GET", path: objectPath(SHARED, "team-b/seed.txt") })).text).toBe(
      "seed of team-b/seed.txt",
    );
    const all = await send(READER, { method: "GET", path: `/${SHARED}`, query: { "list-type": "2" } });
    expect(all.status, all.text).toBe(200);
    const some = await send(READER, { method: "GET", path: `/${SHARED}`, query: { prefix: "team-b/" } });
    expect(some.status, some.text).toBe(200);
    expect((await send(READER, { method: "GET", path: `/${SHARED}`, query: { location: "" } })).status).toBe(
      200,
    );
    const write = await send(READER, { method: "PUT", path: objectPath(SHARED, "team-b/r.txt"), body: "r" });
    await expectDenied(env, write, { op: "PutObject", who: READER, key: "team-b/r.txt" });
  });

  it("root, an administrator, does everything, in every bucket", async () => {
    for (const b of [SHARED, PRIVATE]) {
      const listed = await send(ROOT, { method: "GET", path: `/${b}`, query: { "list-type": "2" } });
      expect(listed.status, listed.text).toBe(200);
    }
    expect((await send(ROOT, { method: "PUT", path: "/root-made" })).status).toBe(200);
    expect((await send(ROOT, { method: "DELETE", path: "/root-made" })).status).toBe(204);
    const denied = await send(WRITER, { method: "PUT", path: "/root-made" });
    await expectDenied(env, denied, { op: "CreateBucket", who: WRITER, bucket: "root-made", key: null });
  });
});

describe("ListBuckets lists the buckets where the caller may read something", () => {
  const names = async (who: typeof ROOT) => {
    const res = await send(who, { method: "GET", path: "/" });
    expect(res.status, res.text).toBe(200);
    const buckets = parse(res).ListAllMyBucketsResult!.Buckets as {
      Bucket?: { Name: string } | Array<{ Name: string }>;
    };
    return list(buckets.Bucket).map((b) => b.Name);
  };

  it("root sees every bucket; the writer (one prefix) and the reader see only the shared one", async () => {
    expect(await names(ROOT)).toEqual([PRIVATE, SHARED]);
    expect(await names(WRITER)).toEqual([SHARED]);
    expect(await names(READER)).toEqual([SHARED]);
  });
});

describe("DeleteObjects checks each key", () => {
  it("deletes the keys the caller may write, answers AccessDenied for the others, and audits each", async () => {
    expect(
      (await send(WRITER, { method: "PUT", path: objectPath(SHARED, "team-a/gone.txt"), body: "x" })).status,
    ).toBe(200);
    const res = await send(WRITER, {
      method: "POST",
      path: `/${SHARED}`,
      query: { delete: "" },
      body: "<Delete><Object><Key>team-a/gone.txt</Key></Object><Object><Key>team-b/seed.txt</Key></Object></Delete>",
    });
    expect(res.status, res.text).toBe(200);
    const result = parse(res).DeleteResult!;
    expect(list(result.Deleted as Array<{ Key: string }>).map((d) => d.Key)).toEqual(["team-a/gone.txt"]);
    expect(list(result.Error as unknown[])).toEqual([
      { Key: "team-b/seed.txt", Code: "AccessDenied", Message: "Access Denied" },
    ]);
    expect((await send(ROOT, { method: "HEAD", path: objectPath(SHARED, "team-a/gone.txt") })).status).toBe(
      404,
    );
    expect((await send(ROOT, { method: "GET", path: objectPath(SHARED, "team-b/seed.txt") })).status).toBe(
      200,
    );
    const page = await env.admin.audit({ op: "DeleteObjects", limit: "1000" });
    const mine = (page.records as Array<Record<string, unknown>>).filter(
      (r) => r.requestId === res.headers["x-amz-request-id"],
    );
    expect(mine.map((r) => [r.key, r.decision, r.reason, r.principal])).toEqual([
      ["team-a/gone.txt", "accepted", null, WRITER.accessKeyId],
      ["team-b/seed.txt", "rejected", "AccessDenied", WRITER.accessKeyId],
    ]);
  });
});

describe("presigned URLs carry the signer's rights, never more", () => {
  const url = (who: typeof ROOT, method: string, bucket: string, key: string) =>
    presign(env.gw.url, { method, path: objectPath(bucket, key), expiresIn: 300, credentials: who });
  const use = async (who: typeof ROOT, method: string, bucket: string, key: string, body?: string) =>
    rawRequest(env.gw.url, { method, path: await url(who, method, bucket, key), ...(body ? { body } : {}) });

  it("the writer's URLs work under its prefix and are refused beside it and in other buckets", async () => {
    const put = await use(WRITER, "PUT", SHARED, "team-a/presigned.txt", "by the writer");
    expect(put.status, put.text).toBe(200);
    const get = await use(WRITER, "GET", SHARED, "team-a/presigned.txt");
    expect(get.text).toBe("by the writer");

    for (const [method, bucket, key, op] of [
      ["PUT", SHARED, "team-b/presigned.txt", "PutObject"],
      ["GET", SHARED, "team-b/seed.txt", "GetObject"],
      ["DELETE", SHARED, "team-b/seed.txt", "DeleteObject"],
      ["GET", PRIVATE, "secret.txt", "GetObject"],
      ["PUT", PRIVATE, "presigned.txt", "PutObject"],
    ] as const) {
      const res = await use(WRITER, method, bucket, key, method === "PUT" ? "x" : undefined);
      await expectDenied(env, res, { op, who: WRITER, bucket, key });
    }
  });

  it("the reader's URLs read the shared bucket and write nothing", async () => {
    const get = await use(READER, "GET", SHARED, "team-b/seed.txt");
    expect(get.text).toBe("seed of team-b/seed.txt");
    for (const [method, key, op] of [
      ["PUT", "team-a/by-reader.txt", "PutObject"],
      ["DELETE", "team-a/seed.txt", "DeleteObject"],
    ] as const) {
      const res = await use(READER, method, SHARED, key, method === "PUT" ? "x" : undefined);
      await expectDenied(env, res, { op, who: READER, bucket: SHARED, key });
    }
    await expectDenied(env, await use(READER, "GET", PRIVATE, "secret.txt"), {
      op: "GetObject",
      who: READER,
      bucket: PRIVATE,
      key: "secret.txt",
    });
    // Nothing the refused URLs named changed.
    expect((await send(ROOT, { method: "GET", path: objectPath(SHARED, "team-a/seed.txt") })).status).toBe(
      200,
    );
    expect(
      (await send(ROOT, { method: "HEAD", path: objectPath(SHARED, "team-a/by-reader.txt") })).status,
    ).toBe(404);
  });

  it("root's URLs reach every bucket", async () => {
    const get = await use(ROOT, "GET", PRIVATE, "secret.txt");
    expect(get.text).toBe("seed of secret.txt");
  });
});

describe("the route table", () => {
  const fake = (method: string) => ({ method }) as S3Request;

  it("declares what every route on a bucket or an object needs", () => {
    for (const route of ROUTES.filter((r) => r.target !== "service")) {
      for (const method of ["GET", "PUT"]) {
        const needs = typeof route.access === "function" ? route.access(fake(method)) : route.access;
        expect(needs.length, `${route.name} needs nothing`).toBeGreaterThan(0);
      }
    }
  });
});
