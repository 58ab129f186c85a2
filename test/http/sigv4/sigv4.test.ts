import { describe, expect, it } from "vitest";
import { DomainError } from "../../../src/core/errors.js";
import { authenticateRequest, type SigV4Request } from "../../../src/http/sigv4/sigv4.js";
import { toS3Error } from "../../../src/s3-endpoint/protocol/errors.js";
import { sha256Hex } from "../../support/digest.js";
import {
  objectPath as keyPath,
  signatureOf,
  signingKey,
  sigV4Signer,
  wireQuery,
} from "../../support/signed-http.js";

const AKID = "AKIDEXAMPLE";
const SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const OTHER_AKID = "AKIDOTHER";
const OTHER_SECRET = "another-secret";
const lookup = (id: string) => (id === AKID ? SECRET : id === OTHER_AKID ? OTHER_SECRET : undefined);
const T0 = Date.UTC(2026, 10, 22, 12, 0, 0);
const EMPTY_SHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

type SignOptions = {
  method?: string;
  path?: string;
  query?: Record<string, string>;
  headers?: Record<string, string>;
  date?: number;
  region?: string;
  service?: string;
  accessKeyId?: string;
  secret?: string;
};

/** Signs with @smithy/signature-v4 as the S3 client configures it, returns what the server sees. */
async function sdkSigned(o: SignOptions = {}): Promise<SigV4Request> {
  const signer = sigV4Signer({
    service: o.service ?? "s3",
    region: o.region ?? "us-east-1",
    credentials: { accessKeyId: o.accessKeyId ?? AKID, secretAccessKey: o.secret ?? SECRET },
  });
  const path = o.path ?? "/bucket/key";
  const query = o.query ?? {};
  const signed = await signer.sign(
    {
      method: o.method ?? "GET",
      protocol: "http:",
      hostname: "localhost",
      port: 9000,
      path,
      query,
      headers: { host: "localhost:9000", "x-amz-content-sha256": EMPTY_SHA, ...o.headers },
    },
    { signingDate: new Date(o.date ?? T0) },
  );
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(signed.headers)) headers[k.toLowerCase()] = v;
  return { method: o.method ?? "GET", rawPath: path, rawQuery: wireQuery(query), headers, now: o.date ?? T0 };
}

/** An independent SigV4 signer over a hand-written canonical request (spec, not the SDK). */
function handSign(canonicalRequest: string, amzDate: string, secret = SECRET, region = "us-east-1"): string {
  const scope = `${amzDate.slice(0, 8)}/${region}/s3/aws4_request`;
  const key = signingKey(secret, amzDate.slice(0, 8), region);
  return signatureOf(key, ["AWS4-HMAC-SHA256", amzDate, scope, sha256Hex(canonicalRequest)].join("\n"));
}

function expectError(fn: () => unknown, code: string, status?: number): DomainError {
  let thrown: unknown;
  try {
    fn();
  } catch (e) {
    thrown = e;
  }
  expect(thrown, `expected ${code}`).toBeInstanceOf(DomainError);
  const err = thrown as DomainError;
  expect(err.code).toBe(code);
  if (status !== undefined) expect(toS3Error(err).status).toBe(status);
  return err;
}

const withHeaders = (r: SigV4Request, change: Record<string, string | undefined>): SigV4Request => {
  const headers = { ...r.headers, ...change };
  for (const [k, v] of Object.entries(change)) if (v === undefined) delete headers[k];
  return { ...r, headers };
};

describe("SigV4 header authentication", () => {
  it("accepts an SDK-signed request and returns the signing material", async () => {
    const req = await sdkSigned({ method: "PUT", headers: { "x-amz-meta-a": "1" } });
    const auth = authenticateRequest(req, lookup);
    const expectedKey = signingKey(SECRET, "20261122");
    expect(auth).toEqual({
      accessKeyId: AKID,
      signingKey: expectedKey,
      scope: { date: "20261122", region: "us-east-1", service: "s3" },
      seedSignature: /Signature=([0-9a-f]{64})/.exec(String(req.headers.authorization))![1],
      payloadHash: EMPTY_SHA,
      amzDate: "20261122T120000Z",
      presigned: false,
      signedHeaders: ["host", "x-amz-content-sha256", "x-amz-date", "x-amz-meta-a"],
    });
  });

  describe("examples of the S3 documentation", () => {
    const docSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const docLookup = (id: string) => (id === "AKIAIOSFODNN7EXAMPLE" ? docSecret : undefined);
    const now = Date.UTC(2013, 4, 24, 0, 5);
    const cred = "AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request";

    it("GET Object with a Range header", () => {
      const req: SigV4Request = {
        method: "GET",
        rawPath: "/test.txt",
        rawQuery: "",
        headers: {
          host: "examplebucket.s3.amazonaws.com",
          range: "bytes=0-9",
          "x-amz-content-sha256": EMPTY_SHA,
          "x-amz-date": "20130524T000000Z",
          authorization: `AWS4-HMAC-SHA256 Credential=${cred},SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41`,
        },
        now,
      };
      expect(authenticateRequest(req, docLookup).seedSignature).toBe(
        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
      );
    });

    it("PUT Object with a Date header, a $ in the key and a payload hash", () => {
      const req: SigV4Request = {
        method: "PUT",
        rawPath: "/test$file.text",
        rawQuery: "",
        headers: {
          host: "examplebucket.s3.amazonaws.com",
          date: "Fri, 24 May 2013 00:00:00 GMT",
          "x-amz-date": "20130524T000000Z",
          "x-amz-storage-class": "REDUCED_REDUNDANCY",
          "x-amz-content-sha256": "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072",
          authorization: `AWS4-HMAC-SHA256 Credential=${cred},SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class,Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd`,
        },
        now,
      };
      expect(authenticateRequest(req, docLookup).payloadHash).toBe(
        "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072",
      );
    });

    it("GET Bucket lifecycle and list objects (sub-resource and query)", () => {
      const base = {
        method: "GET",
        rawPath: "/",
        headers: {
          host: "examplebucket.s3.amazonaws.com",
          "x-amz-content-sha256": EMPTY_SHA,
          "x-amz-date": "20130524T000000Z",
        },
        now,
      };
      const lifecycle: SigV4Request = {
        ...base,
        rawQuery: "lifecycle",
        headers: {
          ...base.headers,
          authorization: `AWS4-HMAC-SHA256 Credential=${cred},SignedHeaders=host;x-amz-content-sha256;x-amz-date,Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543`,
        },
      };
      expect(authenticateRequest(lifecycle, docLookup).accessKeyId).toBe("AKIAIOSFODNN7EXAMPLE");
      const list: SigV4Request = {
        ...base,
        rawQuery: "max-keys=2&prefix=J",
        headers: {
          ...base.headers,
          authorization: `AWS4-HMAC-SHA256 Credential=${cred},SignedHeaders=host;x-amz-content-sha256;x-amz-date,Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7`,
        },
      };
      expect(authenticateRequest(list, docLookup).accessKeyId).toBe("AKIAIOSFODNN7EXAMPLE");
    });
  });

  it("accepts any region and signs with the region of the scope", async () => {
    const auth = authenticateRequest(await sdkSigned({ region: "eu-central-1" }), lookup);
    expect(auth.scope.region).toBe("eu-central-1");
    expect(authenticateRequest(await sdkSigned({ region: "garage" }), lookup).scope.region).toBe("garage");
  });

  it.each([
    "with space/and+plus=equals~tilde",
    "ünïcødé/日本語/😀",
    "parens (1)/bang!star*quote'",
    "a%20literal-percent/100%",
    "semi;colon:at@dollar$amp&comma,hash#question?",
    "trailing/slash/",
    "double//slash",
  ])("verifies keys needing encoding: %s", async (key) => {
    const req = await sdkSigned({ method: "PUT", path: keyPath("bucket", key) });
    expect(authenticateRequest(req, lookup).accessKeyId).toBe(AKID);
  });

  it("verifies query values needing encoding", async () => {
    const query = {
      "list-type": "2",
      prefix: "a b+c/ü=&?",
      delimiter: "/",
      "start-after": "~x*y(z)",
      "x-fence-token": "42",
      uploads: "",
    };
    const req = await sdkSigned({ path: "/bucket", query });
    expect(authenticateRequest(req, lookup).accessKeyId).toBe(AKID);
  });

  it("accepts a query with repeated names and unusual order", async () => {
    const amzDate = "20261122T120000Z";
    const canonical = [
      "GET",
      "/bucket",
      "a=1&a=2&b=",
      "host:localhost\nx-amz-content-sha256:UNSIGNED-PAYLOAD\nx-amz-date:20261122T120000Z\n",
      "host;x-amz-content-sha256;x-amz-date",
      "UNSIGNED-PAYLOAD",
    ].join("\n");
    const sig = handSign(canonical, amzDate);
    const req: SigV4Request = {
      method: "GET",
      rawPath: "/bucket",
      rawQuery: "b&a=2&a=1",
      headers: {
        host: "localhost",
        "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
        "x-amz-date": amzDate,
        authorization: `AWS4-HMAC-SHA256 Credential=${AKID}/20261122/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=${sig}`,
      },
      now: T0,
    };
    expect(authenticateRequest(req, lookup).payloadHash).toBe("UNSIGNED-PAYLOAD");
  });

  it("tolerates Authorization components without spaces after commas", async () => {
    const req = await sdkSigned();
    const compact = String(req.headers.authorization).replace(/, /g, ",");
    expect(authenticateRequest(withHeaders(req, { authorization: compact }), lookup).accessKeyId).toBe(AKID);
  });

  it("canonicalizes header values: trimmed, inner spaces collapsed, repeats joined with a comma", async () => {
    const req = await sdkSigned({ headers: { "x-amz-meta-spaced": "  a   b \t c  " } });
    expect(authenticateRequest(req, lookup).accessKeyId).toBe(AKID);
    // The same header sent twice (headersDistinct) is signed as "v1,v2".
    const amzDate = "20261122T120000Z";
    const canonical = [
      "GET",
      "/bucket/key",
      "",
      "host:localhost\nx-amz-content-sha256:UNSIGNED-PAYLOAD\nx-amz-date:20261122T120000Z\nx-amz-meta-multi:one,two  three\n",
      "host;x-amz-content-sha256;x-amz-date;x-amz-meta-multi",
      "UNSIGNED-PAYLOAD",
    ].join("\n");
    const sig = handSign(canonical.replace("two  three", "two three"), amzDate);
    const multi: SigV4Request = {
      method: "GET",
      rawPath: "/bucket/key",
      rawQuery: "",
      headers: {
        host: ["localhost"],
        "x-amz-content-sha256": ["UNSIGNED-PAYLOAD"],
        "x-amz-date": [amzDate],
        "x-amz-meta-multi": [" one ", "two  three"],
        authorization: [
          `AWS4-HMAC-SHA256 Credential=${AKID}/20261122/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-meta-multi, Signature=${sig}`,
        ],
      },
      now: T0,
    };
    expect(authenticateRequest(multi, lookup).accessKeyId).toBe(AKID);
  });

  describe("tampering", () => {
    it("rejects a different method", async () => {
      const req = await sdkSigned({ method: "GET" });
      expectError(
        () => authenticateRequest({ ...req, method: "DELETE" }, lookup),
        "SignatureDoesNotMatch",
        403,
      );
    });

    it("rejects a different path", async () => {
      const req = await sdkSigned({ path: "/bucket/key" });
      expectError(
        () => authenticateRequest({ ...req, rawPath: "/bucket/key2" }, lookup),
        "SignatureDoesNotMatch",
      );
      expectError(
        () => authenticateRequest({ ...req, rawPath: "/bucket/Key" }, lookup),
        "SignatureDoesNotMatch",
      );
    });

    it("rejects a changed, added or removed query parameter", async () => {
      const req = await sdkSigned({ path: "/bucket", query: { prefix: "a", "x-fence-token": "7" } });
      const cases = [
        "prefix=a&x-fence-token=8",
        "prefix=a&x-fence-token=7&extra=1",
        "prefix=a",
        "prefix=b&x-fence-token=7",
      ];
      for (const rawQuery of cases) {
        expectError(() => authenticateRequest({ ...req, rawQuery }, lookup), "SignatureDoesNotMatch");
      }
    });

    it("rejects a changed signed header", async () => {
      const req = await sdkSigned({
        method: "PUT",
        headers: { "x-amz-meta-a": "1", "content-type": "text/plain" },
      });
      expectError(
        () => authenticateRequest(withHeaders(req, { "x-amz-meta-a": "2" }), lookup),
        "SignatureDoesNotMatch",
      );
      expectError(
        () => authenticateRequest(withHeaders(req, { "content-type": "text/html" }), lookup),
        "SignatureDoesNotMatch",
      );
      expectError(
        () => authenticateRequest(withHeaders(req, { host: "evil:9000" }), lookup),
        "SignatureDoesNotMatch",
      );
      expectError(
        () => authenticateRequest(withHeaders(req, { "x-amz-content-sha256": "UNSIGNED-PAYLOAD" }), lookup),
        "SignatureDoesNotMatch",
      );
    });

    it("rejects a changed x-amz-date within the same day", async () => {
      const req = await sdkSigned();
      expectError(
        () => authenticateRequest(withHeaders(req, { "x-amz-date": "20261122T120001Z" }), lookup),
        "SignatureDoesNotMatch",
      );
    });

    it("rejects a changed signature", async () => {
      const req = await sdkSigned();
      const auth = String(req.headers.authorization);
      const flipped = auth.replace(/Signature=(.)/, (_m, c: string) => `Signature=${c === "0" ? "1" : "0"}`);
      expectError(
        () => authenticateRequest(withHeaders(req, { authorization: flipped }), lookup),
        "SignatureDoesNotMatch",
      );
      const short = auth.replace(/Signature=[0-9a-f]+/, "Signature=abc");
      expectError(
        () => authenticateRequest(withHeaders(req, { authorization: short }), lookup),
        "SignatureDoesNotMatch",
      );
    });

    it("rejects another known key id and a wrong secret", async () => {
      const req = await sdkSigned();
      const other = String(req.headers.authorization).replace(
        `Credential=${AKID}/`,
        `Credential=${OTHER_AKID}/`,
      );
      expectError(
        () => authenticateRequest(withHeaders(req, { authorization: other }), lookup),
        "SignatureDoesNotMatch",
      );
      expectError(() => authenticateRequest(req, () => "not-the-secret"), "SignatureDoesNotMatch");
      const wrongSecret = await sdkSigned({ secret: "guess" });
      expectError(() => authenticateRequest(wrongSecret, lookup), "SignatureDoesNotMatch");
    });

    it("rejects a changed region in the scope", async () => {
      const req = await sdkSigned({ region: "us-east-1" });
      const moved = String(req.headers.authorization).replace("/us-east-1/", "/us-west-2/");
      expectError(
        () => authenticateRequest(withHeaders(req, { authorization: moved }), lookup),
        "SignatureDoesNotMatch",
      );
    });

    it("reports S3's diagnostic elements on SignatureDoesNotMatch", async () => {
      const req = await sdkSigned();
      const err = expectError(
        () => authenticateRequest({ ...req, method: "POST" }, lookup),
        "SignatureDoesNotMatch",
      );
      expect(err.details.AWSAccessKeyId).toBe(AKID);
      expect(String(err.details.CanonicalRequest).startsWith("POST\n/bucket/key\n")).toBe(true);
      expect(String(err.details.StringToSign).startsWith("AWS4-HMAC-SHA256\n20261122T120000Z\n")).toBe(true);
    });
  });

  it("rejects an unknown access key id", async () => {
    const req = await sdkSigned({ accessKeyId: "AKIDUNKNOWN" });
    const err = expectError(() => authenticateRequest(req, lookup), "InvalidAccessKeyId", 403);
    expect(err.details.AWSAccessKeyId).toBe("AKIDUNKNOWN");
  });

  describe("time", () => {
    it("accepts up to 15 minutes of skew either way", async () => {
      const req = await sdkSigned();
      for (const delta of [-15 * 60_000, 15 * 60_000, 60_000]) {
        expect(authenticateRequest({ ...req, now: T0 + delta }, lookup).accessKeyId).toBe(AKID);
      }
    });

    it("rejects more than 15 minutes of skew", async () => {
      const req = await sdkSigned();
      for (const delta of [-15 * 60_000 - 1000, 16 * 60_000, 86_400_000]) {
        expectError(
          () => authenticateRequest({ ...req, now: T0 + delta }, lookup),
          "RequestTimeTooSkewed",
          403,
        );
      }
    });

    it("requires a date header", async () => {
      const req = await sdkSigned();
      const err = expectError(
        () => authenticateRequest(withHeaders(req, { "x-amz-date": undefined }), lookup),
        "MissingSecurityHeader",
        400,
      );
      expect(err.details.MissingHeaderName).toBe("x-amz-date");
    });

    it("rejects an unparseable x-amz-date", async () => {
      const req = await sdkSigned();
      for (const bad of ["2026-11-22T12:00:00Z", "20261322T120000Z", "20261122T120000"]) {
        expectError(
          () => authenticateRequest(withHeaders(req, { "x-amz-date": bad }), lookup),
          "AccessDenied",
        );
      }
    });

    it("requires the credential date to be the day of x-amz-date", async () => {
      const req = await sdkSigned();
      const auth = String(req.headers.authorization).replace("/20261122/", "/20261121/");
      const err = expectError(
        () => authenticateRequest(withHeaders(req, { authorization: auth }), lookup),
        "AuthorizationHeaderMalformed",
        400,
      );
      expect(err.message).toContain("20261121");
    });

    it("accepts the Date header when there is no x-amz-date, signing its ISO 8601 form", () => {
      const httpDate = new Date(T0).toUTCString();
      const canonical = [
        "PUT",
        "/bucket/key",
        "",
        `date:${httpDate}\nhost:localhost\nx-amz-content-sha256:UNSIGNED-PAYLOAD\n`,
        "date;host;x-amz-content-sha256",
        "UNSIGNED-PAYLOAD",
      ].join("\n");
      const sig = handSign(canonical, "20261122T120000Z");
      const req: SigV4Request = {
        method: "PUT",
        rawPath: "/bucket/key",
        rawQuery: "",
        headers: {
          date: httpDate,
          host: "localhost",
          "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
          authorization: `AWS4-HMAC-SHA256 Credential=${AKID}/20261122/us-east-1/s3/aws4_request,SignedHeaders=date;host;x-amz-content-sha256,Signature=${sig}`,
        },
        now: T0 + 5000,
      };
      expect(authenticateRequest(req, lookup).amzDate).toBe("20261122T120000Z");
      expectError(
        () => authenticateRequest({ ...req, now: T0 + 20 * 60_000 }, lookup),
        "RequestTimeTooSkewed",
      );
    });
  });

  describe("x-amz-content-sha256", () => {
    it("is required", async () => {
      const req = await sdkSigned();
      const err = expectError(
        () => authenticateRequest(withHeaders(req, { "x-amz-content-sha256": undefined }), lookup),
        "MissingSecurityHeader",
        400,
      );
      expect(err.details.MissingHeaderName).toBe("x-amz-content-sha256");
    });

    it("must be a sha256 or a known sentinel", async () => {
      const req = await sdkSigned({ headers: { "x-amz-content-sha256": "NOT-A-HASH" } });
      expectError(() => authenticateRequest(req, lookup), "InvalidArgument", 400);
    });

    it.each([
      "UNSIGNED-PAYLOAD",
      "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
      "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
      "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
    ])("accepts %s and returns it as the payload hash", async (value) => {
      const req = await sdkSigned({ method: "PUT", headers: { "x-amz-content-sha256": value } });
      expect(authenticateRequest(req, lookup).payloadHash).toBe(value);
    });
  });

  describe("malformed Authorization", () => {
    const variants: [string, (a: string) => string, string][] = [
      ["wrong service", (a) => a.replace("/s3/", "/ec2/"), "AuthorizationHeaderMalformed"],
      ["wrong terminal", (a) => a.replace("aws4_request", "aws5_request"), "AuthorizationHeaderMalformed"],
      ["short credential", (a) => a.replace("/us-east-1/s3/", "/"), "AuthorizationHeaderMalformed"],
      ["bad credential date", (a) => a.replace("/20261122/", "/2026-11-22/"), "AuthorizationHeaderMalformed"],
      ["no Signature", (a) => a.replace(/, Signature=[0-9a-f]+/, ""), "AuthorizationHeaderMalformed"],
      ["no SignedHeaders", (a) => a.replace(/, SignedHeaders=[^,]+/, ""), "AuthorizationHeaderMalformed"],
      ["no Credential", (a) => a.replace(/Credential=[^,]+, /, ""), "AuthorizationHeaderMalformed"],
      ["garbage component", (a) => `${a}, junk`, "AuthorizationHeaderMalformed"],
      ["repeated component", (a) => `${a}, Signature=00`, "AuthorizationHeaderMalformed"],
      [
        "upper-case SignedHeaders",
        (a) => a.replace("SignedHeaders=host", "SignedHeaders=Host"),
        "AuthorizationHeaderMalformed",
      ],
      ["SigV2", () => "AWS AKIDEXAMPLE:c2lnbmF0dXJl", "InvalidRequest"],
      ["SigV4a", (a) => a.replace("AWS4-HMAC-SHA256", "AWS4-ECDSA-P256-SHA256"), "InvalidArgument"],
      ["empty", () => "", "InvalidArgument"],
    ];
    it.each(variants)("%s", async (_name, change, code) => {
      const req = await sdkSigned();
      const authorization = change(String(req.headers.authorization));
      expectError(() => authenticateRequest(withHeaders(req, { authorization }), lookup), code, 400);
    });

    it("signs the service check with the scope's service (an ec2 signature is refused before verification)", async () => {
      const req = await sdkSigned({ service: "ec2" });
      expectError(() => authenticateRequest(req, lookup), "AuthorizationHeaderMalformed");
    });
  });

  describe("what must be signed", () => {
    it("requires host among the signed headers", async () => {
      const amzDate = "20261122T120000Z";
      const canonical = [
        "GET",
        "/bucket/key",
        "",
        "x-amz-content-sha256:UNSIGNED-PAYLOAD\nx-amz-date:20261122T120000Z\n",
        "x-amz-content-sha256;x-amz-date",
        "UNSIGNED-PAYLOAD",
      ].join("\n");
      const req: SigV4Request = {
        method: "GET",
        rawPath: "/bucket/key",
        rawQuery: "",
        headers: {
          host: "localhost",
          "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
          "x-amz-date": amzDate,
          authorization: `AWS4-HMAC-SHA256 Credential=${AKID}/20261122/us-east-1/s3/aws4_request, SignedHeaders=x-amz-content-sha256;x-amz-date, Signature=${handSign(canonical, amzDate)}`,
        },
        now: T0,
      };
      const err = expectError(() => authenticateRequest(req, lookup), "AccessDenied", 403);
      expect(err.details.HeadersNotSigned).toBe("host");
    });

    it("refuses x-amz-* headers that were not signed", async () => {
      const req = await sdkSigned({ method: "PUT" });
      const err = expectError(
        () => authenticateRequest(withHeaders(req, { "x-amz-copy-source": "/other/secret" }), lookup),
        "AccessDenied",
      );
      expect(err.details.HeadersNotSigned).toBe("x-amz-copy-source");
      // Unsigned ordinary headers are fine (user-agent, content-length, ...).
      expect(
        authenticateRequest(withHeaders(req, { "user-agent": "x", expect: "100-continue" }), lookup),
      ).toBeTruthy();
    });
  });

  describe("auth mechanism", () => {
    it("refuses anonymous requests with AccessDenied", () => {
      const req: SigV4Request = {
        method: "GET",
        rawPath: "/bucket/key",
        rawQuery: "",
        headers: { host: "h" },
        now: T0,
      };
      expectError(() => authenticateRequest(req, lookup), "AccessDenied", 403);
    });

    it("refuses SigV2 query authentication", () => {
      const req: SigV4Request = {
        method: "GET",
        rawPath: "/bucket/key",
        rawQuery: "AWSAccessKeyId=AKIDEXAMPLE&Expires=1&Signature=abc",
        headers: { host: "h" },
        now: T0,
      };
      expectError(() => authenticateRequest(req, lookup), "InvalidRequest", 400);
    });

    it("refuses a header signature combined with presigned parameters", async () => {
      const req = await sdkSigned();
      expectError(
        () => authenticateRequest({ ...req, rawQuery: "X-Amz-Algorithm=AWS4-HMAC-SHA256" }, lookup),
        "InvalidArgument",
        400,
      );
    });
  });

  describe("encodings clients differ on", () => {
    it("accepts a path whose encoding differs from the signed form only in escaping", async () => {
      const req = await sdkSigned({ path: keyPath("bucket", "a~b (c)") });
      expect(req.rawPath).toBe("/bucket/a~b%20%28c%29");
      for (const rawPath of ["/bucket/a%7Eb%20%28c%29", "/bucket/a%7eb%20(c)", "/bucket/a~b%20%28c%29"]) {
        expect(authenticateRequest({ ...req, rawPath }, lookup).accessKeyId).toBe(AKID);
      }
    });

    it("accepts a client that signs its own looser path encoding", () => {
      const amzDate = "20261122T120000Z";
      const rawPath = "/bucket/a:b@c$d+e";
      const canonical = [
        "GET",
        rawPath,
        "",
        "host:localhost\nx-amz-content-sha256:UNSIGNED-PAYLOAD\nx-amz-date:20261122T120000Z\n",
        "host;x-amz-content-sha256;x-amz-date",
        "UNSIGNED-PAYLOAD",
      ].join("\n");
      const req: SigV4Request = {
        method: "GET",
        rawPath,
        rawQuery: "",
        headers: {
          host: "localhost",
          "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
          "x-amz-date": amzDate,
          authorization: `AWS4-HMAC-SHA256 Credential=${AKID}/20261122/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=${handSign(canonical, amzDate)}`,
        },
        now: T0,
      };
      expect(authenticateRequest(req, lookup).accessKeyId).toBe(AKID);
    });

    it("reads a plus sign in the query as the SDK does (%2B) and as form encoders do (space)", async () => {
      // The SDK sends prefix "a b+c" as a%20b%2Bc.
      const sdk = await sdkSigned({ path: "/bucket", query: { prefix: "a b+c" } });
      expect(sdk.rawQuery).toBe("prefix=a%20b%2Bc");
      expect(authenticateRequest(sdk, lookup).accessKeyId).toBe(AKID);
      // A form encoder sends the same value as a+b%2Bc and signs the decoded value.
      expect(authenticateRequest({ ...sdk, rawQuery: "prefix=a+b%2Bc" }, lookup).accessKeyId).toBe(AKID);
      // A literal "+" that was signed as a plus sign.
      const plus = await sdkSigned({ path: "/bucket", query: { prefix: "a+b" } });
      expect(authenticateRequest({ ...plus, rawQuery: "prefix=a+b" }, lookup).accessKeyId).toBe(AKID);
      // But a plus is never a wildcard: "a+b" signed as a space does not verify "a%2Bb".
      const space = await sdkSigned({ path: "/bucket", query: { prefix: "a b" } });
      expectError(
        () => authenticateRequest({ ...space, rawQuery: "prefix=a%2Bb" }, lookup),
        "SignatureDoesNotMatch",
      );
    });

    it("accepts lower-case and unnecessary escapes in the query", async () => {
      const req = await sdkSigned({ path: "/bucket", query: { prefix: "ä/b" } });
      expect(req.rawQuery).toBe("prefix=%C3%A4%2Fb");
      expect(authenticateRequest({ ...req, rawQuery: "prefix=%c3%a4/b" }, lookup).accessKeyId).toBe(AKID);
      expect(authenticateRequest({ ...req, rawQuery: "pr%65fix=%C3%A4%2Fb" }, lookup).accessKeyId).toBe(AKID);
    });
  });
});
