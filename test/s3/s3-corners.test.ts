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
import { expectS3Error, rawRequest, signedRequest, signRequest } from "../support/signed-http.js";

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
