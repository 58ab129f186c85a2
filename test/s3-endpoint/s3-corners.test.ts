import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { promisify } from "node:util";
import {
  CreateBucketCommand,
  GetBucketLocationCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  type S3Client,
} from "@aws-sdk/client-s3";
import { getSignedUrl } from "@aws-sdk/s3-request-presigner";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import {
  expectS3Error,
  rawRequest,
  signatureOf,
  signedRequest,
  signingKey,
  signRequest,
} from "../support/signed-http.js";
import { requireTools, TOOLS } from "../support/tools.js";

/**
 * Corners where a public S3 conformance suite and a hostile-input corpus saw fencegate answer
 * differently from Amazon S3 (issue 24). Fencing is optional here: these are protocol questions.
 */

let gw: TestGateway;
let s3: S3Client;

beforeAll(async () => {
  gw = await startTestGateway({ env: { FENCEGATE_FENCING: "optional" } });
  s3 = gw.s3();
});

afterAll(async () => {
  s3?.destroy();
  await gw?.stop();
});

const errorOf = async (p: Promise<unknown>) => {
  try {
    await p;
  } catch (e) {
    const err = e as { name: string; $metadata?: { httpStatusCode?: number } };
    return { name: err.name, status: err.$metadata?.httpStatusCode };
  }
  throw new Error("expected the call to fail");
};

describe("CreateBucket of a bucket the caller already owns", () => {
  it("answers 200 and changes nothing in us-east-1 (S3's legacy behaviour there)", async () => {
    await s3.send(new CreateBucketCommand({ Bucket: "owned-twice" }));
    await s3.send(new PutObjectCommand({ Bucket: "owned-twice", Key: "kept", Body: "still here" }));
    const again = await s3.send(new CreateBucketCommand({ Bucket: "owned-twice" }));
    expect(again.$metadata.httpStatusCode).toBe(200);
    const got = await s3.send(new GetObjectCommand({ Bucket: "owned-twice", Key: "kept" }));
    expect(await got.Body!.transformToString()).toBe("still here");
  });

  it("answers 409 BucketAlreadyOwnedByYou when the gateway's region is another one", async () => {
    const other = await startTestGateway({
      env: { FENCEGATE_FENCING: "optional", FENCEGATE_REGION: "eu-west-1" },
    });
    const client = other.s3({ region: "eu-west-1" });
    try {
      await client.send(new CreateBucketCommand({ Bucket: "owned-elsewhere" }));
      expect(await errorOf(client.send(new CreateBucketCommand({ Bucket: "owned-elsewhere" })))).toEqual({
        name: "BucketAlreadyOwnedByYou",
        status: 409,
      });
    } finally {
      client.destroy();
      await other.stop();
    }
  });
});

describe("CreateBucket with a LocationConstraint", () => {
  const location = async (client: S3Client, bucket: string) =>
    (await client.send(new GetBucketLocationCommand({ Bucket: bucket }))).LocationConstraint;

  it("keeps the constraint and GetBucketLocation returns exactly it", async () => {
    await s3.send(
      new CreateBucketCommand({
        Bucket: "located-default",
        CreateBucketConfiguration: { LocationConstraint: "default" as never },
      }),
    );
    expect(await location(s3, "located-default")).toBe("default");
    await s3.send(new CreateBucketCommand({ Bucket: "located-none" }));
    expect(await location(s3, "located-none")).toBeUndefined();
    await s3.send(
      new CreateBucketCommand({
        Bucket: "located-us-east-1",
        CreateBucketConfiguration: { LocationConstraint: "us-east-1" as never },
      }),
    );
    expect(await location(s3, "located-us-east-1")).toBeUndefined();
  });

  it("accepts the configured region, keeps it across a restart, and refuses other regions", async () => {
    const other = await startTestGateway({
      env: { FENCEGATE_FENCING: "optional", FENCEGATE_REGION: "eu-west-1" },
    });
    let client = other.s3({ region: "eu-west-1" });
    try {
      await client.send(
        new CreateBucketCommand({
          Bucket: "located-eu",
          CreateBucketConfiguration: { LocationConstraint: "eu-west-1" },
        }),
      );
      expect(await location(client, "located-eu")).toBe("eu-west-1");
      expect(
        await errorOf(
          client.send(
            new CreateBucketCommand({
              Bucket: "located-far",
              CreateBucketConfiguration: { LocationConstraint: "ap-south-1" },
            }),
          ),
        ),
      ).toEqual({ name: "IllegalLocationConstraintException", status: 400 });
      expect(
        await errorOf(
          client.send(
            new CreateBucketCommand({
              Bucket: "located-bogus",
              CreateBucketConfiguration: { LocationConstraint: "not a region" as never },
            }),
          ),
        ),
      ).toEqual({ name: "InvalidLocationConstraint", status: 400 });
      client.destroy();
      await other.close();
      const again = await startTestGateway({
        dataDir: other.dataDir,
        env: { FENCEGATE_FENCING: "optional", FENCEGATE_REGION: "eu-west-1" },
      });
      client = again.s3({ region: "eu-west-1" });
      try {
        expect(await location(client, "located-eu")).toBe("eu-west-1");
      } finally {
        await again.close();
      }
    } finally {
      client.destroy();
      await other.stop();
    }
  });
});

describe("a presigned PUT whose expiry has passed", () => {
  it("is refused with 403 AccessDenied (Request has expired) and writes nothing", async () => {
    await s3.send(new CreateBucketCommand({ Bucket: "presigned-expired" }));
    const url = await getSignedUrl(s3, new PutObjectCommand({ Bucket: "presigned-expired", Key: "late" }), {
      expiresIn: -1000,
    });
    expect(url).toContain("X-Amz-Expires=-1000");
    const res = await fetch(url, { method: "PUT", body: "too late" });
    const text = await res.text();
    expect(res.status, text).toBe(403);
    expect(text).toContain("<Code>AccessDenied</Code>");
    expect(text).toContain("Request has expired");
    expect(
      await errorOf(s3.send(new HeadObjectCommand({ Bucket: "presigned-expired", Key: "late" }))),
    ).toEqual({
      name: "NotFound",
      status: 404,
    });
  });
});

describe("Expect other than 100-continue", () => {
  it("is answered 417 ExpectationFailed in S3 XML, and the body is not processed", async () => {
    await s3.send(new CreateBucketCommand({ Bucket: "expectations" }));
    const req = await signRequest(gw.url, {
      method: "PUT",
      path: "/expectations/unexpected",
      headers: { expect: "200-ok" },
      body: "must not be stored",
    });
    const res = await rawRequest(gw.url, req);
    expectS3Error(res, "ExpectationFailed", 417);
    expect(res.headers["x-amz-request-id"]).toMatch(/^[0-9A-F]{16}$/);
    const head = await signedRequest(gw.url, { method: "HEAD", path: "/expectations/unexpected" });
    expect(head.status).toBe(404);
  });

  it("still serves Expect: 100-continue", async () => {
    const req = await signRequest(gw.url, {
      method: "PUT",
      path: "/expectations/continued",
      headers: { expect: "100-continue" },
      body: "stored",
    });
    expect((await rawRequest(gw.url, req)).status).toBe(200);
  });
});

describe("user metadata with non-ASCII bytes in the header", () => {
  requireTools("boto3");

  beforeAll(async () => {
    await s3.send(new CreateBucketCommand({ Bucket: "meta-bytes" }));
  });

  /**
   * boto3 as a conformance suite drives it: a str with é put into the request's headers. This
   * botocore (Debian's 1.29) sends and signs the str's UTF-8 bytes and reads response headers as
   * latin-1, so the bytes it gets back are `got.encode("latin-1")`: they must be the bytes it sent.
   */
  const BOTO3 = `
import json, os, sys, boto3, botocore.compat
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=os.environ["ENDPOINT"], region_name="us-east-1",
    aws_access_key_id="fencegate", aws_secret_access_key="fencegate-secret",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
def set_unicode_metadata(**kwargs):
    kwargs["params"]["headers"]["x-amz-meta-meta1"] = u"Hello World\\xe9"
s3.meta.events.register("before-call.s3.PutObject", set_unicode_metadata)
s3.put_object(Bucket="meta-bytes", Key=sys.argv[1], Body="bar")
got = s3.get_object(Bucket="meta-bytes", Key=sys.argv[1])["Metadata"]["meta1"]
print(json.dumps({"sent": u"Hello World\\xe9".encode("utf-8").hex(), "got": got.encode("latin-1").hex(), "crt": botocore.compat.HAS_CRT}))
`;

  it.each([
    ["awscrt signer", {}],
    ["pure-Python signer", { BOTO_DISABLE_CRT: "true" }],
  ])("stores and returns what boto3 sends byte for byte (%s)", async (_mode, extra) => {
    const key = `boto3-${Object.keys(extra).length}`;
    // Asynchronously: the gateway runs in this process.
    const run = await promisify(execFile)(TOOLS.boto3.path, ["-c", BOTO3, key], {
      env: { PATH: "/usr/bin:/bin", LANG: "C.UTF-8", ENDPOINT: gw.url, ...extra },
      encoding: "utf8",
      timeout: 60_000,
    }).catch((e: { stderr?: string; message: string }) => {
      throw new Error(`boto3 failed: ${e.stderr?.slice(-1500) ?? e.message}`);
    });
    const { sent, got } = JSON.parse(run.stdout) as { sent: string; got: string };
    expect(Buffer.from(sent, "hex").toString("utf8")).toBe("Hello World\u00e9");
    expect(got).toBe(sent);
  });

  /** A PUT signed over the header bytes exactly as sent (what a byte-level client does). */
  async function putWithRawHeader(key: string, value: Buffer): Promise<number> {
    const url = new URL(gw.url);
    const amzDate = new Date()
      .toISOString()
      .replace(/[-:]/g, "")
      .replace(/\.\d{3}/, "");
    const date = amzDate.slice(0, 8);
    const body = Buffer.from("bytes");
    const payloadHash = createHash("sha256").update(body).digest("hex");
    const headers: Array<[string, Buffer]> = [
      ["host", Buffer.from(url.host)],
      ["x-amz-content-sha256", Buffer.from(payloadHash)],
      ["x-amz-date", Buffer.from(amzDate)],
      ["x-amz-meta-raw", value],
    ];
    const path = `/meta-bytes/${key}`;
    const canonical = Buffer.concat([
      Buffer.from(`PUT\n${path}\n\n`),
      ...headers.map(([name, v]) => Buffer.concat([Buffer.from(`${name}:`), v, Buffer.from("\n")])),
      Buffer.from(`\n${headers.map(([n]) => n).join(";")}\n${payloadHash}`),
    ]);
    const scope = `${date}/us-east-1/s3/aws4_request`;
    const stringToSign = `AWS4-HMAC-SHA256\n${amzDate}\n${scope}\n${createHash("sha256").update(canonical).digest("hex")}`;
    const signature = signatureOf(signingKey("fencegate-secret", date), stringToSign);
    const res = await rawRequest(gw.url, {
      method: "PUT",
      path,
      headers: {
        ...Object.fromEntries(headers.map(([n, v]) => [n, v.toString("latin1")])),
        "content-length": String(body.length),
        authorization: `AWS4-HMAC-SHA256 Credential=fencegate/${scope}, SignedHeaders=${headers.map(([n]) => n).join(";")}, Signature=${signature}`,
      },
      body,
    });
    expect(res.status, res.text).toBe(200);
    return res.status;
  }

  const returnedBytes = async (key: string): Promise<Buffer> => {
    const got = await signedRequest(gw.url, { method: "GET", path: `/meta-bytes/${key}` });
    expect(got.status).toBe(200);
    const head = await signedRequest(gw.url, { method: "HEAD", path: `/meta-bytes/${key}` });
    expect(head.headers["x-amz-meta-raw"]).toBe(got.headers["x-amz-meta-raw"]);
    // node:http reads header values as latin1: one character per byte received.
    return Buffer.from(String(got.headers["x-amz-meta-raw"]), "latin1");
  };

  it("returns raw UTF-8 and latin-1 header bytes exactly as received (signed over those bytes)", async () => {
    const utf8 = Buffer.from("Zürich 日本", "utf8");
    await putWithRawHeader("utf8", utf8);
    expect((await returnedBytes("utf8")).equals(utf8)).toBe(true);
    const latin1 = Buffer.from("Hello World\u00e9", "latin1");
    await putWithRawHeader("latin1", latin1);
    expect((await returnedBytes("latin1")).equals(latin1)).toBe(true);
  });

  it("keeps RFC 2047 encoded-words working: what is sent is what comes back", async () => {
    const word = "=?UTF-8?B?WsO8cmljaA==?=";
    await s3.send(
      new PutObjectCommand({ Bucket: "meta-bytes", Key: "rfc2047", Body: "x", Metadata: { raw: word } }),
    );
    const head = await s3.send(new HeadObjectCommand({ Bucket: "meta-bytes", Key: "rfc2047" }));
    expect(head.Metadata?.raw).toBe(word);
  });
});
