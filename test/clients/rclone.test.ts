import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { HeadObjectCommand } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Lease } from "../../src/client/lease-client.js";
import { startTestGateway, type TestGateway, tempDir } from "../support/gateway.js";
import {
  auditRecords,
  bucketLease,
  clientEnv,
  expectRefused,
  expectSuccess,
  MiB,
  md5Hex,
  randomData,
  requireExecutable,
  run,
  SYNC_TREE,
  sizes,
  start,
  supersededLeases,
  uploadAcrossTakeOver,
  writeFile,
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

const RCLONE = "/usr/bin/rclone";
const BUCKET = "rclone-bucket";

let gw: TestGateway;
let tmp: { path: string; cleanup(): void };
let lease: Lease;

/** One attempt each: a retry must not hide a refused or failed request. */
const rcloneArgs = (args: string[]) => [
  "--config",
  join(tmp.path, "rclone.conf"),
  "--retries",
  "1",
  "--low-level-retries",
  "1",
  ...args,
];

function rclone(args: string[]) {
  requireExecutable(RCLONE, "rclone");
  return run(RCLONE, rcloneArgs(args), {
    env: clientEnv(join(tmp.path, "home")),
    cwd: tmp.path,
    timeoutMs: 90_000,
  });
}

/** rclone reading its data from stdin (`rcat`), which the test feeds. */
function rcloneStdin(args: string[]) {
  requireExecutable(RCLONE, "rclone");
  return start(RCLONE, rcloneArgs(args), {
    env: clientEnv(join(tmp.path, "home")),
    cwd: tmp.path,
    timeoutMs: 90_000,
  });
}

const local = (name: string) => join(tmp.path, name);
const uploadToken = (token: string) => ["--header-upload", `x-amz-meta-fence-token: ${token}`];
const everyRequestToken = (token: string) => ["--header", `x-fence-token: ${token}`];
/** 5 MiB parts from 5 MiB on: a 12 MiB file is a 3-part upload. */
const multipart = ["--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M"];

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

beforeAll(async () => {
  tmp = tempDir("fencegate-rclone-");
  gw = await startTestGateway();
  writeFile(
    local("rclone.conf"),
    [
      "[fg]",
      "type = s3",
      "provider = Other",
      "access_key_id = fencegate",
      "secret_access_key = fencegate-secret",
      "region = us-east-1",
      `endpoint = ${gw.url}`,
      "force_path_style = true",
      "",
    ].join("\n"),
  );
});

afterAll(async () => {
  await gw?.stop();
  tmp?.cleanup();
});

describe("rclone", () => {
  it("mkdir creates the bucket; lsd lists it", async () => {
    expectSuccess(await rclone(["mkdir", `fg:${BUCKET}`]), "rclone mkdir");
    const lsd = expectSuccess(await rclone(["lsd", "fg:"]), "rclone lsd");
    expect(lsd.stdout).toMatch(new RegExp(`\\s${BUCKET}$`, "m"));
    lease = await bucketLease(gw, BUCKET);
  });

  it("copy with --header-upload; md5sum and check (MD5 from the ETag) agree with the file", async () => {
    const data = randomData(2 * MiB + 5);
    writeFile(local("one/file.bin"), data);
    const copy = await rclone([
      "copy",
      "-v",
      ...uploadToken(lease.fencingToken),
      local("one"),
      `fg:${BUCKET}/one`,
    ]);
    expectSuccess(copy, "rclone copy");
    expect(copy.stderr).toContain("file.bin: Copied (new)");

    const md5sum = expectSuccess(await rclone(["md5sum", `fg:${BUCKET}/one`]), "rclone md5sum");
    expect(md5sum.stdout.trim()).toBe(`${md5Hex(data)}  file.bin`);
    expectSuccess(await rclone(["check", local("one"), `fg:${BUCKET}/one`]), "rclone check");

    expectSuccess(await rclone(["copy", `fg:${BUCKET}/one`, local("one-back")]), "rclone copy (download)");
    expect(md5Hex(readFileSync(local("one-back/file.bin")))).toBe(md5Hex(data));
  });

  it("sync of a directory tree; ls/lsl list it; a second sync copies nothing", async () => {
    writeTree(local("tree"), SYNC_TREE);
    const sync = await rclone([
      "sync",
      "-v",
      ...uploadToken(lease.fencingToken),
      local("tree"),
      `fg:${BUCKET}/tree`,
    ]);
    expectSuccess(sync, "rclone sync");
    expect(sync.stderr.match(/Copied \(new\)/g)).toHaveLength(Object.keys(SYNC_TREE).length);

    expect(await listing("tree")).toEqual(sizes(SYNC_TREE));
    // lsl shows the modification time rclone keeps in x-amz-meta-mtime.
    const lsl = expectSuccess(await rclone(["lsl", `fg:${BUCKET}/tree`]), "rclone lsl");
    expect(lsl.stdout).toMatch(/^\s+6 \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ a\.txt$/m);
    const lsd = expectSuccess(await rclone(["lsd", `fg:${BUCKET}/tree`]), "rclone lsd");
    expect(lsd.stdout).toMatch(/ ünï cödé$/m);

    const again = await rclone([
      "sync",
      "-v",
      ...uploadToken(lease.fencingToken),
      local("tree"),
      `fg:${BUCKET}/tree`,
    ]);
    expectSuccess(again, "rclone sync (unchanged)");
    expect(again.stderr).not.toContain("Copied");
    expectSuccess(await rclone(["check", local("tree"), `fg:${BUCKET}/tree`]), "rclone check");
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
    const sync = await rclone([
      "sync",
      "-v",
      ...everyRequestToken(lease.fencingToken),
      local("tree"),
      `fg:${BUCKET}/tree`,
    ]);
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
    const copies = await auditRecords(gw, { bucket: BUCKET, key: "moved/index.html", op: "CopyObject" });
    expect(copies.map((c) => [c.decision, c.token])).toEqual([["accepted", lease.token]]);
  });

  it("multipart upload of 12 MiB with --header-upload alone: committed under the lease; --header works too", async () => {
    const data = randomData(12 * MiB);
    writeFile(local("big/big.bin"), data);
    const copy = await rclone([
      "copy",
      ...multipart,
      ...uploadToken(lease.fencingToken),
      local("big"),
      `fg:${BUCKET}/big`,
    ]);
    expectSuccess(copy, "rclone copy (multipart, --header-upload)");
    const records = await auditRecords(gw, { bucket: BUCKET, key: "big/big.bin" });
    expect(records.map((r) => [r.op, r.decision, r.token])).toEqual([
      ["CreateMultipartUpload", "accepted", lease.token],
      ["UploadPart", "accepted", lease.token],
      ["UploadPart", "accepted", lease.token],
      ["UploadPart", "accepted", lease.token],
      ["CompleteMultipartUpload", "accepted", lease.token],
    ]);
    const completes = await auditRecords(gw, {
      bucket: BUCKET,
      key: "big/big.bin",
      op: "CompleteMultipartUpload",
    });
    expect(completes.map((c) => [c.decision, c.token])).toEqual([["accepted", lease.token]]);
    const head = await gw.s3().send(new HeadObjectCommand({ Bucket: BUCKET, Key: "big/big.bin" }));
    expect(head.ETag).toMatch(/^"[0-9a-f]{32}-3"$/);
    expect(head.ContentLength).toBe(12 * MiB);
    expect(head.Metadata).not.toHaveProperty("fence-token");
    // rclone keeps the whole file's MD5 in metadata for multipart uploads, and check uses it.
    expectSuccess(await rclone(["check", local("big"), `fg:${BUCKET}/big`]), "rclone check (multipart)");
    expectSuccess(await rclone(["copy", `fg:${BUCKET}/big`, local("big-back")]), "rclone copy (download)");
    expect(md5Hex(readFileSync(local("big-back/big.bin")))).toBe(md5Hex(data));

    // The header on every request is the upload's own token on each part: accepted as well.
    const every = await rclone([
      "copy",
      ...multipart,
      ...everyRequestToken(lease.fencingToken),
      local("big"),
      `fg:${BUCKET}/big-header`,
    ]);
    expectSuccess(every, "rclone copy (multipart, --header)");
    const viaHeader = await auditRecords(gw, {
      bucket: BUCKET,
      key: "big-header/big.bin",
      op: "CompleteMultipartUpload",
    });
    expect(viaHeader.map((c) => [c.decision, c.token])).toEqual([["accepted", lease.token]]);
    expectSuccess(
      await rclone(["check", local("big"), `fg:${BUCKET}/big-header`]),
      "rclone check (--header)",
    );
  });

  it("multipart upload without a token is refused at CreateMultipartUpload", async () => {
    const refused = await rclone(["copy", ...multipart, local("big"), `fg:${BUCKET}/big-unfenced`]);
    expectRefused(refused, "FencingTokenRequired", "rclone copy (multipart, no token)");
    const records = await auditRecords(gw, { bucket: BUCKET, key: "big-unfenced/big.bin" });
    expect(records.map((r) => [r.op, r.decision, r.reason])).toEqual([
      ["CreateMultipartUpload", "rejected", "FencingTokenRequired"],
    ]);
  });

  it("a stale token is refused with StaleFencingToken; the object keeps the newer write", async () => {
    const bucket = "rclone-stale";
    expectSuccess(await rclone(["mkdir", `fg:${bucket}`]), "rclone mkdir");
    const { stale, fresh } = await supersededLeases(gw, bucket);
    writeFile(local("fresh/k.txt"), "fresh\n");
    writeFile(local("stale/k.txt"), "stale!\n");
    expectSuccess(
      await rclone(["copy", ...uploadToken(fresh.fencingToken), local("fresh"), `fg:${bucket}`]),
      "rclone copy (fresh token)",
    );
    const put = await rclone(["copy", ...uploadToken(stale.fencingToken), local("stale"), `fg:${bucket}`]);
    expectRefused(put, "StaleFencingToken", "rclone copy (stale token)");
    expect(put.stderr).toContain("409");
    // Multipart: refused at CreateMultipartUpload, before any part is sent.
    writeFile(local("stale-big/k.txt"), randomData(12 * MiB));
    const mp = await rclone([
      "copy",
      ...multipart,
      ...uploadToken(stale.fencingToken),
      local("stale-big"),
      `fg:${bucket}`,
    ]);
    expectRefused(mp, "StaleFencingToken", "rclone copy (multipart, stale token)");
    expect(mp.stderr).toContain("409");
    const del = await rclone(["deletefile", ...everyRequestToken(stale.fencingToken), `fg:${bucket}/k.txt`]);
    expectRefused(del, "StaleFencingToken", "rclone deletefile (stale token)");
    expect(expectSuccess(await rclone(["cat", `fg:${bucket}/k.txt`]), "rclone cat").stdout).toBe("fresh\n");
    const rejected = await auditRecords(gw, { bucket, decision: "rejected" });
    expect(rejected.map((r) => [r.op, r.reason, r.token])).toEqual([
      ["PutObject", "StaleFencingToken", stale.token],
      ["CreateMultipartUpload", "StaleFencingToken", stale.token],
      ["DeleteObject", "StaleFencingToken", stale.token],
    ]);
  });

  it("lease lost during rcat (stdin, multipart, --header-upload alone): the next part is refused with 409", async () => {
    const b = "rclone-lost";
    expectSuccess(await rclone(["mkdir", `fg:${b}`]), "rclone mkdir");
    const old = await bucketLease(gw, b);
    const { result } = await uploadAcrossTakeOver(gw, {
      lease: old,
      key: "stream.bin",
      partSize: 5 * MiB,
      launch: () =>
        rcloneStdin([
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
