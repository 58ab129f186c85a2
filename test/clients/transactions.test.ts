import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { md5Hex } from "../support/digest.js";
import { TOOLS } from "../support/tools.js";
import { api, getBody, openTransaction } from "../transactions/support.js";
import {
  bucketLease,
  clientEnv,
  clientProgram,
  clientSuite,
  expectSuccess,
  FIXTURES,
  MiB,
  randomData,
  run,
  writeFile,
} from "./helpers.js";

/**
 * Standard S3 clients stage writes in a fenced transaction with nothing but metadata: aws cli's
 * `--metadata fence-token=…,fence-transaction=…` (a single PUT, and a 20 MiB multipart upload
 * whose parts and completion carry no metadata: the upload stays in the transaction it was
 * created in), and boto3's `Metadata={"fence-token": …, "fence-transaction": …}`. Nothing is
 * visible until the commit; then everything is.
 */

const BUCKET = "tx-clients";
const suite = clientSuite({ tools: ["aws", "boto3"], tempPrefix: "fencegate-tx-clients-" });
const { local } = suite;
const AWS = clientProgram(suite, { tool: "aws" });
const aws = (args: string[]) =>
  AWS.run(["--endpoint-url", suite.gw.url, "--no-cli-pager", ...args], {
    AWS_CONFIG_FILE: join(suite.home, "no-config"),
  });

async function boto3(step: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const r = await run(
    TOOLS.boto3.path,
    [
      join(FIXTURES, "boto3_client.py"),
      step,
      JSON.stringify({ endpoint: suite.gw.url, bucket: BUCKET, ...args }),
    ],
    { env: clientEnv(suite.home), timeoutMs: 90_000 },
  );
  expectSuccess(r, `boto3 ${step}`);
  return JSON.parse(r.stdout) as Record<string, unknown>;
}

describe("standard clients in a fenced transaction", () => {
  it("aws cli and boto3 stage with metadata alone; the commit makes everything visible at once", async () => {
    expectSuccess(await aws(["s3", "mb", `s3://${BUCKET}`]), "aws s3 mb");
    const lease = await bucketLease(suite.gw, BUCKET);
    const tx = await openTransaction(suite.gw, lease.leaseId);
    const meta = ["--metadata", `fence-token=${lease.fencingToken},fence-transaction=${tx.transactionId}`];

    writeFile(local("small.txt"), "small file\n");
    const big = randomData(20 * MiB);
    writeFile(local("big.bin"), big);
    expectSuccess(
      await aws(["s3", "cp", "--no-progress", local("small.txt"), `s3://${BUCKET}/out/small.txt`, ...meta]),
      "aws s3 cp small",
    );
    expectSuccess(
      await aws(["s3", "cp", "--no-progress", local("big.bin"), `s3://${BUCKET}/out/big.bin`, ...meta]),
      "aws s3 cp big (multipart)",
    );
    const txMeta = { meta_token: lease.fencingToken, metadata: { "fence-transaction": tx.transactionId } };
    await boto3("put", { key: "out/boto3.txt", body: "from boto3", ...txMeta });
    writeFile(local("boto3-big.bin"), big);
    // upload_file reads the object back with head_object after the upload: not there yet.
    const upload = await run(
      TOOLS.boto3.path,
      [
        join(FIXTURES, "boto3_client.py"),
        "upload_file",
        JSON.stringify({
          endpoint: suite.gw.url,
          bucket: BUCKET,
          key: "out/boto3-big.bin",
          file: local("boto3-big.bin"),
          ...txMeta,
        }),
      ],
      { env: clientEnv(suite.home), timeoutMs: 90_000 },
    );
    expect(`${upload.stdout}${upload.stderr}`).toMatch(/404|Not Found|NoSuchKey/);

    for (const key of ["out/small.txt", "out/big.bin", "out/boto3.txt", "out/boto3-big.bin"]) {
      expect(await getBody(suite.gw, BUCKET, key), key).toBeNull();
    }
    const state = await api(suite.gw, "GET", `/transactions/${tx.transactionId}`);
    expect((state.json.objects as { key: string }[]).map((o) => o.key).sort()).toEqual([
      "out/big.bin",
      "out/boto3-big.bin",
      "out/boto3.txt",
      "out/small.txt",
    ]);

    const commit = await api(suite.gw, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(commit.status, commit.text).toBe(200);
    expect(await getBody(suite.gw, BUCKET, "out/small.txt")).toBe("small file\n");
    expect(await getBody(suite.gw, BUCKET, "out/boto3.txt")).toBe("from boto3");
    for (const key of ["out/big.bin", "out/boto3-big.bin"]) {
      const got = await boto3("download_file", { key, file: local("back.bin") });
      expect(got.md5, key).toBe(md5Hex(big));
      // The fence metadata was never stored.
      expect((await boto3("head", { key })).metadata, key).toEqual({});
    }
    await suite.gw.leases.release(lease.leaseId);
  }, 180_000);
});
