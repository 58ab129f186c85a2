import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { Lease } from "../../src/client/lease-client.js";
import { md5Hex } from "../support/digest.js";
import { TOOLS } from "../support/tools.js";
import {
  bucketLease,
  bucketWithStaleToken,
  clientEnv,
  clientSuite,
  expectAccepted,
  expectCommittedUnderLease,
  expectStaleRejections,
  FIXTURES,
  leaseLostMidUpload,
  MiB,
  type RunResult,
  randomData,
  run,
  type StartedClient,
  start,
  writeFile,
} from "./helpers.js";

/**
 * Debian's python3-boto3 (1.26) against fencegate, through fixtures/boto3_client.py run by
 * /usr/bin/python3 (a pyenv python3 earlier on PATH does not see Debian's packages). With
 * Debian's awscli installed, botocore signs through awscrt; BOTO_DISABLE_CRT=true restores
 * the pure-Python signer. Both are exercised.
 *
 * The token travels as `Metadata={"fence-token": …}` (ExtraArgs for the transfer manager): that
 * covers put_object, copy_object and multipart uploads and copies, whose parts and completion
 * are fenced with the lease the upload was bound to at CreateMultipartUpload. delete_object and
 * delete_objects take no metadata: a before-sign handler adds the `x-fence-token` header.
 */

const PYTHON = TOOLS.boto3.path;
const SCRIPT = join(FIXTURES, "boto3_client.py");

type StepError = {
  code: string;
  status?: number;
  message: string;
  highestToken?: string;
  operation?: string;
};
type StepResult = Record<string, unknown> & {
  error?: StepError;
  crt?: boolean;
  sent?: { op: string; headers: string[] }[];
};

const suite = clientSuite({ tools: ["boto3"], tempPrefix: "fencegate-boto3-" });
const { local } = suite;

const MODES: [string, Record<string, string>, boolean][] = [
  ["awscrt signer, botocore's default here", {}, true],
  ["pure-Python signer, BOTO_DISABLE_CRT=true", { BOTO_DISABLE_CRT: "true" }, false],
];

describe.each(MODES)("boto3 (%s)", (_label, modeEnv, crt) => {
  const bucket = crt ? "boto3-crt" : "boto3-python";
  let lease: Lease;

  /** The arguments and options of the script running one step. */
  function stepCommand(
    name: string,
    args: Record<string, unknown>,
  ): [string, string[], { env: Record<string, string>; timeoutMs: number }] {
    return [
      PYTHON,
      [SCRIPT, name, JSON.stringify({ endpoint: suite.gw.url, bucket, ...args })],
      { env: clientEnv(suite.home, modeEnv), timeoutMs: 90_000 },
    ];
  }

  async function step(name: string, args: Record<string, unknown>): Promise<StepResult> {
    const r = await run(...stepCommand(name, args));
    return parsed(name, r);
  }

  /** A step that reads its data from stdin, which the test feeds. */
  function stepStdin(name: string, args: Record<string, unknown>): StartedClient {
    return start(...stepCommand(name, args));
  }

  /** create_bucket, which must succeed. */
  const createBucket = (name: string) => ok("create_bucket", { bucket: name });

  function parsed(name: string, r: RunResult): StepResult {
    let out: StepResult;
    try {
      out = JSON.parse(r.stdout) as StepResult;
    } catch {
      throw new Error(`boto3 step ${name} printed no result (exit ${r.code}):\n${r.stdout}\n${r.stderr}`);
    }
    expect(out.crt, "which signer botocore used").toBe(crt);
    expect(r.code, JSON.stringify(out.error)).toBe(out.error ? 3 : 0);
    return out;
  }

  async function ok(name: string, args: Record<string, unknown>): Promise<StepResult> {
    const out = await step(name, args);
    expect(out.error, `boto3 step ${name} failed`).toBeUndefined();
    return out;
  }

  async function refused(name: string, args: Record<string, unknown>, code: string): Promise<StepError> {
    const out = await step(name, args);
    expect(out.error, `boto3 step ${name} should have been refused`).toBeDefined();
    expect(out.error!.code).toBe(code);
    return out.error!;
  }

  it("put_object with Metadata={'fence-token': …}, get_object, head_object, list_objects_v2", async () => {
    await createBucket(bucket);
    lease = await bucketLease(suite.gw, bucket);
    const put = await ok("put", {
      key: "docs/a.txt",
      body: "hello boto3\n",
      meta_token: lease.fencingToken,
      metadata: { owner: "py" },
    });
    expect(put.etag).toBe(`"${md5Hex("hello boto3\n")}"`);
    await ok("put", { key: "docs/b.txt", body: "b\n", meta_token: lease.fencingToken });
    await ok("put", { key: "docs/c.txt", body: "c\n", meta_token: lease.fencingToken });

    const got = await ok("get", { key: "docs/a.txt" });
    expect(got).toMatchObject({
      body: "hello boto3\n",
      etag: `"${md5Hex("hello boto3\n")}"`,
      contentType: "text/plain",
      metadata: { owner: "py" },
    });
    const head = await ok("head", { key: "docs/a.txt" });
    expect(head.metadata).toEqual({ owner: "py" });

    // One key per page: the paginator follows NextContinuationToken.
    const list = await ok("list", { prefix: "docs/", page_size: 1 });
    expect(list.objects).toEqual([
      { key: "docs/a.txt", size: 12, etag: `"${md5Hex("hello boto3\n")}"` },
      { key: "docs/b.txt", size: 2, etag: `"${md5Hex("b\n")}"` },
      { key: "docs/c.txt", size: 2, etag: `"${md5Hex("c\n")}"` },
    ]);
    expect(list.pages).toBe(3);
  });

  it("upload_file of 20 MiB (multipart: 8 MiB threshold and parts) with ExtraArgs Metadata alone", async () => {
    const data = randomData(20 * MiB);
    const file = writeFile(local(`${bucket}-big.bin`), data);

    const up = await ok("upload_file", {
      key: "big/20mib.bin",
      file,
      meta_token: lease.fencingToken,
      metadata: { kind: "big" },
    });
    expect(up).toMatchObject({ length: 20 * MiB, metadata: { kind: "big" } });
    expect(up.etag).toMatch(/^"[0-9a-f]{32}-3"$/);
    // Metadata reaches CreateMultipartUpload only; the parts and the completion carry no token.
    const writes = up.sent!.filter((s) => s.op !== "HeadObject");
    expect(writes.map((s) => s.op).sort()).toEqual([
      "CompleteMultipartUpload",
      "CreateMultipartUpload",
      "UploadPart",
      "UploadPart",
      "UploadPart",
    ]);
    for (const s of writes) {
      expect(s.headers).not.toContain("x-fence-token");
      expect(s.headers.includes("x-amz-meta-fence-token")).toBe(s.op === "CreateMultipartUpload");
    }

    await expectCommittedUnderLease(suite.gw, bucket, "big/20mib.bin", lease.token, 3);

    const down = await ok("download_file", {
      key: "big/20mib.bin",
      file: local(`${bucket}-big.down`),
    });
    expect(down.md5).toBe(md5Hex(data));

    // Without a token the upload is refused at once, at CreateMultipartUpload.
    const refusedUpload = await refused(
      "upload_file",
      { key: "big/unfenced.bin", file },
      "FencingTokenRequired",
    );
    expect(refusedUpload.operation).toBe("CreateMultipartUpload");
    expect((await ok("list", { prefix: "big/" })).objects).toEqual([
      expect.objectContaining({ key: "big/20mib.bin", size: 20 * MiB }),
    ]);
  });

  it("copy_object with Metadata (REPLACE); managed copy of 20 MiB (UploadPartCopy) with ExtraArgs Metadata alone", async () => {
    const copy = await ok("copy", {
      source_key: "docs/a.txt",
      key: "copies/a.txt",
      meta_token: lease.fencingToken,
      metadata: { copied: "yes" },
    });
    expect(copy).toMatchObject({ etag: `"${md5Hex("hello boto3\n")}"`, metadata: { copied: "yes" } });
    await refused("copy", { source_key: "docs/a.txt", key: "copies/unfenced.txt" }, "FencingTokenRequired");

    const big = await ok("copy", {
      source_key: "big/20mib.bin",
      key: "copies/20mib.bin",
      managed: true,
      meta_token: lease.fencingToken,
    });
    expect(big.length).toBe(20 * MiB);
    expect(big.etag).toMatch(/-3"$/);
    const partCopies = big.sent!.filter((s) => s.op === "UploadPartCopy");
    expect(partCopies).toHaveLength(3);
    for (const s of partCopies) expect(s.headers).not.toContain("x-fence-token");
    await expectAccepted(suite.gw, { bucket, key: "copies/20mib.bin", op: "UploadPartCopy" }, lease.token, 3);
    await expectAccepted(
      suite.gw,
      { bucket, key: "copies/20mib.bin", op: "CompleteMultipartUpload" },
      lease.token,
    );
    const down = await ok("download_file", {
      key: "copies/20mib.bin",
      file: local(`${bucket}-copy.down`),
    });
    const orig = await ok("download_file", {
      key: "big/20mib.bin",
      file: local(`${bucket}-orig.down`),
    });
    expect(down.md5).toBe(orig.md5);
  });

  it("delete_object: refused without a token, accepted with the x-fence-token header; delete_objects too", async () => {
    const err = await refused("delete", { key: "docs/a.txt" }, "FencingTokenRequired");
    expect(err.status).toBe(428);
    const del = await ok("delete", { key: "docs/a.txt", header_token: lease.fencingToken });
    expect(del.status).toBe(204);
    const multi = await ok("delete_objects", {
      keys: ["docs/b.txt", "docs/c.txt"],
      header_token: lease.fencingToken,
    });
    expect(multi).toMatchObject({ deleted: ["docs/b.txt", "docs/c.txt"], errors: [] });
    expect((await ok("list", { prefix: "docs/" })).objects).toEqual([]);
  });

  it("a stale token is refused with 409 StaleFencingToken (ClientError); the object keeps the newer write", async () => {
    const staleBucket = `${bucket}-stale`;
    const { stale, fresh } = await bucketWithStaleToken(suite.gw, staleBucket, createBucket);
    await ok("put", { bucket: staleBucket, key: "k", body: "fresh", meta_token: fresh.fencingToken });

    const put = await refused(
      "put",
      { bucket: staleBucket, key: "k", body: "stale", meta_token: stale.fencingToken },
      "StaleFencingToken",
    );
    expect(put).toMatchObject({ status: 409, highestToken: String(fresh.token), operation: "PutObject" });
    const del = await refused(
      "delete",
      { bucket: staleBucket, key: "k", header_token: stale.fencingToken },
      "StaleFencingToken",
    );
    expect(del.status).toBe(409);
    // Multipart: refused at CreateMultipartUpload, before any part is sent.
    const file = writeFile(local(`${bucket}-stale-big.bin`), randomData(12 * MiB));
    const mp = await refused(
      "upload_file",
      { bucket: staleBucket, key: "k", file, meta_token: stale.fencingToken },
      "StaleFencingToken",
    );
    expect(mp.operation).toBe("CreateMultipartUpload");
    expect((await ok("get", { bucket: staleBucket, key: "k" })).body).toBe("fresh");
    await expectStaleRejections(suite.gw, staleBucket, stale.token, [
      "PutObject",
      "DeleteObject",
      "CreateMultipartUpload",
    ]);
  });

  it("lease lost during upload_fileobj(stdin) with ExtraArgs Metadata alone: the next part is refused with 409", async () => {
    const lostBucket = `${bucket}-lost`;
    const { result } = await leaseLostMidUpload(suite.gw, {
      bucket: lostBucket,
      key: "stream.bin",
      partSize: 8 * MiB,
      create: createBucket,
      launch: (old) =>
        stepStdin("upload_stdin", { bucket: lostBucket, key: "stream.bin", meta_token: old.fencingToken }),
    });
    const out = parsed("upload_stdin", result);
    expect(out.error).toMatchObject({ code: "StaleFencingToken", operation: "UploadPart" });
  });
});
