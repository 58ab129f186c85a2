import { describe, expect, it } from "vitest";
import { DomainError } from "../../../src/core/errors.js";
import { authenticateRequest, type SigV4Request } from "../../../src/http/sigv4/sigv4.js";
import { toS3Error } from "../../../src/s3-endpoint/protocol/errors.js";
import { awsEncode, objectPath as keyPath, sigV4Signer } from "../../support/signed-http.js";

const AKID = "AKIDEXAMPLE";
const SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const lookup = (id: string) => (id === AKID ? SECRET : undefined);
const T0 = Date.UTC(2026, 10, 22, 12, 0, 0);

type PresignOptions = {
  method?: string;
  path?: string;
  query?: Record<string, string>;
  headers?: Record<string, string>;
  expiresIn?: number;
  service?: string;
  unhoistable?: string[];
};

/**
 * Presigns like @aws-sdk/s3-request-presigner: it sets X-Amz-Content-Sha256: UNSIGNED-PAYLOAD
 * and the flexible-checksum headers, and the signer hoists x-amz-* headers into the query.
 */
async function presigned(o: PresignOptions = {}): Promise<SigV4Request> {
  const signer = sigV4Signer({
    service: o.service ?? "s3",
    credentials: { accessKeyId: AKID, secretAccessKey: SECRET },
  });
  const method = o.method ?? "PUT";
  const path = o.path ?? "/bucket/key";
  const headers = { host: "localhost:9000", "X-Amz-Content-Sha256": "UNSIGNED-PAYLOAD", ...o.headers };
  const signed = await signer.presign(
    { method, protocol: "http:", hostname: "localhost", port: 9000, path, query: { ...o.query }, headers },
    {
      signingDate: new Date(T0),
      expiresIn: o.expiresIn ?? 900,
      unhoistableHeaders: new Set(o.unhoistable ?? []),
    },
  );
  const rawQuery = Object.entries(signed.query ?? {})
    .map(([k, v]) => `${awsEncode(k)}=${awsEncode(String(v))}`)
    .join("&");
  const sent: Record<string, string> = {};
  for (const [k, v] of Object.entries(signed.headers)) sent[k.toLowerCase()] = v;
  return { method, rawPath: path, rawQuery, headers: sent, now: T0 + 1000 };
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

/** Replaces (or with undefined removes) one query parameter, keeping the raw order. */
function setParam(rawQuery: string, name: string, value: string | undefined): string {
  const parts = rawQuery.split("&").filter((p) => p.split("=")[0] !== name);
  if (value !== undefined) parts.push(`${name}=${value}`);
  return parts.join("&");
}

const param = (rawQuery: string, name: string) =>
  decodeURIComponent(
    rawQuery
      .split("&")
      .find((p) => p.startsWith(`${name}=`))!
      .slice(name.length + 1),
  );

describe("SigV4 presigned URLs", () => {
  it("accepts a presigned PutObject URL with the SDK's checksum and extra query parameters", async () => {
    const req = await presigned({
      path: keyPath("bucket", "dir/with space+plus=eq~tilde/ünï😀"),
      query: { "x-id": "PutObject", "x-fence-token": "42" },
      headers: { "x-amz-checksum-crc32": "AAAAAA==", "x-amz-sdk-checksum-algorithm": "CRC32" },
    });
    expect(req.rawQuery).toContain("x-amz-checksum-crc32=AAAAAA%3D%3D");
    expect(param(req.rawQuery, "X-Amz-SignedHeaders")).toBe("host");
    const auth = authenticateRequest(req, lookup);
    expect(auth).toMatchObject({
      accessKeyId: AKID,
      presigned: true,
      payloadHash: "UNSIGNED-PAYLOAD",
      amzDate: "20261122T120000Z",
      scope: { date: "20261122", region: "us-east-1", service: "s3" },
      seedSignature: param(req.rawQuery, "X-Amz-Signature"),
      signedHeaders: ["host"],
    });
  });

  it("verifies the example of the S3 documentation (no X-Amz-Content-Sha256: UNSIGNED-PAYLOAD)", () => {
    const docSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const rawQuery =
      "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request" +
      "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host" +
      "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";
    const req: SigV4Request = {
      method: "GET",
      rawPath: "/test.txt",
      rawQuery,
      headers: { host: "examplebucket.s3.amazonaws.com" },
      now: Date.UTC(2013, 4, 24, 1),
    };
    const auth = authenticateRequest(req, (id) => (id === "AKIAIOSFODNN7EXAMPLE" ? docSecret : undefined));
    expect(auth.payloadHash).toBe("UNSIGNED-PAYLOAD");
    expectError(
      () => authenticateRequest({ ...req, now: Date.UTC(2013, 4, 25, 0, 0, 1) }, () => docSecret),
      "AccessDenied",
    );
  });

  it("verifies whatever order the parameters arrive in", async () => {
    const req = await presigned({ query: { "x-fence-token": "7", b: "2", a: "1" } });
    const reversed = req.rawQuery.split("&").reverse().join("&");
    expect(authenticateRequest({ ...req, rawQuery: reversed }, lookup).presigned).toBe(true);
  });

  it("verifies headers the URL signed and refuses their absence or change", async () => {
    const req = await presigned({ headers: { "x-amz-meta-owner": "me" }, unhoistable: ["x-amz-meta-owner"] });
    expect(param(req.rawQuery, "X-Amz-SignedHeaders")).toBe("host;x-amz-meta-owner");
    expect(authenticateRequest(req, lookup).signedHeaders).toEqual(["host", "x-amz-meta-owner"]);
    const changed = { ...req, headers: { ...req.headers, "x-amz-meta-owner": "you" } };
    expectError(() => authenticateRequest(changed, lookup), "SignatureDoesNotMatch", 403);
    const { "x-amz-meta-owner": _gone, ...rest } = req.headers;
    expectError(() => authenticateRequest({ ...req, headers: rest }, lookup), "SignatureDoesNotMatch");
  });

  it("refuses x-amz-* headers the URL did not sign", async () => {
    const req = await presigned();
    const err = expectError(
      () => authenticateRequest({ ...req, headers: { ...req.headers, "x-amz-acl": "public-read" } }, lookup),
      "AccessDenied",
      403,
    );
    expect(err.details.HeadersNotSigned).toBe("x-amz-acl");
  });

  describe("expiry", () => {
    it("is valid until X-Amz-Date + X-Amz-Expires and expired after", async () => {
      const req = await presigned({ expiresIn: 900 });
      expect(authenticateRequest({ ...req, now: T0 + 900_000 }, lookup).presigned).toBe(true);
      const err = expectError(
        () => authenticateRequest({ ...req, now: T0 + 900_001 }, lookup),
        "AccessDenied",
        403,
      );
      expect(err.message).toBe("Request has expired");
    });

    it("accepts the maximum of a week", async () => {
      const req = await presigned({ expiresIn: 604800 });
      expect(authenticateRequest({ ...req, now: T0 + 604_800_000 }, lookup).presigned).toBe(true);
    });

    it("refuses a URL dated more than 15 minutes in the future", async () => {
      const req = await presigned();
      expect(authenticateRequest({ ...req, now: T0 - 14 * 60_000 }, lookup).presigned).toBe(true);
      expectError(() => authenticateRequest({ ...req, now: T0 - 16 * 60_000 }, lookup), "AccessDenied");
    });

    it.each(["-1", "-1000", "-99999999999999999999999"])(
      "refuses X-Amz-Expires=%s as expired (403 AccessDenied), as S3 does",
      async (value) => {
        const req = await presigned();
        const rawQuery = setParam(req.rawQuery, "X-Amz-Expires", value);
        const err = expectError(() => authenticateRequest({ ...req, rawQuery }, lookup), "AccessDenied", 403);
        expect(err.message).toBe("Request has expired");
      },
    );

    it.each(["604801", "0", "abc", "1.5", ""])("refuses X-Amz-Expires=%s", async (value) => {
      const req = await presigned();
      const rawQuery = setParam(req.rawQuery, "X-Amz-Expires", value);
      expectError(
        () => authenticateRequest({ ...req, rawQuery }, lookup),
        "AuthorizationQueryParametersError",
        400,
      );
    });

    it("covers X-Amz-Expires by the signature", async () => {
      const req = await presigned({ expiresIn: 900 });
      const rawQuery = setParam(req.rawQuery, "X-Amz-Expires", "3600");
      expectError(() => authenticateRequest({ ...req, rawQuery }, lookup), "SignatureDoesNotMatch");
    });
  });

  describe("parameters", () => {
    it.each([
      "X-Amz-Algorithm",
      "X-Amz-Credential",
      "X-Amz-Date",
      "X-Amz-Expires",
      "X-Amz-SignedHeaders",
      "X-Amz-Signature",
    ])("requires %s", async (name) => {
      const req = await presigned();
      const rawQuery = setParam(req.rawQuery, name, undefined);
      expectError(
        () => authenticateRequest({ ...req, rawQuery }, lookup),
        "AuthorizationQueryParametersError",
        400,
      );
    });

    const malformed: [string, string, string][] = [
      ["X-Amz-Algorithm", "AWS4-HMAC-SHA1", "AuthorizationQueryParametersError"],
      ["X-Amz-Date", "2026-11-22T12:00:00Z", "AuthorizationQueryParametersError"],
      ["X-Amz-Date", "20261122T250000Z", "AuthorizationQueryParametersError"],
      [
        "X-Amz-Credential",
        `${AKID}%2F20261122%2Fus-east-1%2Fec2%2Faws4_request`,
        "AuthorizationQueryParametersError",
      ],
      [
        "X-Amz-Credential",
        `${AKID}%2F20261121%2Fus-east-1%2Fs3%2Faws4_request`,
        "AuthorizationQueryParametersError",
      ],
      ["X-Amz-Credential", `${AKID}%2F20261122%2Fs3%2Faws4_request`, "AuthorizationQueryParametersError"],
      ["X-Amz-Credential", `AKIDUNKNOWN%2F20261122%2Fus-east-1%2Fs3%2Faws4_request`, "InvalidAccessKeyId"],
      ["X-Amz-SignedHeaders", "x-amz-meta-a", "AccessDenied"],
      ["X-Amz-SignedHeaders", "Host", "AuthorizationQueryParametersError"],
    ];
    it.each(malformed)("refuses %s=%s with %s", async (name, value, code) => {
      const req = await presigned();
      const rawQuery = setParam(req.rawQuery, name, value);
      expectError(() => authenticateRequest({ ...req, rawQuery }, lookup), code);
    });

    it("refuses STREAMING-AWS4-HMAC-SHA256-PAYLOAD, which needs a header signature to chain from", async () => {
      const req = await presigned({
        headers: { "X-Amz-Content-Sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" },
      });
      expectError(() => authenticateRequest(req, lookup), "InvalidArgument", 400);
    });
  });

  describe("tampering", () => {
    it("covers every query parameter except X-Amz-Signature", async () => {
      const req = await presigned({ query: { "x-id": "PutObject", "x-fence-token": "42" } });
      for (const rawQuery of [
        setParam(req.rawQuery, "x-fence-token", "43"),
        setParam(req.rawQuery, "x-fence-token", undefined),
        setParam(req.rawQuery, "x-amz-checksum-crc32", "AAAAAA%3D%3D"),
        setParam(req.rawQuery, "x-id", "GetObject"),
        `${req.rawQuery}&versionId=1`,
        setParam(req.rawQuery, "X-Amz-Content-Sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"),
      ]) {
        expectError(() => authenticateRequest({ ...req, rawQuery }, lookup), "SignatureDoesNotMatch", 403);
      }
    });

    it("covers method, path and host", async () => {
      const req = await presigned({ path: keyPath("bucket", "a b") });
      expectError(() => authenticateRequest({ ...req, method: "GET" }, lookup), "SignatureDoesNotMatch");
      expectError(
        () => authenticateRequest({ ...req, rawPath: "/bucket/a%20c" }, lookup),
        "SignatureDoesNotMatch",
      );
      expectError(
        () => authenticateRequest({ ...req, headers: { ...req.headers, host: "other:9000" } }, lookup),
        "SignatureDoesNotMatch",
      );
    });

    it("refuses a changed signature", async () => {
      const req = await presigned();
      const sig = param(req.rawQuery, "X-Amz-Signature");
      const flipped = (sig[0] === "0" ? "1" : "0") + sig.slice(1);
      const rawQuery = setParam(req.rawQuery, "X-Amz-Signature", flipped);
      expectError(() => authenticateRequest({ ...req, rawQuery }, lookup), "SignatureDoesNotMatch");
    });

    it("refuses a changed date", async () => {
      const req = await presigned();
      const rawQuery = setParam(req.rawQuery, "X-Amz-Date", "20261122T120100Z");
      expectError(() => authenticateRequest({ ...req, rawQuery }, lookup), "SignatureDoesNotMatch");
    });
  });
});
