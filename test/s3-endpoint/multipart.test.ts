import { randomBytes } from "node:crypto";
import {
  AbortMultipartUploadCommand,
  type CompletedPart,
  CompleteMultipartUploadCommand,
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  ListPartsCommand,
  PutObjectCommand,
  type S3Client,
  UploadPartCommand,
  UploadPartCopyCommand,
} from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AuditRecord } from "../../src/audit/audit-log.js";
import type { Lease } from "../../src/client/lease-client.js";
import { md5Hex } from "../support/digest.js";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import { expectS3Error, signedRequest } from "../support/signed-http.js";

/**
 * Multipart uploads through the real @aws-sdk/client-s3 against an in-process gateway, with
 * the fencing token in the fence-token metadata on CreateMultipartUpload and in an
 * x-fence-token header (added by a middleware, so it is signed) on the other requests.
 */

const MiB = 1024 * 1024;

type Responses = { headers: Record<string, string>[]; last(): Record<string, string> };

describe("multipart uploads through the S3 SDK", () => {
  let gw: TestGateway;
  // The gateway's clock runs with real time; `skip` jumps it forward to expire leases.
  let offset = 0;
  const skip = (ms: number) => {
    offset += ms;
  };
  const bucket = "multipart";
  let plain: S3Client;

  beforeAll(async () => {
    gw = await startTestGateway({ clock: () => Date.now() + offset });
    plain = gw.s3();
    await plain.send(new CreateBucketCommand({ Bucket: bucket }));
  });

  afterAll(async () => {
    await gw?.stop();
  });

  /** A client that sends `token` in x-fence-token and records every response's headers. */
  function client(token: string | null = null): S3Client & { responses: Responses } {
    const c = gw.s3();
    if (token !== null) {
      c.middlewareStack.add(
        (next) => async (args) => {
          (args.request as { headers: Record<string, string> }).headers["x-fence-token"] = token;
          return next(args);
        },
        { step: "build", name: "fenceToken" },
      );
    }
    const headers: Record<string, string>[] = [];
    c.middlewareStack.add(
      (next) => async (args) => {
        const out = await next(args);
        headers.push({ ...(out.response as { headers: Record<string, string> }).headers });
        return out;
      },
      { step: "deserialize", priority: "low", name: "responseHeaders" },
    );
    return Object.assign(c, { responses: { headers, last: () => headers.at(-1)! } });
  }

  const acquire = (key: string, ttlMs = 30_000): Promise<Lease> =>
    gw.leases.acquire({ bucket, key, ttlMs, owner: "multipart-test" });

  /** CreateMultipartUpload carrying the token as fence-token metadata, as metadata-only tools do. */
  async function create(
    key: string,
    lease: Lease | null,
    metadata: Record<string, string> = {},
  ): Promise<string> {
    const out = await plain.send(
      new CreateMultipartUploadCommand({
        Bucket: bucket,
        Key: key,
        ContentType: "application/x-parts",
        Metadata: { ...metadata, ...(lease ? { "fence-token": lease.fencingToken } : {}) },
      }),
    );
    expect(out.UploadId).toBeTruthy();
    return out.UploadId!;
  }

  async function uploadParts(
    c: S3Client,
    key: string,
    uploadId: string,
    bodies: Buffer[],
  ): Promise<CompletedPart[]> {
    const parts: CompletedPart[] = [];
    for (const [i, body] of bodies.entries()) {
      const out = await c.send(
        new UploadPartCommand({
          Bucket: bucket,
          Key: key,
          UploadId: uploadId,
          PartNumber: i + 1,
          Body: body,
        }),
      );
      expect(out.ETag).toBe(`"${md5Hex(body)}"`);
      parts.push({ PartNumber: i + 1, ETag: out.ETag! });
    }
    return parts;
  }

  const completeCommand = (key: string, uploadId: string, parts: CompletedPart[]) =>
    new CompleteMultipartUploadCommand({
      Bucket: bucket,
      Key: key,
      UploadId: uploadId,
      MultipartUpload: { Parts: parts },
    });

  async function body(key: string): Promise<Buffer> {
    const out = await plain.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    return Buffer.from(await out.Body!.transformToByteArray());
  }

  /** The S3 error code and HTTP status of a refused command. */
  async function refusal(promise: Promise<unknown>): Promise<{ code: string; status: number }> {
    const err = (await promise.then(
      () => {
        throw new Error("expected the request to be refused");
      },
      (e: unknown) => e,
    )) as { name: string; Code?: string; $metadata?: { httpStatusCode?: number } };
    return { code: err.Code ?? err.name, status: err.$metadata?.httpStatusCode ?? 0 };
  }

  it("uploads 12 MiB in 5 MiB parts; the object reads back byte for byte", async () => {
    const key = "big/12mib.bin";
    const lease = await acquire(key);
    const c = client(lease.fencingToken);
    const data = randomBytes(12 * MiB);
    const uploadId = await create(key, lease, { purpose: "test" });
    const parts = await uploadParts(c, key, uploadId, [
      data.subarray(0, 5 * MiB),
      data.subarray(5 * MiB, 10 * MiB),
      data.subarray(10 * MiB),
    ]);
    expect(c.responses.last()["x-fence-token-accepted"]).toBe(String(lease.token));

    const done = await c.send(completeCommand(key, uploadId, parts));
    const partMd5s = Buffer.concat(
      [0, 5, 10].map((at) =>
        Buffer.from(md5Hex(data.subarray(at * MiB, Math.min((at + 5) * MiB, data.length))), "hex"),
      ),
    );
    expect(done.ETag).toBe(`"${md5Hex(partMd5s)}-3"`);
    expect(done).toMatchObject({ Bucket: bucket, Key: key });
    expect(done.Location).toContain(`/${bucket}/big/12mib.bin`);
    expect(c.responses.last()["x-fence-token-accepted"]).toBe(String(lease.token));

    expect((await body(key)).equals(data)).toBe(true);
    const head = await plain.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
    expect(head).toMatchObject({
      ContentLength: data.length,
      ETag: done.ETag,
      ContentType: "application/x-parts",
    });
    // The token never becomes user metadata; the other metadata does.
    expect(head.Metadata).toEqual({ purpose: "test" });

    const { records } = (await gw.leases.audit({ bucket, key, limit: "100" })) as { records: AuditRecord[] };
    const writes = records.filter((r) => !r.op.startsWith("Lease"));
    expect(writes.map((r) => [r.op, r.decision, r.token])).toEqual([
      ["CreateMultipartUpload", "accepted", lease.token],
      ["UploadPart", "accepted", lease.token],
      ["UploadPart", "accepted", lease.token],
      ["UploadPart", "accepted", lease.token],
      ["CompleteMultipartUpload", "accepted", lease.token],
    ]);
    expect(writes.every((r) => r.leaseId === lease.leaseId)).toBe(true);
  });

  it("a multipart upload whose lease is lost between CreateMultipartUpload and CompleteMultipartUpload is refused at Complete and leaves the earlier object intact", async () => {
    const key = "acceptance/lost-lease";
    const first = await acquire(key, 2_000);
    const c = client(first.fencingToken);
    await c.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: "the earlier object" }));
    const earlier = await plain.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));

    const uploadId = await create(key, first);
    const parts = await uploadParts(c, key, uploadId, [randomBytes(5 * MiB), Buffer.from("tail")]);

    // The lease is lost: it expires, and another client is granted the key.
    skip(5_000);
    const second = await acquire(key);
    expect(second.token).toBeGreaterThan(first.token);

    const refused = await refusal(c.send(completeCommand(key, uploadId, parts)));
    expect(refused).toEqual({ code: "StaleFencingToken", status: 409 });
    expect((await body(key)).toString()).toBe("the earlier object");
    const after = await plain.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
    expect(after.ETag).toBe(earlier.ETag);

    const { records } = (await gw.leases.audit({ bucket, key, op: "CompleteMultipartUpload" })) as {
      records: AuditRecord[];
    };
    expect(records.map((r) => [r.decision, r.reason, r.token])).toEqual([
      ["rejected", "StaleFencingToken", first.token],
    ]);

    // The stale upload can still be aborted (no lease needed), and is gone afterwards.
    await plain.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: key, UploadId: uploadId }));
    expect(
      await refusal(plain.send(new ListPartsCommand({ Bucket: bucket, Key: key, UploadId: uploadId }))),
    ).toEqual({
      code: "NoSuchUpload",
      status: 404,
    });
    await gw.leases.release(second.leaseId);
  });

  it("refuses Complete with LeaseExpired when the lease expired and nobody took it", async () => {
    const key = "expired/complete";
    const lease = await acquire(key, 2_000);
    const c = client(lease.fencingToken);
    const uploadId = await create(key, lease);
    const parts = await uploadParts(c, key, uploadId, [Buffer.from("only part")]);
    skip(5_000);
    expect(await refusal(c.send(completeCommand(key, uploadId, parts)))).toEqual({
      code: "LeaseExpired",
      status: 409,
    });
    expect(await refusal(plain.send(new HeadObjectCommand({ Bucket: bucket, Key: key })))).toMatchObject({
      status: 404,
    });
  });

  it("refuses UploadPart under a lost lease, and parts carrying another lease's token", async () => {
    const key = "lost/part";
    const first = await acquire(key, 2_000);
    const c = client(first.fencingToken);
    const uploadId = await create(key, first);
    await uploadParts(c, key, uploadId, [Buffer.from("part one")]);

    skip(5_000);
    const partTwo = () =>
      new UploadPartCommand({ Bucket: bucket, Key: key, UploadId: uploadId, PartNumber: 2, Body: "two" });
    expect(await refusal(c.send(partTwo()))).toEqual({ code: "LeaseExpired", status: 409 });

    const second = await acquire(key);
    expect(await refusal(c.send(partTwo()))).toEqual({ code: "StaleFencingToken", status: 409 });
    // The new holder's token is current, but the upload belongs to the old lease.
    expect(await refusal(client(second.fencingToken).send(partTwo()))).toEqual({
      code: "FencingTokenScopeMismatch",
      status: 403,
    });
    // No token at all: the part is fenced with the upload's own (lost) lease.
    expect(await refusal(plain.send(partTwo()))).toEqual({ code: "StaleFencingToken", status: 409 });

    const listed = await plain.send(new ListPartsCommand({ Bucket: bucket, Key: key, UploadId: uploadId }));
    expect(listed.Parts?.map((p) => p.PartNumber)).toEqual([1]);
    const { records } = (await gw.leases.audit({ bucket, key, op: "UploadPart", decision: "rejected" })) as {
      records: AuditRecord[];
    };
    expect(records.map((r) => r.reason)).toEqual([
      "LeaseExpired",
      "StaleFencingToken",
      "FencingTokenScopeMismatch",
      "StaleFencingToken",
    ]);
    await gw.leases.release(second.leaseId);
  });

  it("fences parts and the completion sent without a token with the lease bound at Create", async () => {
    const key = "bound/object";
    const lease = await acquire(key);
    const uploadId = await create(key, lease);
    // As aws s3 cp --metadata, s3cmd and lib-storage's Metadata do: the token on Create only.
    const parts = await uploadParts(plain, key, uploadId, [
      Buffer.alloc(5 * 1024 * 1024, 1),
      Buffer.from("tail"),
    ]);
    const done = await plain.send(completeCommand(key, uploadId, parts));
    expect(done.ETag).toMatch(/-2"$/);
    const { records } = (await gw.leases.audit({ bucket, key, decision: "accepted" })) as {
      records: AuditRecord[];
    };
    expect(records.map((r) => [r.op, r.token, r.leaseId])).toEqual([
      ["LeaseAcquired", lease.token, lease.leaseId],
      ["CreateMultipartUpload", lease.token, lease.leaseId],
      ["UploadPart", lease.token, lease.leaseId],
      ["UploadPart", lease.token, lease.leaseId],
      ["CompleteMultipartUpload", lease.token, lease.leaseId],
    ]);
    await gw.leases.release(lease.leaseId);
  });

  it("refuses CreateMultipartUpload without a token, or with a token below the object's HCT", async () => {
    const key = "create/refused";
    expect(await refusal(create(key, null))).toEqual({ code: "FencingTokenRequired", status: 428 });
    const old = await acquire(key, 2_000);
    skip(5_000);
    const newer = await acquire(key);
    await client(newer.fencingToken).send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: "v" }));
    expect(await refusal(create(key, old))).toEqual({ code: "StaleFencingToken", status: 409 });
    const listed = await plain.send(new ListMultipartUploadsCommand({ Bucket: bucket, Prefix: key }));
    expect(listed.Uploads ?? []).toEqual([]);
    await gw.leases.release(newer.leaseId);
  });

  it("lists parts and uploads, and aborts", async () => {
    const lease = await gw.leases.acquire({ bucket, prefix: "listing/", ttlMs: 30_000 });
    const c = client(lease.fencingToken);
    const a = await create("listing/a", lease);
    const b1 = await create("listing/b", lease);
    const b2 = await create("listing/b", lease);
    await uploadParts(c, "listing/a", a, [Buffer.from("1"), Buffer.from("22"), Buffer.from("333")]);

    const page = await plain.send(
      new ListPartsCommand({ Bucket: bucket, Key: "listing/a", UploadId: a, MaxParts: 2 }),
    );
    expect(page.Parts?.map((p) => [p.PartNumber, p.Size, p.ETag])).toEqual([
      [1, 1, `"${md5Hex(Buffer.from("1"))}"`],
      [2, 2, `"${md5Hex(Buffer.from("22"))}"`],
    ]);
    expect(page).toMatchObject({
      IsTruncated: true,
      NextPartNumberMarker: "2",
      UploadId: a,
      StorageClass: "STANDARD",
    });
    expect(page.Initiator?.DisplayName).toBe("fencegate");
    const rest = await plain.send(
      new ListPartsCommand({ Bucket: bucket, Key: "listing/a", UploadId: a, PartNumberMarker: "2" }),
    );
    expect(rest.Parts?.map((p) => p.PartNumber)).toEqual([3]);
    expect(rest.IsTruncated).toBe(false);

    const uploads = await plain.send(new ListMultipartUploadsCommand({ Bucket: bucket, Prefix: "listing/" }));
    expect(uploads.Uploads?.map((u) => [u.Key, u.UploadId])).toEqual([
      ["listing/a", a],
      ["listing/b", b1],
      ["listing/b", b2],
    ]);
    expect(uploads.Uploads?.[0]?.Initiated).toBeInstanceOf(Date);
    const first = await plain.send(
      new ListMultipartUploadsCommand({ Bucket: bucket, Prefix: "listing/", MaxUploads: 2 }),
    );
    expect(first).toMatchObject({ IsTruncated: true, NextKeyMarker: "listing/b", NextUploadIdMarker: b1 });
    const second = await plain.send(
      new ListMultipartUploadsCommand({
        Bucket: bucket,
        Prefix: "listing/",
        KeyMarker: first.NextKeyMarker!,
        UploadIdMarker: first.NextUploadIdMarker!,
      }),
    );
    expect(second.Uploads?.map((u) => u.UploadId)).toEqual([b2]);
    const grouped = await plain.send(new ListMultipartUploadsCommand({ Bucket: bucket, Delimiter: "/" }));
    expect(grouped.CommonPrefixes?.map((p) => p.Prefix)).toContain("listing/");

    const aborted = await plain.send(
      new AbortMultipartUploadCommand({ Bucket: bucket, Key: "listing/a", UploadId: a }),
    );
    expect(aborted.$metadata.httpStatusCode).toBe(204);
    expect(
      await refusal(
        plain.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: "listing/a", UploadId: a })),
      ),
    ).toEqual({ code: "NoSuchUpload", status: 404 });
    const left = await plain.send(new ListMultipartUploadsCommand({ Bucket: bucket, Prefix: "listing/" }));
    expect(left.Uploads?.map((u) => u.UploadId)).toEqual([b1, b2]);
    await gw.leases.release(lease.leaseId);
  });

  describe("S3's part list rules", () => {
    let lease: Lease;
    let c: S3Client;
    beforeAll(async () => {
      lease = await gw.leases.acquire({ bucket, prefix: "rules/", ttlMs: 60_000 });
      c = client(lease.fencingToken);
    });
    afterAll(async () => {
      await gw.leases.release(lease.leaseId);
    });

    it("EntityTooSmall when a part other than the last is under 5 MiB", async () => {
      const key = "rules/too-small";
      const uploadId = await create(key, lease);
      const parts = await uploadParts(c, key, uploadId, [Buffer.from("small"), Buffer.from("last")]);
      expect(await refusal(c.send(completeCommand(key, uploadId, parts)))).toEqual({
        code: "EntityTooSmall",
        status: 400,
      });
    });

    it("InvalidPart for a wrong ETag or a missing part", async () => {
      const key = "rules/invalid-part";
      const uploadId = await create(key, lease);
      const parts = await uploadParts(c, key, uploadId, [Buffer.from("only")]);
      const wrong = [{ PartNumber: 1, ETag: `"${md5Hex(Buffer.from("other"))}"` }];
      expect(await refusal(c.send(completeCommand(key, uploadId, wrong)))).toEqual({
        code: "InvalidPart",
        status: 400,
      });
      expect(
        await refusal(
          c.send(completeCommand(key, uploadId, [...parts, { PartNumber: 2, ETag: parts[0]!.ETag! }])),
        ),
      ).toEqual({ code: "InvalidPart", status: 400 });
    });

    it("InvalidPartOrder when parts are not ascending", async () => {
      const key = "rules/order";
      const uploadId = await create(key, lease);
      const parts = await uploadParts(c, key, uploadId, [randomBytes(5 * MiB), Buffer.from("two")]);
      expect(await refusal(c.send(completeCommand(key, uploadId, [parts[1]!, parts[0]!])))).toEqual({
        code: "InvalidPartOrder",
        status: 400,
      });
      // The upload is intact: the right order completes it.
      await c.send(completeCommand(key, uploadId, parts));
      expect((await body(key)).length).toBe(5 * MiB + 3);
    });

    it("NoSuchUpload for an unknown upload id", async () => {
      const key = "rules/unknown";
      const unknown = "0".repeat(44);
      expect(
        await refusal(
          c.send(
            new UploadPartCommand({ Bucket: bucket, Key: key, UploadId: unknown, PartNumber: 1, Body: "x" }),
          ),
        ),
      ).toEqual({ code: "NoSuchUpload", status: 404 });
      expect(await refusal(c.send(completeCommand(key, unknown, [{ PartNumber: 1, ETag: '"x"' }])))).toEqual({
        code: "NoSuchUpload",
        status: 404,
      });
    });

    it("InvalidArgument for part numbers outside 1..10000", async () => {
      const key = "rules/part-number";
      const uploadId = await create(key, lease);
      for (const PartNumber of [0, 10_001]) {
        expect(
          await refusal(
            c.send(
              new UploadPartCommand({ Bucket: bucket, Key: key, UploadId: uploadId, PartNumber, Body: "x" }),
            ),
          ),
        ).toEqual({ code: "InvalidArgument", status: 400 });
      }
    });

    it("PreconditionFailed for If-None-Match: * on an existing key", async () => {
      const key = "rules/if-none-match";
      await c.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: "exists" }));
      const uploadId = await create(key, lease);
      const parts = await uploadParts(c, key, uploadId, [Buffer.from("new")]);
      const command = new CompleteMultipartUploadCommand({
        Bucket: bucket,
        Key: key,
        UploadId: uploadId,
        MultipartUpload: { Parts: parts },
        IfNoneMatch: "*",
      });
      expect(await refusal(c.send(command))).toEqual({ code: "PreconditionFailed", status: 412 });
      expect((await body(key)).toString()).toBe("exists");
    });

    it("MalformedXML for garbage, an empty part list or a DOCTYPE", async () => {
      const key = "rules/malformed";
      const uploadId = await create(key, lease);
      await uploadParts(c, key, uploadId, [Buffer.from("x")]);
      for (const xml of [
        "not xml at all",
        "<CompleteMultipartUpload></CompleteMultipartUpload>",
        '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e "boom">]><CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>&e;</ETag></Part></CompleteMultipartUpload>',
        "<CompleteMultipartUpload><Part><PartNumber>one</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>",
      ]) {
        const res = await signedRequest(gw.url, {
          method: "POST",
          path: `/${bucket}/${key}`,
          query: { uploadId },
          headers: { "x-fence-token": lease.fencingToken },
          body: xml,
        });
        expectS3Error(res, "MalformedXML", 400);
      }
    });

    it("copies a byte range of an existing object into a part (UploadPartCopy)", async () => {
      const source = "rules/copy-source";
      const data = randomBytes(6 * MiB);
      await c.send(new PutObjectCommand({ Bucket: bucket, Key: source, Body: data }));
      const key = "rules/copy-target";
      const uploadId = await create(key, lease);
      const copied = await c.send(
        new UploadPartCopyCommand({
          Bucket: bucket,
          Key: key,
          UploadId: uploadId,
          PartNumber: 1,
          CopySource: `${bucket}/${source}`,
          CopySourceRange: `bytes=0-${5 * MiB - 1}`,
        }),
      );
      expect(copied.CopyPartResult?.ETag).toBe(`"${md5Hex(data.subarray(0, 5 * MiB))}"`);
      expect(copied.CopyPartResult?.LastModified).toBeInstanceOf(Date);
      const tail = await c.send(
        new UploadPartCopyCommand({
          Bucket: bucket,
          Key: key,
          UploadId: uploadId,
          PartNumber: 2,
          CopySource: `/${bucket}/${encodeURIComponent(source)}`,
          CopySourceRange: `bytes=${5 * MiB}-${6 * MiB - 1}`,
        }),
      );
      const out = await c.send(
        completeCommand(key, uploadId, [
          { PartNumber: 1, ETag: copied.CopyPartResult!.ETag! },
          { PartNumber: 2, ETag: tail.CopyPartResult!.ETag! },
        ]),
      );
      expect(out.ETag).toMatch(/-2"$/);
      expect((await body(key)).equals(data)).toBe(true);

      const beyond = new UploadPartCopyCommand({
        Bucket: bucket,
        Key: key,
        UploadId: (await create(key, lease)) as string,
        PartNumber: 1,
        CopySource: `${bucket}/${source}`,
        CopySourceRange: `bytes=0-${6 * MiB}`,
      });
      expect(await refusal(c.send(beyond))).toEqual({ code: "InvalidRange", status: 416 });
    });
  });
});

describe("multipart uploads under the optional fencing policy", () => {
  let gw: TestGateway;
  const bucket = "optional";
  beforeAll(async () => {
    gw = await startTestGateway({ env: { FENCEGATE_FENCING: "optional" } });
    await gw.s3().send(new CreateBucketCommand({ Bucket: bucket }));
  });
  afterAll(async () => {
    await gw?.stop();
  });

  it("runs unfenced until a lease covers the key; then the unfenced upload takes no more parts", async () => {
    const s3 = gw.s3();
    const key = "unfenced";
    const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: key }));
    const part = (n: number, client = s3) =>
      client.send(
        new UploadPartCommand({ Bucket: bucket, Key: key, UploadId, PartNumber: n, Body: `part ${n}` }),
      );
    const one = await part(1);

    const lease = await gw.leases.acquire({ bucket, key, ttlMs: 30_000 });
    const code = async (p: Promise<unknown>) =>
      p.then(
        () => "accepted",
        (e: { Code?: string; name: string }) => e.Code ?? e.name,
      );
    // A writer without the lease's token is refused, and the lease's token does not cover an
    // upload that was created without it.
    expect(await code(part(2))).toBe("FencingTokenRequired");
    const withToken = gw.s3();
    withToken.middlewareStack.add(
      (next) => async (args) => {
        (args.request as { headers: Record<string, string> }).headers["x-fence-token"] = lease.fencingToken;
        return next(args);
      },
      { step: "build" },
    );
    expect(await code(part(2, withToken))).toBe("FencingTokenScopeMismatch");
    await gw.leases.release(lease.leaseId);

    const done = await s3.send(
      new CompleteMultipartUploadCommand({
        Bucket: bucket,
        Key: key,
        UploadId,
        MultipartUpload: { Parts: [{ PartNumber: 1, ETag: one.ETag! }] },
      }),
    );
    expect(done.ETag).toMatch(/-1"$/);
    const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    expect(await got.Body!.transformToString()).toBe("part 1");
  });
});
