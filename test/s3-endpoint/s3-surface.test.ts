import {
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  GetBucketAclCommand,
  GetBucketLocationCommand,
  GetObjectCommand,
  PutObjectCommand,
  UploadPartCommand,
} from "@aws-sdk/client-s3";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Lease } from "../../src/client/lease-client.js";
import { md5Hex } from "../support/digest.js";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import { expectS3Error, objectPath, rawRequest, signedRequest, signRequest } from "../support/signed-http.js";

/**
 * The S3 surface as SDKs and conformance suites use it: bucket creation bodies, the location and
 * ACL calls of a single-owner store, partNumber reads, presigned metadata, listings' edge cases.
 */

let gw: TestGateway;
let lease: Lease;
const bucket = "surface";

beforeAll(async () => {
  gw = await startTestGateway({ env: { FENCEGATE_FENCING: "optional" } });
  expect((await signedRequest(gw.url, { method: "PUT", path: `/${bucket}` })).status).toBe(200);
  lease = await gw.leases.acquire({ bucket, prefix: "fenced/", ttlMs: 120_000 });
});

afterAll(async () => {
  await gw?.stop();
});

const put = (key: string, body: string, headers: Record<string, string> = {}) =>
  signedRequest(gw.url, { method: "PUT", path: objectPath(bucket, key), body, headers });
const get = (key: string, query?: Record<string, string>, headers?: Record<string, string>) =>
  signedRequest(gw.url, { method: "GET", path: objectPath(bucket, key), query, headers });

async function bucketExists(name: string): Promise<boolean> {
  return (await signedRequest(gw.url, { method: "HEAD", path: `/${name}` })).status === 200;
}

describe("CreateBucket parses its body as S3 does", () => {
  const create = (name: string, body?: string) =>
    signedRequest(gw.url, { method: "PUT", path: `/${name}`, ...(body !== undefined ? { body } : {}) });

  it("refuses invalid XML, entity declarations and a wrong root with MalformedXML, creating nothing", async () => {
    const bodies = {
      "cb-not-xml": "<CreateBucketConfiguration><LocationConstraint>",
      "cb-garbage": "hello",
      "cb-xxe":
        '<?xml version="1.0"?><!DOCTYPE c [<!ENTITY x SYSTEM "file:///etc/passwd">]><CreateBucketConfiguration><LocationConstraint>&x;</LocationConstraint></CreateBucketConfiguration>',
      "cb-billion":
        '<!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]><CreateBucketConfiguration><LocationConstraint>&b;</LocationConstraint></CreateBucketConfiguration>',
      "cb-wrong-root": "<Delete><Object><Key>k</Key></Object></Delete>",
      "cb-two-roots": "<CreateBucketConfiguration/><CreateBucketConfiguration/>",
      "cb-unknown-child": "<CreateBucketConfiguration><Foo>1</Foo></CreateBucketConfiguration>",
    };
    for (const [name, body] of Object.entries(bodies)) {
      expectS3Error(await create(name, body), "MalformedXML", 400);
      expect(await bucketExists(name), name).toBe(false);
    }
  });

  it("accepts an empty body, an empty configuration and the gateway's or the signing region", async () => {
    expect((await create("cb-empty")).status).toBe(200);
    expect((await create("cb-empty-config", "<CreateBucketConfiguration/>")).status).toBe(200);
    const withRegion = (r: string) =>
      `<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><LocationConstraint>${r}</LocationConstraint></CreateBucketConfiguration>`;
    expect((await create("cb-us-east-1", withRegion("us-east-1"))).status).toBe(200);
    expect(await bucketExists("cb-us-east-1")).toBe(true);
  });

  it("refuses a location constraint it cannot claim, as a regional S3 endpoint does", async () => {
    const body = (r: string) =>
      `<CreateBucketConfiguration><LocationConstraint>${r}</LocationConstraint></CreateBucketConfiguration>`;
    expectS3Error(await create("cb-elsewhere", body("eu-west-3")), "IllegalLocationConstraintException", 400);
    expectS3Error(await create("cb-bogus", body("not a region")), "InvalidLocationConstraint", 400);
    expect(await bucketExists("cb-elsewhere")).toBe(false);
    expect(await bucketExists("cb-bogus")).toBe(false);
  });

  it("answers GetBucketLocation with the gateway's one location (us-east-1: empty)", async () => {
    const res = await gw.s3().send(new GetBucketLocationCommand({ Bucket: bucket }));
    expect(res.LocationConstraint ?? "").toBe("");
  });
});

describe("partNumber on GET and HEAD", () => {
  beforeAll(async () => {
    expect((await put("parts/single", "hello world")).status).toBe(200);
  });

  it("refuses a partNumber that is not an integer from 1 to 10000 with InvalidArgument", async () => {
    for (const partNumber of ["abc", "0", "-1", "10001", "1.5", "", "0x1", "99999999999999999999"]) {
      const res = await get("parts/single", { partNumber });
      expect(res.status, partNumber).toBe(400);
      expectS3Error(res, "InvalidArgument", 400);
      const head = await signedRequest(gw.url, {
        method: "HEAD",
        path: objectPath(bucket, "parts/single"),
        query: { partNumber },
      });
      expect(head.status, `HEAD ${partNumber}`).toBe(400);
    }
  });

  it("serves part 1 of a single-part object as the whole object with 206, and refuses part 2 with 416", async () => {
    const res = await get("parts/single", { partNumber: "1" });
    expect(res.status).toBe(206);
    expect(res.text).toBe("hello world");
    expect(res.headers["content-range"]).toBe("bytes 0-10/11");
    const head = await signedRequest(gw.url, {
      method: "HEAD",
      path: objectPath(bucket, "parts/single"),
      query: { partNumber: "1" },
    });
    expect(head.status).toBe(206);
    expect(head.headers["content-length"]).toBe("11");
    const err = expectS3Error(await get("parts/single", { partNumber: "2" }), "InvalidPartNumber", 416);
    expect(err).toMatchObject({ PartNumberRequested: "2", ActualPartCount: "1" });
  });

  it("refuses partNumber with a Range header", async () => {
    expectS3Error(
      await get("parts/single", { partNumber: "1" }, { range: "bytes=0-1" }),
      "InvalidRequest",
      400,
    );
  });

  it("serves a one-part multipart object's part 1, refuses other parts of multipart objects", async () => {
    const s3 = gw.s3();
    const upload = async (key: string, parts: Buffer[]) => {
      const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: key }));
      const done = [];
      for (const [i, body] of parts.entries()) {
        const { ETag } = await s3.send(
          new UploadPartCommand({ Bucket: bucket, Key: key, UploadId, PartNumber: i + 1, Body: body }),
        );
        done.push({ PartNumber: i + 1, ETag });
      }
      await s3.send(
        new CompleteMultipartUploadCommand({
          Bucket: bucket,
          Key: key,
          UploadId,
          MultipartUpload: { Parts: done },
        }),
      );
    };
    await upload("parts/one", [Buffer.from("only part")]);
    const one = await get("parts/one", { partNumber: "1" });
    expect(one.status).toBe(206);
    expect(one.text).toBe("only part");
    expect(one.headers["x-amz-mp-parts-count"]).toBe("1");

    await upload("parts/two", [Buffer.alloc(5 * 1024 * 1024, 1), Buffer.from("tail")]);
    expectS3Error(await get("parts/two", { partNumber: "1" }), "NotImplemented", 501);
    expectS3Error(await get("parts/two", { partNumber: "3" }), "InvalidPartNumber", 416);
    expect((await get("parts/two")).status).toBe(200);
  });
});

describe("ACLs of a single-owner store", () => {
  const putAcl = (path: string, headers: Record<string, string>, body?: string) =>
    signedRequest(gw.url, { method: "PUT", path, query: { acl: "" }, headers, ...(body ? { body } : {}) });

  it("reads the owner's full control and accepts the canned private on buckets and objects", async () => {
    const acl = await gw.s3().send(new GetBucketAclCommand({ Bucket: bucket }));
    expect(acl.Grants).toEqual([expect.objectContaining({ Permission: "FULL_CONTROL" })]);
    expect((await putAcl(`/${bucket}`, { "x-amz-acl": "private" })).status).toBe(200);
    expect((await put("acl/obj", "x")).status).toBe(200);
    expect((await putAcl(objectPath(bucket, "acl/obj"), { "x-amz-acl": "private" })).status).toBe(200);
    expect(
      (await putAcl(objectPath(bucket, "acl/obj"), { "x-amz-acl": "bucket-owner-full-control" })).status,
    ).toBe(200);
  });

  it("refuses grants it would not enforce with AccessControlListNotSupported, unknown ones with InvalidArgument", async () => {
    for (const acl of ["public-read", "public-read-write", "authenticated-read", "log-delivery-write"]) {
      expectS3Error(await putAcl(`/${bucket}`, { "x-amz-acl": acl }), "AccessControlListNotSupported", 400);
      expectS3Error(
        await putAcl(objectPath(bucket, "acl/obj"), { "x-amz-acl": acl }),
        "AccessControlListNotSupported",
        400,
      );
    }
    expectS3Error(await putAcl(`/${bucket}`, { "x-amz-acl": "everyone" }), "InvalidArgument", 400);
    expectS3Error(
      await putAcl(`/${bucket}`, {
        "x-amz-grant-read": 'uri="http://acs.amazonaws.com/groups/global/AllUsers"',
      }),
      "AccessControlListNotSupported",
      400,
    );
  });

  it("takes an AccessControlPolicy body that grants the owner full control, and nothing more", async () => {
    const acl = await gw.s3().send(new GetBucketAclCommand({ Bucket: bucket }));
    const ownerId = acl.Owner!.ID!;
    const policy = (grants: string) =>
      `<AccessControlPolicy><Owner><ID>${ownerId}</ID></Owner><AccessControlList>${grants}</AccessControlList></AccessControlPolicy>`;
    const ownerGrant = `<Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="CanonicalUser"><ID>${ownerId}</ID></Grantee><Permission>FULL_CONTROL</Permission></Grant>`;
    const publicGrant =
      '<Grant><Grantee xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:type="Group"><URI>http://acs.amazonaws.com/groups/global/AllUsers</URI></Grantee><Permission>READ</Permission></Grant>';
    expect((await putAcl(`/${bucket}`, {}, policy(ownerGrant))).status).toBe(200);
    expectS3Error(
      await putAcl(`/${bucket}`, {}, policy(ownerGrant + publicGrant)),
      "AccessControlListNotSupported",
      400,
    );
    expectS3Error(await putAcl(`/${bucket}`, {}, "<AccessControlPolicy><Owner>"), "MalformedACLError", 400);
    expectS3Error(await putAcl(`/${bucket}`, {}), "MalformedACLError", 400);
  });

  it("refuses x-amz-acl granting others on a write and stores nothing", async () => {
    expectS3Error(
      await put("acl/public", "x", { "x-amz-acl": "public-read" }),
      "AccessControlListNotSupported",
      400,
    );
    expectS3Error(await get("acl/public"), "NoSuchKey", 404);
    expectS3Error(await put("acl/weird", "x", { "x-amz-acl": "nonsense" }), "InvalidArgument", 400);
    expect((await put("acl/private", "x", { "x-amz-acl": "private" })).status).toBe(200);
    expectS3Error(
      await signedRequest(gw.url, {
        method: "PUT",
        path: "/acl-public-bucket",
        headers: { "x-amz-acl": "public-read" },
      }),
      "AccessControlListNotSupported",
      400,
    );
    expect(await bucketExists("acl-public-bucket")).toBe(false);
  });
});

describe("presigned URLs carry metadata in the query", () => {
  it("stores x-amz-meta-* from a presigned PUT and takes the fence token from x-amz-meta-fence-token", async () => {
    const url = await getSignedUrl(
      gw.s3(),
      new PutObjectCommand({
        Bucket: bucket,
        Key: "fenced/presigned",
        Metadata: { color: "blue", "fence-token": lease.fencingToken },
      }),
      { expiresIn: 300 },
    );
    expect(url).toContain("x-amz-meta-color=blue");
    const res = await fetch(url, { method: "PUT", body: "presigned body" });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-fence-token-accepted")).toBe(String(lease.token));
    const got = await gw.s3().send(new GetObjectCommand({ Bucket: bucket, Key: "fenced/presigned" }));
    expect(got.Metadata).toEqual({ color: "blue" });
    expect(await got.Body!.transformToString()).toBe("presigned body");
  });

  it("refuses a presigned URL whose metadata token was changed after signing", async () => {
    const other = await gw.leases.acquire({ bucket, key: "other", ttlMs: 60_000 });
    const url = await getSignedUrl(
      gw.s3(),
      new PutObjectCommand({
        Bucket: bucket,
        Key: "fenced/tampered",
        Metadata: { "fence-token": lease.fencingToken },
      }),
      { expiresIn: 300 },
    );
    const tampered = url.replace(
      encodeURIComponent(lease.fencingToken),
      encodeURIComponent(other.fencingToken),
    );
    expect(tampered).not.toBe(url);
    const res = await fetch(tampered, { method: "PUT", body: "x" });
    expect(res.status).toBe(403);
    expect(await res.text()).toContain("<Code>SignatureDoesNotMatch</Code>");
    expectS3Error(await get("fenced/tampered"), "NoSuchKey", 404);
  });

  it("fences a presigned PUT by its metadata token: a stale token is refused", async () => {
    const url = await getSignedUrl(
      gw.s3(),
      new PutObjectCommand({ Bucket: bucket, Key: "other", Metadata: { "fence-token": lease.fencingToken } }),
      { expiresIn: 300 },
    );
    const res = await fetch(url, { method: "PUT", body: "x" });
    expect(res.status).toBe(403);
    expect(await res.text()).toContain("<Code>FencingTokenScopeMismatch</Code>");
  });
});

describe("what minio-go sends", () => {
  it("completes an upload whose x-amz-checksum-crc32c describes the object, not the XML body", async () => {
    const s3 = gw.s3();
    const key = "minio/composite";
    const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: key }));
    const { ETag } = await s3.send(
      new UploadPartCommand({ Bucket: bucket, Key: key, UploadId, PartNumber: 1, Body: "part" }),
    );
    const res = await signedRequest(gw.url, {
      method: "POST",
      path: objectPath(bucket, key),
      query: { uploadId: UploadId! },
      // minio-go: the CRC32C of the parts' CRC32Cs (a composite checksum).
      headers: { "x-amz-checksum-crc32c": "yZRlqg==" },
      body: `<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>${ETag}</ETag></Part></CompleteMultipartUpload>`,
    });
    expect(res.status).toBe(200);
    expect((await get(key)).text).toBe("part");
  });

  it("refuses a storage class S3 does not know with InvalidStorageClass, stores nothing", async () => {
    expectS3Error(
      await put("minio/class", "x", { "x-amz-storage-class": "INVALID" }),
      "InvalidStorageClass",
      400,
    );
    expectS3Error(await get("minio/class"), "NoSuchKey", 404);
    expect((await put("minio/class", "x", { "x-amz-storage-class": "REDUCED_REDUNDANCY" })).status).toBe(200);
  });
});

describe("stored headers and listings", () => {
  it("returns Content-Encoding and the other stored headers byte for byte", async () => {
    const headers = {
      "content-encoding": "gzip , br",
      // UTF-8 bytes as sent on the wire (a latin1 string holds one byte per character).
      "content-disposition": 'attachment; filename="r\u00c3\u00a9sum\u00c3\u00a9.txt"',
      "cache-control": "max-age=60,  public",
      "content-language": "de-CH",
      expires: "Thu, 01 Dec 2094 16:00:00 GMT",
      "content-type": "text/plain;charset=utf-8",
    };
    // Signed without them: the test signer would hash the latin1 value as UTF-8.
    const req = await signRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "hdr/bytes"),
      body: "x",
    });
    const res = await rawRequest(gw.url, {
      ...req,
      headers: { ...(req.headers as Record<string, string>), ...headers },
    });
    expect(res.status).toBe(200);
    const got = await get("hdr/bytes");
    for (const [name, value] of Object.entries(headers)) {
      expect(Buffer.from(String(got.headers[name]), "latin1"), name).toEqual(Buffer.from(value, "latin1"));
    }
  });

  it("treats an empty continuation-token as none, as S3 does: lists from the start and echoes it empty", async () => {
    for (const key of ["ct/a", "ct/b", "ct/c"]) expect((await put(key, key)).status).toBe(200);
    const res = await signedRequest(gw.url, {
      method: "GET",
      path: `/${bucket}`,
      query: { "list-type": "2", prefix: "ct/", "continuation-token": "" },
    });
    expect(res.status, res.text).toBe(200);
    expect(res.text).toMatch(/<ContinuationToken(><\/ContinuationToken>|\/>)/);
    expect(res.text).toContain("<IsTruncated>false</IsTruncated>");
    expect([...res.text.matchAll(/<Key>([^<]*)<\/Key>/g)].map((m) => m[1])).toEqual(["ct/a", "ct/b", "ct/c"]);
    // A token that is not one this gateway issued is still refused.
    const made = await signedRequest(gw.url, {
      method: "GET",
      path: `/${bucket}`,
      query: { "list-type": "2", "continuation-token": "bm9wZQ" },
    });
    expect(expectS3Error(made, "InvalidArgument", 400).Message).toBe(
      "The continuation token provided is incorrect",
    );
  });

  it("refuses query parameters that are not percent-encoded UTF-8, and listing parameters with control characters", async () => {
    for (const query of ["prefix=%zz", "prefix=%FF", "prefix=%C3", "delimiter=%E0%A4%A", "%zz=1"]) {
      const req = await rawRequest(gw.url, { method: "GET", path: `/${bucket}?list-type=2&${query}` });
      expectS3Error(req, "InvalidURI", 400);
    }
    for (const [name, listType] of [
      ["prefix", "2"],
      ["delimiter", "2"],
      ["start-after", "2"],
      ["marker", "1"],
    ] as const) {
      const res = await signedRequest(gw.url, {
        method: "GET",
        path: `/${bucket}`,
        query: { "list-type": listType, [name]: "a\u0001b" },
      });
      expectS3Error(res, "InvalidArgument", 400);
    }
  });

  it("lists a key holding a carriage return as it was written", async () => {
    const key = "cr/a\rb";
    expect((await put(key, "x")).status).toBe(200);
    const listed = await signedRequest(gw.url, {
      method: "GET",
      path: `/${bucket}`,
      query: { "list-type": "2", prefix: "cr/" },
    });
    expect(listed.text).toContain("<Key>cr/a&#xD;b</Key>");
    expect(md5Hex("x")).toHaveLength(32);
  });
});

describe("operations S3 authenticates another way", () => {
  const form = [
    "--fg-boundary",
    'Content-Disposition: form-data; name="key"',
    "",
    "form/upload.txt",
    "--fg-boundary",
    'Content-Disposition: form-data; name="file"; filename="upload.txt"',
    "Content-Type: text/plain",
    "",
    "hello",
    "--fg-boundary--",
    "",
  ].join("\r\n");
  const formHeaders = { "content-type": "multipart/form-data; boundary=fg-boundary" };

  it("answers an HTML-form upload (PostObject) 501 NotImplemented, signed or not, storing nothing", async () => {
    // As a browser sends it: no Authorization header, the policy among the form's fields.
    const browser = await rawRequest(gw.url, {
      method: "POST",
      path: `/${bucket}`,
      body: form,
      headers: formHeaders,
    });
    const err = expectS3Error(browser, "NotImplemented", 501);
    expect(err.Message).toMatch(/PostObject/);
    const signed = await signedRequest(gw.url, {
      method: "POST",
      path: `/${bucket}`,
      body: form,
      headers: formHeaders,
    });
    expectS3Error(signed, "NotImplemented", 501);
    expect((await get("form/upload.txt")).status).toBe(404);
    // A refused write, in the audit log like any other.
    const records = (await gw.leases.audit({ bucket, op: "PostObject" })).records as Array<
      Record<string, unknown>
    >;
    expect(records.map((r) => [r.decision, r.reason])).toEqual([
      ["rejected", "NotImplemented"],
      ["rejected", "NotImplemented"],
    ]);
  });
});
