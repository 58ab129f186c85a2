import { Writable } from "node:stream";
import { CreateMultipartUploadCommand, HeadObjectCommand, UploadPartCommand } from "@aws-sdk/client-s3";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { DomainError } from "../../src/core/errors.js";
import { createLogger } from "../../src/core/log.js";
import { WriteFencer } from "../../src/fence/write-fencer.js";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import {
  expectS3Error,
  objectPath,
  presign,
  rawRequest,
  signedRequest,
  signRequest,
} from "../support/signed-http.js";

/**
 * Refusals that must leave things as they were and be told truthfully: DeleteObjects validated
 * whole before anything is deleted, writes refused for their signature in the audit log (or a
 * 503 when the log cannot take them), refusals logged below the error level, retried
 * completions answered like S3, write conditions on every conditional write.
 */

const logLines: Array<{ level: number; msg: string; code?: string }> = [];
const sink = new Writable({
  write(chunk, _enc, done) {
    for (const line of String(chunk).split("\n").filter(Boolean)) logLines.push(JSON.parse(line));
    done();
  },
});

let gw: TestGateway;
const bucket = "refusals";

beforeAll(async () => {
  gw = await startTestGateway({
    env: { FENCEGATE_FENCING: "optional" },
    log: createLogger("info", {}, sink),
  });
  expect((await signedRequest(gw.url, { method: "PUT", path: `/${bucket}` })).status).toBe(200);
});

afterAll(async () => {
  await gw?.stop();
});

afterEach(() => {
  vi.restoreAllMocks();
});

const put = (key: string, body: string, headers: Record<string, string> = {}) =>
  signedRequest(gw.url, { method: "PUT", path: objectPath(bucket, key), body, headers });
const exists = async (key: string) =>
  (await signedRequest(gw.url, { method: "HEAD", path: objectPath(bucket, key) })).status === 200;
const deleteObjects = (body: string) =>
  signedRequest(gw.url, { method: "POST", path: `/${bucket}`, query: { delete: "" }, body });

describe("DeleteObjects validates the whole request before deleting anything", () => {
  it("answers MalformedXML for an Object without Key and keeps the keys listed before it", async () => {
    for (const k of ["del/a", "del/b"]) expect((await put(k, "x")).status).toBe(200);
    const bodies = [
      "<Delete><Object><Key>del/a</Key></Object><Object><VersionId>null</VersionId></Object></Delete>",
      "<Delete><Object><Key>del/a</Key></Object><Object><Key>del/b</Key><Key>del/b</Key></Object></Delete>",
      "<Delete><Object><Key>del/a</Key></Object><Object><Key>del/b</Key><Bogus/></Object></Delete>",
      "<Delete><Object><Key>del/a</Key></Object><Quiet>maybe</Quiet></Delete>",
      "<Delete><Object><Key>del/a</Key><VersionId>1</VersionId><VersionId>2</VersionId></Object></Delete>",
    ];
    for (const body of bodies) {
      expectS3Error(await deleteObjects(body), "MalformedXML", 400);
      expect(await exists("del/a"), body).toBe(true);
      expect(await exists("del/b"), body).toBe(true);
    }
    const conditional =
      "<Delete><Object><Key>del/a</Key></Object><Object><Key>del/b</Key><ETag>x</ETag></Object></Delete>";
    expectS3Error(await deleteObjects(conditional), "NotImplemented", 501);
    expect(await exists("del/a")).toBe(true);
  });

  it("does not delete an object when a version other than null is named", async () => {
    expect((await put("del/v", "x")).status).toBe(200);
    const res = await deleteObjects(
      "<Delete><Object><Key>del/v</Key><VersionId>3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY</VersionId></Object></Delete>",
    );
    expect(res.status).toBe(200);
    expect(res.text).toContain("<Code>InvalidArgument</Code>");
    expect(await exists("del/v")).toBe(true);
  });
});

describe("requests refused by authentication are recorded", () => {
  const auditOf = async (key: string) =>
    (await gw.leases.audit({ bucket, key })).records as Array<Record<string, unknown>>;

  it("records a rejected decision with the error code and the claimed access key id", async () => {
    const res = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "auth/forged"),
      body: "x",
      credentials: { accessKeyId: "fencegate", secretAccessKey: "not-the-secret" },
    });
    expectS3Error(res, "SignatureDoesNotMatch", 403);
    expect(await auditOf("auth/forged")).toEqual([
      expect.objectContaining({
        op: "PutObject",
        decision: "rejected",
        reason: "SignatureDoesNotMatch",
        principal: "fencegate",
      }),
    ]);
    const unknown = await signedRequest(gw.url, {
      method: "DELETE",
      path: objectPath(bucket, "auth/unknown"),
      credentials: { accessKeyId: "mallory", secretAccessKey: "whatever-secret" },
    });
    expectS3Error(unknown, "InvalidAccessKeyId", 403);
    expect(await auditOf("auth/unknown")).toEqual([
      expect.objectContaining({ op: "DeleteObject", reason: "InvalidAccessKeyId", principal: "mallory" }),
    ]);
    const anonymous = await rawRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "auth/anonymous"),
      headers: { "content-length": "1" },
      body: "x",
    });
    expectS3Error(anonymous, "AccessDenied", 403);
    expect(await auditOf("auth/anonymous")).toEqual([
      expect.objectContaining({ reason: "AccessDenied", principal: null }),
    ]);
    // Reads refused for their signature are recorded too; an anonymous read claims nobody.
    const forgedRead = await signedRequest(gw.url, {
      method: "GET",
      path: objectPath(bucket, "auth/read"),
      credentials: { accessKeyId: "fencegate", secretAccessKey: "not-the-secret" },
    });
    expectS3Error(forgedRead, "SignatureDoesNotMatch", 403);
    const unknownList = await signedRequest(gw.url, {
      method: "GET",
      path: `/${bucket}`,
      query: { "list-type": "2", prefix: "auth/" },
      credentials: { accessKeyId: "mallory", secretAccessKey: "whatever-secret" },
    });
    expectS3Error(unknownList, "InvalidAccessKeyId", 403);
    const anonymousRead = await rawRequest(gw.url, { method: "GET", path: objectPath(bucket, "auth/read") });
    expectS3Error(anonymousRead, "AccessDenied", 403);
    const reads = (await gw.leases.audit({ bucket, decision: "rejected" })).records as Array<
      Record<string, unknown>
    >;
    const byRequest = (res: { headers: Record<string, unknown> }) =>
      reads
        .filter((r) => r.requestId === res.headers["x-amz-request-id"])
        .map((r) => [r.op, r.key, r.reason, r.principal]);
    expect(byRequest(forgedRead)).toEqual([["GetObject", "auth/read", "SignatureDoesNotMatch", "fencegate"]]);
    expect(byRequest(unknownList)).toEqual([["ListObjectsV2", null, "InvalidAccessKeyId", "mallory"]]);
    expect(byRequest(anonymousRead)).toEqual([]);
    const expired = await presign(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "auth/expired"),
      expiresIn: 60,
      signingDate: new Date(Date.now() - 10 * 60_000),
    });
    const expiredRes = await rawRequest(gw.url, { method: "PUT", path: expired, body: "x" });
    expect(expectS3Error(expiredRes, "AccessDenied", 403).Message).toBe("Request has expired");
    expect(await auditOf("auth/expired")).toEqual([
      expect.objectContaining({ reason: "AccessDenied", principal: "fencegate" }),
    ]);
  });

  it("answers 503, never the refusal, when the audit log cannot take the decision", async () => {
    vi.spyOn(WriteFencer.prototype, "recordRefusal").mockRejectedValue(
      new DomainError("ServiceUnavailable", "the audit log could not record the decision"),
    );
    const res = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "auth/unrecorded"),
      body: "x",
      credentials: { accessKeyId: "fencegate", secretAccessKey: "not-the-secret" },
    });
    expectS3Error(res, "ServiceUnavailable", 503);
  });
});

describe("logging", () => {
  it("logs refusals, NotImplemented included, at info and never at error", async () => {
    logLines.length = 0;
    for (let i = 0; i < 5; i++) {
      const res = await signedRequest(gw.url, { method: "PUT", path: `/${bucket}`, query: { policy: "" } });
      expectS3Error(res, "NotImplemented", 501);
    }
    const refused = logLines.filter((l) => l.msg === "request refused" && l.code === "NotImplemented");
    expect(refused).toHaveLength(5);
    expect(refused.every((l) => l.level === 30)).toBe(true);
    expect(logLines.filter((l) => l.level >= 50)).toEqual([]);
  });
});

describe("a retried CompleteMultipartUpload is answered like S3", () => {
  async function uploadParts(key: string) {
    const s3 = gw.s3();
    const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: key }));
    const { ETag } = await s3.send(
      new UploadPartCommand({ Bucket: bucket, Key: key, UploadId, PartNumber: 1, Body: "the only part" }),
    );
    const body = `<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>${ETag}</ETag></Part></CompleteMultipartUpload>`;
    const complete = () =>
      signedRequest(gw.url, {
        method: "POST",
        path: objectPath(bucket, key),
        query: { uploadId: UploadId! },
        body,
      });
    return { uploadId: UploadId!, complete };
  }

  it("answers a retry with the same result while the object is still that result", async () => {
    const { complete } = await uploadParts("mpu/retried");
    const first = await complete();
    expect(first.status).toBe(200);
    const again = await complete();
    expect(again.status).toBe(200);
    expect(again.text).toBe(first.text);
    expect(parseEtag(again.text)).toBe(parseEtag(first.text));
    const head = await gw.s3().send(new HeadObjectCommand({ Bucket: bucket, Key: "mpu/retried" }));
    expect(head.ETag).toBe(parseEtag(first.text));
  });

  it("answers NoSuchUpload when the retry lists other parts or the object changed since", async () => {
    const { uploadId, complete } = await uploadParts("mpu/changed");
    expect((await complete()).status).toBe(200);
    const otherParts = await signedRequest(gw.url, {
      method: "POST",
      path: objectPath(bucket, "mpu/changed"),
      query: { uploadId },
      body: `<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"${"0".repeat(32)}"</ETag></Part></CompleteMultipartUpload>`,
    });
    expectS3Error(otherParts, "NoSuchUpload", 404);
    expect((await put("mpu/changed", "overwritten")).status).toBe(200);
    expectS3Error(await complete(), "NoSuchUpload", 404);
  });

  function parseEtag(xml: string): string {
    return /<ETag>([^<]*)<\/ETag>/.exec(xml)![1]!.replace(/&quot;/g, '"');
  }
});

describe("write conditions on PutObject, CopyObject and CompleteMultipartUpload", () => {
  const copy = (key: string, headers: Record<string, string>) =>
    signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, key),
      headers: { "x-amz-copy-source": `${bucket}/cond/source`, ...headers },
    });
  async function complete(key: string, headers: Record<string, string>) {
    const s3 = gw.s3();
    const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: key }));
    const { ETag } = await s3.send(
      new UploadPartCommand({ Bucket: bucket, Key: key, UploadId, PartNumber: 1, Body: "part" }),
    );
    return signedRequest(gw.url, {
      method: "POST",
      path: objectPath(bucket, key),
      query: { uploadId: UploadId! },
      headers,
      body: `<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>${ETag}</ETag></Part></CompleteMultipartUpload>`,
    });
  }
  const writers = {
    PutObject: (key: string, headers: Record<string, string>) => put(key, "new", headers),
    CopyObject: copy,
    CompleteMultipartUpload: complete,
  };

  beforeAll(async () => {
    expect((await put("cond/source", "source")).status).toBe(200);
  });

  for (const [op, write] of Object.entries(writers)) {
    it(`${op}: If-None-Match: * and If-Match decide, an ETag in If-None-Match is NotImplemented`, async () => {
      const key = `cond/${op}`;
      expect((await write(key, { "if-none-match": "*" })).status).toBe(200);
      expectS3Error(await write(key, { "if-none-match": "*" }), "PreconditionFailed", 412);
      const etag = String(
        (await signedRequest(gw.url, { method: "HEAD", path: objectPath(bucket, key) })).headers.etag,
      );
      expect((await write(key, { "if-match": etag })).status).toBe(200);
      expectS3Error(await write(key, { "if-match": `"${"0".repeat(32)}"` }), "PreconditionFailed", 412);
      expectS3Error(await write(key, { "if-none-match": etag }), "NotImplemented", 501);
      const current = String(
        (await signedRequest(gw.url, { method: "HEAD", path: objectPath(bucket, key) })).headers.etag,
      );
      expectS3Error(
        await write(key, { "if-match": current, "if-none-match": "*" }),
        "PreconditionFailed",
        412,
      );
      // S3 answers If-Match on a key that holds no object with 404 NoSuchKey, not 412.
      expectS3Error(await write(`${key}-missing`, { "if-match": current }), "NoSuchKey", 404);
      expect(await exists(`${key}-missing`)).toBe(false);
    });
  }

  it("DeleteObject: If-Match decides (412 on another ETag, 404 on no object), the object stays", async () => {
    const del = (key: string, headers: Record<string, string>) =>
      signedRequest(gw.url, { method: "DELETE", path: objectPath(bucket, key), headers });
    expect((await put("cond/del", "kept")).status).toBe(200);
    expectS3Error(await del("cond/del", { "if-match": `"${"0".repeat(32)}"` }), "PreconditionFailed", 412);
    expect(await exists("cond/del")).toBe(true);
    expectS3Error(await del("cond/del-missing", { "if-match": `"${"0".repeat(32)}"` }), "NoSuchKey", 404);
    const etag = String(
      (await signedRequest(gw.url, { method: "HEAD", path: objectPath(bucket, "cond/del") })).headers.etag,
    );
    expect((await del("cond/del", { "if-match": etag })).status).toBe(204);
    expect(await exists("cond/del")).toBe(false);
  });

  it("ignores write conditions S3 ignores on writes (If-Modified-Since, If-Unmodified-Since)", async () => {
    const res = await put("cond/dates", "x", { "if-unmodified-since": "Thu, 01 Jan 1970 00:00:00 GMT" });
    expect(res.status).toBe(200);
    const sign = await signRequest(gw.url, { method: "GET", path: objectPath(bucket, "cond/dates") });
    expect((await rawRequest(gw.url, sign)).status).toBe(200);
  });
});

describe("a change with a sub-resource or parameter fencegate does not know", () => {
  it("is refused (501 for S3's sub-resources, 400 for anything else) and runs nothing", async () => {
    const victim = "refusals-victim";
    expect((await signedRequest(gw.url, { method: "PUT", path: `/${victim}` })).status).toBe(200);
    const subs: Array<[string, string, number]> = [
      ["metadataTable", "NotImplemented", 501],
      ["metadataConfiguration", "NotImplemented", 501],
      ["policyStatus", "NotImplemented", 501],
      ["somethingNew", "InvalidArgument", 400],
    ];
    for (const [sub, code, status] of subs) {
      const res = await signedRequest(gw.url, { method: "DELETE", path: `/${victim}`, query: { [sub]: "" } });
      expectS3Error(res, code, status);
      expect((await signedRequest(gw.url, { method: "HEAD", path: `/${victim}` })).status).toBe(200);
    }
    // S3's RenameObject, and a PUT with any other parameter: no empty object appears.
    const rename = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "sub/renamed"),
      query: { renameObject: "" },
      headers: { "x-amz-rename-source": `/${bucket}/cond/source` },
    });
    expectS3Error(rename, "NotImplemented", 501);
    const other = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "sub/other"),
      query: { frobnicate: "1" },
      body: "x",
    });
    expectS3Error(other, "InvalidArgument", 400);
    expect(await exists("sub/renamed")).toBe(false);
    expect(await exists("sub/other")).toBe(false);
    expect((await put("sub/kept", "x")).status).toBe(200);
    const del = await signedRequest(gw.url, {
      method: "DELETE",
      path: objectPath(bucket, "sub/kept"),
      query: { somethingNew: "" },
    });
    expectS3Error(del, "InvalidArgument", 400);
    expect(await exists("sub/kept")).toBe(true);
    // GetObjectAttributes is not a GetObject.
    const attributes = await signedRequest(gw.url, {
      method: "GET",
      path: objectPath(bucket, "sub/kept"),
      query: { attributes: "" },
      headers: { "x-amz-object-attributes": "ETag" },
    });
    expectS3Error(attributes, "NotImplemented", 501);
    // What clients do send still works: the SDK's x-id, a versionId of "null" on a delete.
    const plain = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "sub/sdk"),
      query: { "x-id": "PutObject" },
      body: "x",
    });
    expect(plain.status).toBe(200);
    const versioned = await signedRequest(gw.url, {
      method: "DELETE",
      path: objectPath(bucket, "sub/sdk"),
      query: { versionId: "null", "x-id": "DeleteObject" },
    });
    expect(versioned.status).toBe(204);
    expect((await signedRequest(gw.url, { method: "DELETE", path: `/${victim}` })).status).toBe(204);
  });
});

describe("a write asking for what fencegate does not store", () => {
  it("is refused, never stored as if honoured: tags, KMS and customer keys, object lock", async () => {
    const cases: Array<[Record<string, string>, string, number]> = [
      [{ "x-amz-tagging": "a=b&c=d" }, "NotImplemented", 501],
      [{ "x-amz-server-side-encryption": "aws:kms" }, "NotImplemented", 501],
      [{ "x-amz-server-side-encryption": "BOGUS" }, "InvalidArgument", 400],
      [
        {
          "x-amz-server-side-encryption-customer-algorithm": "AES256",
          "x-amz-server-side-encryption-customer-key": Buffer.alloc(32, 1).toString("base64"),
        },
        "NotImplemented",
        501,
      ],
      [
        {
          "x-amz-object-lock-mode": "GOVERNANCE",
          "x-amz-object-lock-retain-until-date": "2030-01-01T00:00:00Z",
        },
        "InvalidRequest",
        400,
      ],
    ];
    for (const [headers, code, status] of cases) {
      expectS3Error(await put("options/refused", "x", headers), code, status);
      expect(await exists("options/refused"), JSON.stringify(headers)).toBe(false);
    }
    // What is honoured or changes nothing here is accepted: SSE-S3, a storage class, no tags.
    const fine = await put("options/fine", "x", {
      "x-amz-server-side-encryption": "AES256",
      "x-amz-storage-class": "STANDARD_IA",
      "x-amz-tagging": "",
    });
    expect(fine.status).toBe(200);
  });
});
