import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { Lease } from "../../src/client/lease-client.js";
import { md5Hex } from "../support/digest.js";
import { CREDENTIALS } from "../support/gateway.js";
import {
  bucketLease,
  bucketWithStaleToken,
  clientProgram,
  clientSuite,
  expectAccepted,
  expectCommittedUnderLease,
  expectMultipartObject,
  expectRefused,
  expectRefusedAtCreate,
  expectStaleRejections,
  expectSuccess,
  leaseLostMidUpload,
  MiB,
  randomData,
  SYNC_TREE,
  sizes,
  writeFile,
  writeIni,
  writeTree,
} from "./helpers.js";

/**
 * Debian's rclone 1.60 against fencegate (UNSIGNED-PAYLOAD + Content-MD5, then a HEAD to
 * verify). AWS_CA_BUNDLE, which makes rclone fail on these machines, is not in clientEnv.
 *
 * Tokens: `--header-upload "x-amz-meta-fence-token: T"` becomes user metadata of PutObject and
 * CreateMultipartUpload only. That covers uploads, multipart ones included: the gateway binds
 * the upload to the lease of the token given at CreateMultipartUpload and fences the parts and
 * the completion with it. `--header "x-fence-token: T"` goes on every request rclone makes, so
 * it also covers deletes and server-side copies (CopyObject), which --header-upload does not
 * reach.
 */

const BUCKET = "rclone-bucket";

const suite = clientSuite({
  tools: ["rclone"],
  tempPrefix: "fencegate-rclone-",
  setup: ({ gw, local }) =>
    writeIni(local("rclone.conf"), {
      fg: {
        type: "s3",
        provider: "Other",
        access_key_id: CREDENTIALS.accessKeyId,
        secret_access_key: CREDENTIALS.secretAccessKey,
        region: "us-east-1",
        endpoint: gw.url,
        force_path_style: "true",
      },
    }),
});
const { local } = suite;
const RCLONE = clientProgram(suite, {
  tool: "rclone",
  // One attempt each: a retry must not hide a refused or failed request.
  leading: () => ["--config", local("rclone.conf"), "--retries", "1", "--low-level-retries", "1"],
});

let lease: Lease;

const rclone = (args: string[]) => RCLONE.run(args);

const uploadToken = (token: string) => ["--header-upload", `x-amz-meta-fence-token: ${token}`];
const everyRequestToken = (token: string) => ["--header", `x-fence-token: ${token}`];
/** 5 MiB parts from 5 MiB on: a 12 MiB file is a 3-part upload. */
const multipart = ["--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M"];

/** `rclone copy|sync FLAGS… LOCAL REMOTE`: uploads the local directory `dir`. */
const upload = (verb: "copy" | "sync", flags: string[], dir: string, remote: string) =>
  rclone([verb, ...flags, local(dir), remote]);

/** `rclone mkdir` of a bucket, which must succeed. */
const mkdir = async (bucket: string) =>
  expectSuccess(await rclone(["mkdir", `fg:${bucket}`]), "rclone mkdir");

/** `rclone check` of a local directory against a remote path, which must find them equal. */
const check = async (dir: string, remote: string, what = "rclone check") =>
  expectSuccess(await rclone(["check", local(dir), remote]), what);

/** Copies a remote path down into the local directory `dir`, whose `file` must then hold `data`. */
async function expectCopiesBack(remote: string, dir: string, file: string, data: Buffer): Promise<void> {
  expectSuccess(await rclone(["copy", remote, local(dir)]), "rclone copy (download)");
  expect(md5Hex(readFileSync(local(`${dir}/${file}`)))).toBe(md5Hex(data));
}

/** `rclone ls` of a path in BUCKET, as name -> size. */
async function listing(path: string): Promise<Record<string, number>> {
  const ls = expectSuccess(await rclone(["ls", `fg:${BUCKET}/${path}`]), "rclone ls");
  const out: Record<string, number> = {};
  for (const line of ls.stdout.split("\n")) {
    const m = /^\s*(\d+) (.+)$/.exec(line);
    if (m) out[m[2]!] = Number(m[1]);
  }
  return out;
}

describe("rclone", () => {
  it("mkdir creates the bucket; lsd lists it", async () => {
    await mkdir(BUCKET);
    const lsd = expectSuccess(await rclone(["lsd", "fg:"]), "rclone lsd");
    expect(lsd.stdout).toMatch(new RegExp(`\\s${BUCKET}$`, "m"));
    lease = await bucketLease(suite.gw, BUCKET);
  });

  it("copy with --header-upload; md5sum and check (MD5 from the ETag) agree with the file", async () => {
    const data = randomData(2 * MiB + 5);
    writeFile(local("one/file.bin"), data);
    const copy = await upload("copy", ["-v", ...uploadToken(lease.fencingToken)], "one", `fg:${BUCKET}/one`);
    expectSuccess(copy, "rclone copy");
    expect(copy.stderr).toContain("file.bin: Copied (new)");

    const md5sum = expectSuccess(await rclone(["md5sum", `fg:${BUCKET}/one`]), "rclone md5sum");
    expect(md5sum.stdout.trim()).toBe(`${md5Hex(data)}  file.bin`);
    await check("one", `fg:${BUCKET}/one`);

    await expectCopiesBack(`fg:${BUCKET}/one`, "one-back", "file.bin", data);
  });

  it("sync of a directory tree; ls/lsl list it; a second sync copies nothing", async () => {
    writeTree(local("tree"), SYNC_TREE);
    const syncUp = () =>
      upload("sync", ["-v", ...uploadToken(lease.fencingToken)], "tree", `fg:${BUCKET}/tree`);
    const sync = await syncUp();
    expectSuccess(sync, "rclone sync");
    expect(sync.stderr.match(/Copied \(new\)/g)).toHaveLength(Object.keys(SYNC_TREE).length);

    expect(await listing("tree")).toEqual(sizes(SYNC_TREE));
    // lsl shows the modification time rclone keeps in x-amz-meta-mtime.
    const lsl = expectSuccess(await rclone(["lsl", `fg:${BUCKET}/tree`]), "rclone lsl");
    expect(lsl.stdout).toMatch(/^\s+6 \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ a\.txt$/m);
    const lsd = expectSuccess(await rclone(["lsd", `fg:${BUCKET}/tree`]), "rclone lsd");
    expect(lsd.stdout).toMatch(/ ünï cödé$/m);

    const again = await syncUp();
    expectSuccess(again, "rclone sync (unchanged)");
    expect(again.stderr).not.toContain("Copied");
    await check("tree", `fg:${BUCKET}/tree`);
  });

  it("delete without a token is refused with FencingTokenRequired", async () => {
    const del = await rclone(["deletefile", `fg:${BUCKET}/tree/a.txt`]);
    expectRefused(del, "FencingTokenRequired", "rclone deletefile without a token");
    expect(await listing("tree")).toHaveProperty(["a.txt"]);
  });

  it("delete and sync (with deletions) work with --header x-fence-token", async () => {
    const del = await rclone([
      "deletefile",
      ...everyRequestToken(lease.fencingToken),
      `fg:${BUCKET}/tree/a.txt`,
    ]);
    expectSuccess(del, "rclone deletefile --header");
    expect(await listing("tree")).not.toHaveProperty(["a.txt"]);

    rmSync(join(local("tree"), "b.txt"));
    writeFile(join(local("tree"), "new.txt"), "november\n");
    const sync = await upload(
      "sync",
      ["-v", ...everyRequestToken(lease.fencingToken)],
      "tree",
      `fg:${BUCKET}/tree`,
    );
    expectSuccess(sync, "rclone sync --header");
    expect(sync.stderr).toContain("b.txt: Deleted");
    expect(sync.stderr).toContain("new.txt: Copied (new)");
    expect(sync.stderr).toContain("a.txt: Copied (new)");
    const expected: Record<string, string> = { ...SYNC_TREE, "new.txt": "november\n" };
    delete expected["b.txt"];
    expect(await listing("tree")).toEqual(sizes(expected));

    const purge = await rclone([
      "delete",
      ...everyRequestToken(lease.fencingToken),
      `fg:${BUCKET}/tree/nested`,
    ]);
    expectSuccess(purge, "rclone delete --header");
    expect(Object.keys(await listing("tree")).filter((k) => k.startsWith("nested/"))).toEqual([]);
  });

  it("server-side copyto/moveto need --header: --header-upload does not reach CopyObject", async () => {
    const refused = await rclone([
      "copyto",
      ...uploadToken(lease.fencingToken),
      `fg:${BUCKET}/tree/index.html`,
      `fg:${BUCKET}/copies/index.html`,
    ]);
    expectRefused(refused, "FencingTokenRequired", "rclone copyto --header-upload");
    const copy = await rclone([
      "copyto",
      ...everyRequestToken(lease.fencingToken),
      `fg:${BUCKET}/tree/index.html`,
      `fg:${BUCKET}/copies/index.html`,
    ]);
    expectSuccess(copy, "rclone copyto --header");
    const move = await rclone([
      "moveto",
      ...everyRequestToken(lease.fencingToken),
      `fg:${BUCKET}/copies/index.html`,
      `fg:${BUCKET}/moved/index.html`,
    ]);
    expectSuccess(move, "rclone moveto --header");
    expect(await listing("")).toMatchObject({ "moved/index.html": SYNC_TREE["index.html"]!.length });
    expect(await listing("")).not.toHaveProperty(["copies/index.html"]);
    await expectAccepted(
      suite.gw,
      { bucket: BUCKET, key: "moved/index.html", op: "CopyObject" },
      lease.token,
    );
  });

  it("multipart upload of 12 MiB with --header-upload alone: committed under the lease; --header works too", async () => {
    const data = randomData(12 * MiB);
    writeFile(local("big/big.bin"), data);
    const copy = await upload(
      "copy",
      [...multipart, ...uploadToken(lease.fencingToken)],
      "big",
      `fg:${BUCKET}/big`,
    );
    expectSuccess(copy, "rclone copy (multipart, --header-upload)");
    await expectCommittedUnderLease(suite.gw, BUCKET, "big/big.bin", lease.token, 3);
    await expectMultipartObject(suite.gw, BUCKET, "big/big.bin", 3, 12 * MiB);
    // rclone keeps the whole file's MD5 in metadata for multipart uploads, and check uses it.
    await check("big", `fg:${BUCKET}/big`, "rclone check (multipart)");
    await expectCopiesBack(`fg:${BUCKET}/big`, "big-back", "big.bin", data);

    // The header on every request is the upload's own token on each part: accepted as well.
    const every = await upload(
      "copy",
      [...multipart, ...everyRequestToken(lease.fencingToken)],
      "big",
      `fg:${BUCKET}/big-header`,
    );
    expectSuccess(every, "rclone copy (multipart, --header)");
    await expectAccepted(
      suite.gw,
      { bucket: BUCKET, key: "big-header/big.bin", op: "CompleteMultipartUpload" },
      lease.token,
    );
    await check("big", `fg:${BUCKET}/big-header`, "rclone check (--header)");
  });

  it("multipart upload without a token is refused at CreateMultipartUpload", async () => {
    const refused = await upload("copy", multipart, "big", `fg:${BUCKET}/big-unfenced`);
    expectRefused(refused, "FencingTokenRequired", "rclone copy (multipart, no token)");
    await expectRefusedAtCreate(suite.gw, BUCKET, "big-unfenced/big.bin");
  });

  it("a stale token is refused with StaleFencingToken; the object keeps the newer write", async () => {
    const bucket = "rclone-stale";
    const { stale, fresh } = await bucketWithStaleToken(suite.gw, bucket, mkdir);
    writeFile(local("fresh/k.txt"), "fresh\n");
    writeFile(local("stale/k.txt"), "stale!\n");
    expectSuccess(
      await upload("copy", uploadToken(fresh.fencingToken), "fresh", `fg:${bucket}`),
      "rclone copy (fresh token)",
    );
    const put = await upload("copy", uploadToken(stale.fencingToken), "stale", `fg:${bucket}`);
    expectRefused(put, "StaleFencingToken", "rclone copy (stale token)");
    expect(put.stderr).toContain("409");
    // Multipart: refused at CreateMultipartUpload, before any part is sent.
    writeFile(local("stale-big/k.txt"), randomData(12 * MiB));
    const mp = await upload(
      "copy",
      [...multipart, ...uploadToken(stale.fencingToken)],
      "stale-big",
      `fg:${bucket}`,
    );
    expectRefused(mp, "StaleFencingToken", "rclone copy (multipart, stale token)");
    expect(mp.stderr).toContain("409");
    const del = await rclone(["deletefile", ...everyRequestToken(stale.fencingToken), `fg:${bucket}/k.txt`]);
    expectRefused(del, "StaleFencingToken", "rclone deletefile (stale token)");
    expect(expectSuccess(await rclone(["cat", `fg:${bucket}/k.txt`]), "rclone cat").stdout).toBe("fresh\n");
    await expectStaleRejections(suite.gw, bucket, stale.token, [
      "PutObject",
      "CreateMultipartUpload",
      "DeleteObject",
    ]);
  });

  it("lease lost during rcat (stdin, multipart, --header-upload alone): the next part is refused with 409", async () => {
    const b = "rclone-lost";
    const { result } = await leaseLostMidUpload(suite.gw, {
      bucket: b,
      key: "stream.bin",
      partSize: 5 * MiB,
      create: mkdir,
      launch: (old) =>
        // rclone reading its data from stdin (`rcat`), which the test feeds.
        RCLONE.start([
          "rcat",
          "--s3-chunk-size",
          "5M",
          ...uploadToken(old.fencingToken),
          `fg:${b}/stream.bin`,
        ]),
    });
    expect(result.stderr).toContain("409");
  });
});
