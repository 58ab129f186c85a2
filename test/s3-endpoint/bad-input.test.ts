import { randomBytes } from "node:crypto";
import { existsSync, readdirSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import type { Lease } from "../../src/client/lease-client.js";
import { signFencingToken } from "../../src/fence/tokens.js";
import { startTestGateway, type TestGateway, tempDir } from "../support/gateway.js";
import {
  expectS3Error,
  objectPath,
  parseS3Error,
  presign,
  type RawResponse,
  rawRequest,
  signedRequest,
  signRequest,
} from "../support/signed-http.js";

/**
 * Hostile and broken requests: each is refused with the right 4xx and an S3 XML error (never a
 * 5xx, never a dropped connection), and afterwards the gateway still serves.
 */

const sandbox = tempDir("fencegate-bad-input-");
const dataDir = join(sandbox.path, "data");
let gw: TestGateway;
let lease: Lease;
const bucket = "bad";

beforeAll(async () => {
  gw = await startTestGateway({ dataDir });
  expect((await signedRequest(gw.url, { method: "PUT", path: `/${bucket}` })).status).toBe(200);
  // Covers every key of the bucket: a path that escaped validation would be written.
  lease = await gw.leases.acquire({ bucket, prefix: "", ttlMs: 120_000, owner: "bad-input" });
});

afterAll(async () => {
  await gw?.stop();
  sandbox.cleanup();
});

afterEach(async () => {
  // The gateway still serves after every hostile request.
  const res = await signedRequest(gw.url, { method: "GET", path: "/" });
  expect(res.status).toBe(200);
  expect(res.text).toContain(`<Name>${bucket}</Name>`);
});

/** A 4xx S3 error with this code and status, never a 5xx. */
function refused(res: RawResponse, code: string, status: number) {
  expect(res.status).toBeLessThan(500);
  return expectS3Error(res, code, status);
}

const put = (key: string, token: string, body = "payload") =>
  signedRequest(gw.url, {
    method: "PUT",
    path: objectPath(bucket, key),
    body,
    headers: { "x-fence-token": token },
  });

describe("bad fencing tokens", () => {
  it("refuses tampered, forged and truncated tokens with InvalidFencingToken 403", async () => {
    const t = lease.fencingToken;
    const [version, keyId, payload, mac] = t.split(".") as [string, string, string, string];
    const claims = JSON.parse(Buffer.from(payload, "base64url").toString()) as Record<string, unknown>;
    const widened = Buffer.from(JSON.stringify({ ...claims, b: "other-bucket" })).toString("base64url");
    const cases: Record<string, string> = {
      tampered: [version, keyId, widened, mac].join("."),
      "flipped MAC": `${version}.${keyId}.${payload}.${mac[0] === "A" ? "B" : "A"}${mac.slice(1)}`,
      "forged with a random key, same key id": signFencingToken(
        { leaseId: lease.leaseId, token: lease.token, bucket, prefix: "" },
        { id: keyId, secret: randomBytes(32) },
      ),
      "forged with an unknown key id": signFencingToken(
        { leaseId: lease.leaseId, token: lease.token, bucket, prefix: "" },
        { id: "k-unknown", secret: randomBytes(32) },
      ),
      truncated: t.slice(0, Math.floor(t.length / 2)),
      "one char short": t.slice(0, -1),
      "no MAC": `${version}.${keyId}.${payload}`,
      "extra part": `${t}.x`,
      "wrong version": `fg9.${keyId}.${payload}.${mac}`,
      empty: " ",
      long: "a".repeat(8000),
      "only dots": "...",
    };
    for (const [name, token] of Object.entries(cases)) {
      const res = await put(`tok/${name.replace(/\W+/g, "-")}`, token);
      expect(res.status, name).toBe(403);
      refused(res, "InvalidFencingToken", 403);
    }
    const listed = await signedRequest(gw.url, {
      method: "GET",
      path: `/${bucket}`,
      query: { "list-type": "2", prefix: "tok/" },
    });
    expect(listed.text).not.toContain("<Key>");
  });
});

/** Signs a valid GET / and lets the test rewrite its Authorization header. */
async function withAuthorization(edit: (auth: string) => string): Promise<RawResponse> {
  const req = await signRequest(gw.url, { method: "GET", path: `/${bucket}` });
  const headers = { ...(req.headers as Record<string, string>) };
  const name = Object.keys(headers).find((h) => h.toLowerCase() === "authorization")!;
  headers[name] = edit(headers[name]!);
  return rawRequest(gw.url, { ...req, headers });
}

describe("broken Authorization headers", () => {
  const drop = (component: string) => (auth: string) =>
    auth
      .replace(/^AWS4-HMAC-SHA256 /, "")
      .split(/,\s*/)
      .filter((p) => !p.startsWith(`${component}=`))
      .join(", ")
      .replace(/^/, "AWS4-HMAC-SHA256 ");

  it("refuses a header without Credential, SignedHeaders or Signature (AuthorizationHeaderMalformed)", async () => {
    for (const component of ["Credential", "SignedHeaders", "Signature"]) {
      const res = await withAuthorization(drop(component));
      refused(res, "AuthorizationHeaderMalformed", 400);
    }
  });

  it("refuses repeated, garbled and truncated components", async () => {
    const repeated = await withAuthorization((a) => `${a}, Signature=${"0".repeat(64)}`);
    refused(repeated, "AuthorizationHeaderMalformed", 400);
    const noEquals = await withAuthorization((a) => `${a}, Garbage`);
    refused(noEquals, "AuthorizationHeaderMalformed", 400);
    const shortScope = await withAuthorization((a) =>
      a.replace(/Credential=([^/]+)\/[^,]*/, "Credential=$1/2026"),
    );
    refused(shortScope, "AuthorizationHeaderMalformed", 400);
    const wrongService = await withAuthorization((a) => a.replace("/s3/aws4_request", "/ec2/aws4_request"));
    refused(wrongService, "AuthorizationHeaderMalformed", 400);
    const badSignedHeaders = await withAuthorization((a) =>
      a.replace(/SignedHeaders=[^,]*/, "SignedHeaders=Host;;X Y"),
    );
    refused(badSignedHeaders, "AuthorizationHeaderMalformed", 400);
    const unknown = await withAuthorization((a) => `${a}, Foo=bar`);
    refused(unknown, "AuthorizationHeaderMalformed", 400);
    const onlyAlgorithm = await withAuthorization(() => "AWS4-HMAC-SHA256");
    refused(onlyAlgorithm, "AuthorizationHeaderMalformed", 400);
  });

  it("refuses other schemes and junk", async () => {
    // Signature Version 2, in S3's words for regions that accept only Signature Version 4.
    const v2 = refused(await withAuthorization(() => "AWS fencegate:c2lnbmF0dXJl"), "InvalidRequest", 400);
    expect(v2.Message).toBe(
      "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.",
    );
    const v2Query = await rawRequest(gw.url, {
      method: "GET",
      path: `${objectPath(bucket, "k")}?AWSAccessKeyId=fencegate&Expires=4102444800&Signature=c2lnbmF0dXJl`,
    });
    expect(refused(v2Query, "InvalidRequest", 400).Message).toBe(v2.Message);
    refused(
      await withAuthorization((a) => a.replace("AWS4-HMAC-SHA256", "AWS4-HMAC-SHA512")),
      "InvalidArgument",
      400,
    );
    refused(await withAuthorization(() => "Bearer abc.def.ghi"), "InvalidArgument", 400);
    refused(await withAuthorization(() => "\u00ff\u00fe garbage"), "InvalidArgument", 400);
  });

  it("refuses a forged signature with SignatureDoesNotMatch", async () => {
    const res = await withAuthorization((a) =>
      a.replace(/Signature=[0-9a-f]+/, `Signature=${"ab".repeat(32)}`),
    );
    refused(res, "SignatureDoesNotMatch", 403);
    const junk = await withAuthorization((a) => a.replace(/Signature=[0-9a-f]+/, "Signature=zz"));
    refused(junk, "SignatureDoesNotMatch", 403);
  });
});

describe("credentials and time", () => {
  it("refuses a wrong secret with SignatureDoesNotMatch 403", async () => {
    const res = await signedRequest(gw.url, {
      method: "GET",
      path: "/",
      credentials: { accessKeyId: "fencegate", secretAccessKey: "not-the-secret" },
    });
    refused(res, "SignatureDoesNotMatch", 403);
  });

  it("refuses an unknown access key with InvalidAccessKeyId 403", async () => {
    const res = await signedRequest(gw.url, {
      method: "GET",
      path: "/",
      credentials: { accessKeyId: "nobody", secretAccessKey: "whatever-secret" },
    });
    const err = refused(res, "InvalidAccessKeyId", 403);
    expect(err.Message).toMatch(/Access Key/i);
  });

  it("refuses an x-amz-date 20 minutes off with RequestTimeTooSkewed 403", async () => {
    for (const offset of [-20 * 60_000, 20 * 60_000]) {
      const res = await signedRequest(gw.url, {
        method: "GET",
        path: "/",
        signingDate: new Date(Date.now() + offset),
      });
      refused(res, "RequestTimeTooSkewed", 403);
    }
    // A write that is skewed is refused before anything is stored.
    const res = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "skewed"),
      body: "x",
      headers: { "x-fence-token": lease.fencingToken },
      signingDate: new Date(Date.now() - 20 * 60_000),
    });
    refused(res, "RequestTimeTooSkewed", 403);
    refused(
      await signedRequest(gw.url, { method: "GET", path: objectPath(bucket, "skewed") }),
      "NoSuchKey",
      404,
    );
  });

  it("refuses an expired presigned URL with AccessDenied 403", async () => {
    const path = await presign(gw.url, {
      method: "GET",
      path: "/",
      expiresIn: 60,
      signingDate: new Date(Date.now() - 10 * 60_000),
    });
    refused(await rawRequest(gw.url, { method: "GET", path }), "AccessDenied", 403);
    const putPath = await presign(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "expired"),
      query: { "x-fence-token": lease.fencingToken },
      expiresIn: 60,
      signingDate: new Date(Date.now() - 10 * 60_000),
    });
    const res = await rawRequest(gw.url, {
      method: "PUT",
      path: putPath,
      headers: { "content-length": "1" },
      body: "x",
    });
    refused(res, "AccessDenied", 403);
  });

  it("refuses X-Amz-Expires 604801 with AuthorizationQueryParametersError 400, -1 as expired", async () => {
    const path = await presign(gw.url, { method: "GET", path: "/", expiresIn: 604800 });
    expect(path).toContain("X-Amz-Expires=604800");
    const res = await rawRequest(gw.url, {
      method: "GET",
      path: path.replace("X-Amz-Expires=604800", "X-Amz-Expires=604801"),
    });
    refused(res, "AuthorizationQueryParametersError", 400);
    const negative = await rawRequest(gw.url, {
      method: "GET",
      path: path.replace("X-Amz-Expires=604800", "X-Amz-Expires=-1"),
    });
    // A negative expiry has passed before the URL was signed: expired, as S3 answers it.
    refused(negative, "AccessDenied", 403);
    const missing = await rawRequest(gw.url, { method: "GET", path: path.replace(/&X-Amz-Date=[^&]*/, "") });
    refused(missing, "AuthorizationQueryParametersError", 400);
  });

  it("refuses a request without any authentication with AccessDenied 403", async () => {
    refused(await rawRequest(gw.url, { method: "GET", path: "/" }), "AccessDenied", 403);
    const res = await rawRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "anonymous"),
      headers: { "x-fence-token": lease.fencingToken, "content-length": "1" },
      body: "x",
    });
    refused(res, "AccessDenied", 403);
    refused(
      await signedRequest(gw.url, { method: "GET", path: objectPath(bucket, "anonymous") }),
      "NoSuchKey",
      404,
    );
  });

  it("refuses x-amz-* headers that were not signed", async () => {
    const req = await signRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "unsigned-meta"),
      body: "x",
      headers: { "x-fence-token": lease.fencingToken },
    });
    const res = await rawRequest(gw.url, {
      ...req,
      headers: { ...(req.headers as Record<string, string>), "x-amz-meta-sneaky": "1" },
    });
    refused(res, "AccessDenied", 403);
  });
});

/** Every file under a directory, relative paths. */
function walk(dir: string, base = dir): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...walk(p, base));
    else out.push(p.slice(base.length + 1));
  }
  return out;
}

describe("object keys that would leave the root", () => {
  const hostile: [string, string][] = [
    ["../x", `/${bucket}/../x`],
    ["a/../../b", `/${bucket}/a/../../b`],
    ["/abs via //abs", `/${bucket}//abs`],
    ["NUL", `/${bucket}/a%00b`],
    ["backslashes", `/${bucket}/..%5C..%5Cx`],
    ["encoded dots", `/${bucket}/%2e%2e/x`],
    ["encoded separators", `/${bucket}/..%2F..%2Fetc`],
    ["deep encoded separators", `/${bucket}/..%2F..%2F..%2F..%2F..%2Ftmp%2Fescaped`],
    ["dot segment", `/${bucket}/./x`],
    ["trailing dot-dot", `/${bucket}/a/..`],
  ];

  it("refuses each with a 4xx XML error and creates nothing outside the data directory", async () => {
    const before = walk(sandbox.path).filter((f) => !f.startsWith(`data${"/"}`));
    expect(before).toEqual([]);
    for (const [name, path] of hostile) {
      const res = await signedRequest(gw.url, {
        method: "PUT",
        path,
        body: `escaped via ${name}`,
        headers: { "x-fence-token": lease.fencingToken },
      });
      expect(res.status, name).toBe(400);
      const err = refused(res, parseS3Error(res.text).Code, 400);
      expect(["InvalidArgument", "InvalidObjectName", "InvalidURI"], name).toContain(err.Code);
      const got = await signedRequest(gw.url, { method: "GET", path });
      expect(got.status, `GET ${name}`).toBe(400);
      expect(got.text).not.toContain("escaped via");
      parseS3Error(got.text);
      const del = await signedRequest(gw.url, {
        method: "DELETE",
        path,
        headers: { "x-fence-token": lease.fencingToken },
      });
      expect(del.status, `DELETE ${name}`).toBe(400);
    }
    // Nothing beside the data directory, nothing named after the hostile keys inside it.
    expect(readdirSync(sandbox.path)).toEqual(["data"]);
    const inside = walk(dataDir);
    for (const f of inside) expect(f).not.toMatch(/(^|\/)(x|b|abs|etc|escaped)$/);
    for (const dir of [tmpdir(), "/tmp", sandbox.path, dataDir])
      expect(existsSync(join(dir, "escaped"))).toBe(false);
    const listed = await signedRequest(gw.url, {
      method: "GET",
      path: `/${bucket}`,
      query: { "list-type": "2" },
    });
    expect(listed.status).toBe(200);
    expect(listed.text).not.toContain("escaped");
    expect(listed.text).not.toMatch(/<Key>[^<]*\.\.[^<]*<\/Key>/);
  });

  it("refuses a bucket path that tries to climb out", async () => {
    for (const path of ["/..%2F..%2Fetc/passwd", "/../etc/passwd", "/%2e%2e/x"]) {
      const res = await signedRequest(gw.url, {
        method: "PUT",
        path,
        body: "x",
        headers: { "x-fence-token": lease.fencingToken },
      });
      expect(res.status, path).toBeGreaterThanOrEqual(400);
      expect(res.status, path).toBeLessThan(500);
      parseS3Error(res.text);
      expect(res.headers["x-amz-request-id"]).toMatch(/\S/);
    }
    expect(readdirSync(sandbox.path)).toEqual(["data"]);
  });
});

describe("oversized and malformed requests", () => {
  it("refuses a 20 KiB header with RequestHeaderSectionTooLarge 400 and an S3 XML body", async () => {
    const req = await signRequest(gw.url, { method: "GET", path: "/" });
    const res = await rawRequest(gw.url, {
      ...req,
      headers: { ...(req.headers as Record<string, string>), "x-big": "b".repeat(20 * 1024) },
    });
    refused(res, "RequestHeaderSectionTooLarge", 400);
  });

  it("refuses 300 x-amz-meta headers (more than 2 KiB of metadata) with MetadataTooLarge", async () => {
    const headers: Record<string, string> = { "x-fence-token": lease.fencingToken };
    for (let i = 0; i < 300; i++) headers[`x-amz-meta-m${String(i).padStart(3, "0")}`] = "vvvv";
    const res = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "many-meta"),
      body: "x",
      headers,
    });
    refused(res, "MetadataTooLarge", 400);
    refused(
      await signedRequest(gw.url, { method: "GET", path: objectPath(bucket, "many-meta") }),
      "NoSuchKey",
      404,
    );
  });

  it("refuses one 3 KiB metadata value with MetadataTooLarge, accepts 2 KiB in total", async () => {
    const big = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "big-meta"),
      body: "x",
      headers: { "x-fence-token": lease.fencingToken, "x-amz-meta-big": "v".repeat(3 * 1024) },
    });
    refused(big, "MetadataTooLarge", 400);
    const fits = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "fits-meta"),
      body: "x",
      headers: { "x-fence-token": lease.fencingToken, "x-amz-meta-ok": "v".repeat(2000) },
    });
    expect(fits.status).toBe(200);
  });

  it("refuses a bad percent-encoding in the path", async () => {
    for (const path of [`/${bucket}/a%zz`, `/${bucket}/a%`, `/${bucket}/%E0%A4%A`, "/b%zzucket"]) {
      const res = await signedRequest(gw.url, {
        method: "PUT",
        path,
        body: "x",
        headers: { "x-fence-token": lease.fencingToken },
      });
      expect(res.status, path).toBe(400);
      refused(res, "InvalidURI", 400);
    }
  });

  it("refuses an invalid bucket name with InvalidBucketName", async () => {
    for (const name of ["Bad_Bucket", "ab", "-leading", "192.168.1.1", "a..b", "x".repeat(64)]) {
      const res = await signedRequest(gw.url, { method: "PUT", path: `/${name}` });
      expect(res.status, name).toBe(400);
      refused(res, "InvalidBucketName", 400);
    }
    const list = await signedRequest(gw.url, { method: "GET", path: "/" });
    expect(list.text).not.toContain("Bad_Bucket");
  });

  it("refuses an unknown method with a 4xx", async () => {
    for (const path of ["/", `/${bucket}`, objectPath(bucket, "k")]) {
      const res = await signedRequest(gw.url, {
        method: "PATCH",
        path,
        body: "x",
        headers: { "x-fence-token": lease.fencingToken },
      });
      expect(res.status, path).toBe(405);
      refused(res, "MethodNotAllowed", 405);
    }
  });

  it("refuses an invalid x-amz-content-sha256 value", async () => {
    const res = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "bad-hash"),
      body: "x",
      payloadHash: "not-a-hash",
      headers: { "x-fence-token": lease.fencingToken },
    });
    refused(res, "InvalidArgument", 400);
  });

  it("answers a broken HTTP request line with 400", async () => {
    const { Socket } = await import("node:net");
    const url = new URL(gw.url);
    const text = await new Promise<string>((resolve, reject) => {
      const s = new Socket();
      let data = "";
      s.on("data", (d) => {
        data += d;
      });
      s.on("end", () => resolve(data));
      s.on("error", reject);
      s.connect(Number(url.port), url.hostname, () => s.write("GET / HTTP/1.1\r\nHost\r\n\r\n"));
    });
    expect(text).toMatch(/^HTTP\/1\.1 400/);
    expect(text).toContain("<Code>");
    expect(text).toMatch(/x-amz-request-id: \S+/i);
  });
});
