import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { Lease } from "../../src/client/lease-client.js";
import { md5Hex } from "../support/digest.js";
import {
  auditRecords,
  bucketLease,
  bucketWithStaleToken,
  clientProgram,
  clientSuite,
  expectAccepted,
  expectCommittedUnderLease,
  expectRefused,
  expectStaleRejections,
  expectSuccess,
  FIXTURES,
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
 * Debian's aws cli v2 (/usr/bin/aws; another `aws` may come first on PATH) against fencegate.
 * It sends Content-MD5, a signed payload and Expect: 100-continue. The token travels as
 * `--metadata fence-token=…` on every write that takes metadata: PutObject, CopyObject and
 * CreateMultipartUpload. That is enough for multipart uploads and copies too: the gateway binds
 * the upload to the lease of the token given at CreateMultipartUpload and fences UploadPart(Copy)
 * and CompleteMultipartUpload with it. Deletes (DeleteObject, DeleteObjects: rm, mv, sync
 * --delete) take no metadata and aws cli cannot add a header: they need the fixture plugin that
 * adds `x-fence-token` to every request.
 */

const BUCKET = "awscli-bucket";

const suite = clientSuite({
  tools: ["aws"],
  tempPrefix: "fencegate-awscli-",
  setup: ({ local }) =>
    writeIni(local("plugin-config"), {
      default: { region: "us-east-1" },
      plugins: {
        cli_legacy_plugin_path: join(FIXTURES, "awscli-plugin"),
        fence_token: "fence_token_plugin",
      },
    }),
});
const { local } = suite;
const AWS = clientProgram(suite, { tool: "aws" });

let lease: Lease;

/** The environment aws cli gets on top of clientEnv; `plugin` loads the fence-token plugin with FENCE_TOKEN=plugin. */
function awsEnv(plugin: string | undefined): Record<string, string> {
  return {
    AWS_CONFIG_FILE: plugin !== undefined ? local("plugin-config") : join(suite.home, "no-config"),
    ...(plugin !== undefined ? { FENCE_TOKEN: plugin } : {}),
  };
}

/** Runs aws cli; `plugin` loads the fence-token plugin with FENCE_TOKEN=plugin. */
function aws(args: string[], opts: { plugin?: string } = {}) {
  return AWS.run(["--endpoint-url", suite.gw.url, "--no-cli-pager", ...args], awsEnv(opts.plugin));
}

/** `--metadata fence-token=TOKEN`: how aws cli gives a write its token. */
const metadataToken = (token: string) => ["--metadata", `fence-token=${token}`];

/** The arguments of `aws s3 cp --no-progress FROM TO …`. */
const cpArgs = (from: string, to: string, ...more: string[]) => [
  "s3",
  "cp",
  "--no-progress",
  from,
  to,
  ...more,
];

/** `aws s3 cp --no-progress FROM TO …`. */
const cp = (from: string, to: string, ...more: string[]) => aws(cpArgs(from, to, ...more));

/** `aws s3 sync --no-progress FLAGS… site s3://BUCKET/site` with the lease's token as metadata. */
const syncSiteUp = (flags: string[] = [], opts: { plugin?: string } = {}) =>
  aws(
    [
      "s3",
      "sync",
      "--no-progress",
      ...flags,
      local("site"),
      `s3://${BUCKET}/site`,
      ...metadataToken(lease.fencingToken),
    ],
    opts,
  );

/** `aws s3 mb`, which must succeed. */
const mb = async (bucket: string) => expectSuccess(await aws(["s3", "mb", `s3://${bucket}`]), "aws s3 mb");

/** `aws s3api head-object`. */
const headObject = (key: string) => aws(["s3api", "head-object", "--bucket", BUCKET, "--key", key]);

/** `aws s3 ls --recursive` under a prefix, as key -> size. */
async function listing(prefix: string): Promise<Record<string, number>> {
  const ls = expectSuccess(await aws(["s3", "ls", "--recursive", `s3://${BUCKET}/${prefix}`]), "aws s3 ls");
  const out: Record<string, number> = {};
  for (const line of ls.stdout.split("\n")) {
    const m = /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+(\d+) (.+)$/.exec(line);
    if (m) out[m[2]!] = Number(m[1]);
  }
  return out;
}

describe("aws s3 (high-level commands)", () => {
  it("mb creates the bucket and ls lists it", async () => {
    expect((await mb(BUCKET)).stdout).toContain(`make_bucket: ${BUCKET}`);
    const ls = expectSuccess(await aws(["s3", "ls"]), "aws s3 ls");
    expect(ls.stdout).toMatch(new RegExp(`\\s${BUCKET}$`, "m"));
    lease = await bucketLease(suite.gw, BUCKET);
  });

  it("cp of a 20 MiB file takes the multipart path with --metadata alone: committed under the lease, bytes round-trip", async () => {
    const data = randomData(20 * MiB);
    writeFile(local("big.bin"), data);
    // No plugin: the token reaches CreateMultipartUpload only, as metadata.
    const up = await cp(
      local("big.bin"),
      `s3://${BUCKET}/big.bin`,
      "--metadata",
      `fence-token=${lease.fencingToken},purpose=test`,
    );
    expectSuccess(up, "aws s3 cp (upload, multipart, --metadata)");
    expect(up.stdout).toContain(`upload: ./big.bin to s3://${BUCKET}/big.bin`);

    const head = expectSuccess(await headObject("big.bin"), "head-object");
    const info = JSON.parse(head.stdout) as { ContentLength: number; ETag: string; Metadata: object };
    expect(info.ContentLength).toBe(20 * MiB);
    // aws cli's default 8 MiB parts: 8 + 8 + 4.
    expect(info.ETag).toMatch(/^"[0-9a-f]{32}-3"$/);
    expect(info.Metadata).toEqual({ purpose: "test" });

    await expectCommittedUnderLease(suite.gw, BUCKET, "big.bin", lease.token, 3);

    // Download (ranged GETs for a file this size) and compare.
    const down = await cp(`s3://${BUCKET}/big.bin`, local("big.down"));
    expectSuccess(down, "aws s3 cp (download)");
    expect(md5Hex(readFileSync(local("big.down")))).toBe(md5Hex(data));
  });

  it("cp of a 20 MiB file without a token is refused at CreateMultipartUpload", async () => {
    const r = await cp(local("big.bin"), `s3://${BUCKET}/big-unfenced.bin`);
    expectRefused(r, "FencingTokenRequired", "aws s3 cp (multipart, no token)");
    expect(r.stderr).toContain("CreateMultipartUpload operation");
    const head = await headObject("big-unfenced.bin");
    expectRefused(head, "404", "head-object of the refused upload");
  });

  it("sync uploads a directory tree with --metadata, ls lists it, a second sync has nothing to do", async () => {
    writeTree(local("site"), SYNC_TREE);
    const sync = await syncSiteUp();
    expectSuccess(sync, "aws s3 sync");
    expect(sync.stdout.match(/^upload: /gm)).toHaveLength(Object.keys(SYNC_TREE).length);

    expect(await listing("site/")).toEqual(sizes(SYNC_TREE, "site/"));
    const top = expectSuccess(await aws(["s3", "ls", `s3://${BUCKET}/site/`]), "aws s3 ls (one level)");
    expect(top.stdout).toMatch(/PRE nested\/$/m);
    expect(top.stdout).toMatch(/PRE ünï cödé\/$/m);
    expect(top.stdout).toMatch(/\sa\.txt$/m);

    const again = expectSuccess(await syncSiteUp(), "aws s3 sync (unchanged)");
    expect(again.stdout.trim()).toBe("");

    expectSuccess(
      await aws(["s3", "sync", "--no-progress", `s3://${BUCKET}/site`, local("site-back")]),
      "aws s3 sync (download)",
    );
    for (const [name, body] of Object.entries(SYNC_TREE)) {
      expect(readFileSync(join(local("site-back"), name), "utf8")).toBe(body);
    }
    const got = expectSuccess(
      await aws(["s3", "cp", `s3://${BUCKET}/site/odd/plus+and=equals.txt`, "-"]),
      "aws s3 cp to stdout",
    );
    expect(got.stdout).toBe(SYNC_TREE["odd/plus+and=equals.txt"]);
  });

  it("rm without a token is refused clearly (aws cli cannot send metadata on a delete)", async () => {
    const r = await aws(["s3", "rm", `s3://${BUCKET}/site/a.txt`]);
    expectRefused(r, "FencingTokenRequired", "aws s3 rm without a token");
    expect(r.stderr).toContain("delete failed");
    const head = await headObject("site/a.txt");
    expectSuccess(head, "head-object after the refused delete");
  });

  it("rm and sync --delete work with the fence-token plugin", async () => {
    const rm = await aws(["s3", "rm", `s3://${BUCKET}/site/a.txt`], { plugin: lease.fencingToken });
    expectSuccess(rm, "aws s3 rm (plugin)");
    expect(rm.stdout).toContain(`delete: s3://${BUCKET}/site/a.txt`);
    expect(await listing("site/")).not.toHaveProperty("site/a.txt");

    // b.txt is gone locally, so sync --delete removes it remotely; index.html changed size and
    // a.txt, deleted remotely above, is uploaded again.
    rmSync(join(local("site"), "b.txt"));
    const changed = { ...SYNC_TREE, "index.html": "<h1>hello again</h1>\n" } as Record<string, string>;
    delete changed["b.txt"];
    writeFile(join(local("site"), "index.html"), changed["index.html"]!);
    const sync = await syncSiteUp(["--delete"], { plugin: lease.fencingToken });
    expectSuccess(sync, "aws s3 sync --delete (plugin)");
    expect(sync.stdout).toContain(`delete: s3://${BUCKET}/site/b.txt`);
    expect(sync.stdout).toContain(`upload: site/index.html to s3://${BUCKET}/site/index.html`);
    expect(sync.stdout).toContain(`upload: site/a.txt to s3://${BUCKET}/site/a.txt`);
    expect(await listing("site/")).toEqual(sizes(changed, "site/"));
  });

  it("cp between keys with --metadata (CopyObject; UploadPartCopy for 20 MiB); mv with the plugin", async () => {
    const small = await cp(
      `s3://${BUCKET}/site/index.html`,
      `s3://${BUCKET}/copies/index.html`,
      ...metadataToken(lease.fencingToken),
    );
    expectSuccess(small, "aws s3 cp s3:// s3:// (CopyObject, --metadata)");
    const refused = await aws(["s3", "cp", `s3://${BUCKET}/site/index.html`, `s3://${BUCKET}/copies/x.html`]);
    expectRefused(refused, "FencingTokenRequired", "aws s3 cp s3:// s3:// without a token");

    // A multipart copy: --metadata reaches CreateMultipartUpload, which binds the UploadPartCopy
    // parts and the completion to the lease.
    const big = await cp(
      `s3://${BUCKET}/big.bin`,
      `s3://${BUCKET}/copies/big.bin`,
      ...metadataToken(lease.fencingToken),
    );
    expectSuccess(big, "aws s3 cp s3:// s3:// (multipart copy, --metadata)");
    const head = JSON.parse(expectSuccess(await headObject("copies/big.bin"), "head-object").stdout) as {
      ContentLength: number;
      ETag: string;
    };
    expect(head.ContentLength).toBe(20 * MiB);
    expect(head.ETag).toMatch(/-3"$/);
    await expectAccepted(
      suite.gw,
      { bucket: BUCKET, key: "copies/big.bin", op: "UploadPartCopy" },
      lease.token,
      3,
    );
    await expectAccepted(
      suite.gw,
      { bucket: BUCKET, key: "copies/big.bin", op: "CompleteMultipartUpload" },
      lease.token,
    );
    const copied = await cp(`s3://${BUCKET}/copies/big.bin`, local("copy.down"));
    expectSuccess(copied, "aws s3 cp (download of the copy)");
    expect(md5Hex(readFileSync(local("copy.down")))).toBe(md5Hex(readFileSync(local("big.bin"))));

    // mv deletes the source after copying: the delete needs the plugin.

    const mv = await aws(
      ["s3", "mv", `s3://${BUCKET}/copies/index.html`, `s3://${BUCKET}/moved/index.html`],
      {
        plugin: lease.fencingToken,
      },
    );
    expectSuccess(mv, "aws s3 mv (plugin)");
    const after = await listing("");
    expect(after).toHaveProperty("moved/index.html");
    expect(after).not.toHaveProperty("copies/index.html");
  });
});

describe("aws s3api (one request per command)", () => {
  const body = "s3api body\n";

  it("put-object --metadata fence-token=…, head-object, list-objects-v2, get-object", async () => {
    writeFile(local("api.txt"), body);
    const put = expectSuccess(
      await aws([
        "s3api",
        "put-object",
        "--bucket",
        BUCKET,
        "--key",
        "api/one.txt",
        "--body",
        local("api.txt"),
        "--content-type",
        "text/plain",
        "--metadata",
        `fence-token=${lease.fencingToken},color=blue`,
      ]),
      "put-object",
    );
    expect(JSON.parse(put.stdout)).toMatchObject({ ETag: `"${md5Hex(body)}"` });

    const head = expectSuccess(await headObject("api/one.txt"), "head-object");
    // The token is taken out of the metadata: readers never learn a live token.
    expect(JSON.parse(head.stdout)).toMatchObject({
      ContentLength: body.length,
      ETag: `"${md5Hex(body)}"`,
      ContentType: "text/plain",
      Metadata: { color: "blue" },
    });

    const list = expectSuccess(
      await aws(["s3api", "list-objects-v2", "--bucket", BUCKET, "--prefix", "api/"]),
      "list-objects-v2",
    );
    const listed = JSON.parse(list.stdout) as { Contents: { Key: string; Size: number; ETag: string }[] };
    expect(listed.Contents).toEqual([
      expect.objectContaining({ Key: "api/one.txt", Size: body.length, ETag: `"${md5Hex(body)}"` }),
    ]);

    const paged = expectSuccess(
      await aws([
        "s3api",
        "list-objects-v2",
        "--bucket",
        BUCKET,
        "--page-size",
        "2",
        "--query",
        "Contents[].Key",
      ]),
      "list-objects-v2 (paginated)",
    );
    expect(JSON.parse(paged.stdout)).toEqual(
      expect.arrayContaining(["api/one.txt", "big.bin", "site/index.html", "site/nested/c.json"]),
    );

    const get = expectSuccess(
      await aws(["s3api", "get-object", "--bucket", BUCKET, "--key", "api/one.txt", local("api.down")]),
      "get-object",
    );
    expect(JSON.parse(get.stdout)).toMatchObject({ ContentLength: body.length, Metadata: { color: "blue" } });
    expect(readFileSync(local("api.down"), "utf8")).toBe(body);

    // The grantee carries xsi:type, which botocore reads as Type (and s3cmd info needs).
    const acl = expectSuccess(
      await aws(["s3api", "get-object-acl", "--bucket", BUCKET, "--key", "api/one.txt"]),
      "get-object-acl",
    );
    expect(JSON.parse(acl.stdout)).toMatchObject({
      Grants: [{ Grantee: { Type: "CanonicalUser" }, Permission: "FULL_CONTROL" }],
    });
  });

  it("delete-object: refused without a token, accepted with the plugin's x-fence-token header", async () => {
    const refused = await aws(["s3api", "delete-object", "--bucket", BUCKET, "--key", "api/one.txt"]);
    expectRefused(refused, "FencingTokenRequired", "delete-object without a token");
    const ok = await aws(["s3api", "delete-object", "--bucket", BUCKET, "--key", "api/one.txt"], {
      plugin: lease.fencingToken,
    });
    expectSuccess(ok, "delete-object (plugin)");
    const head = await headObject("api/one.txt");
    expectRefused(head, "404", "head-object after delete");
  });
});

describe("stale tokens", () => {
  const bucket = "awscli-stale";

  it("a superseded lease's token is refused with StaleFencingToken; the object keeps the newer write", async () => {
    const { stale, fresh } = await bucketWithStaleToken(suite.gw, bucket, mb);
    writeFile(local("fresh.txt"), "fresh\n");
    writeFile(local("stale.txt"), "stale!\n");
    const putObject = (file: string, token: string) =>
      aws([
        "s3api",
        "put-object",
        "--bucket",
        bucket,
        "--key",
        "k.txt",
        "--body",
        local(file),
        ...metadataToken(token),
      ]);
    expectSuccess(await putObject("fresh.txt", fresh.fencingToken), "put-object (fresh token)");

    const api = await putObject("stale.txt", stale.fencingToken);
    expectRefused(api, "StaleFencingToken", "put-object (stale token)");
    expect(api.stderr).toContain("PutObject operation");

    const staleCp = await cp(
      local("stale.txt"),
      `s3://${bucket}/k.txt`,
      ...metadataToken(stale.fencingToken),
    );
    expectRefused(staleCp, "StaleFencingToken", "aws s3 cp (stale token)");

    // Multipart (20 MiB): refused at CreateMultipartUpload, before any part is sent.
    writeFile(local("stale-big.bin"), randomData(20 * MiB));
    const big = await cp(
      local("stale-big.bin"),
      `s3://${bucket}/k.txt`,
      ...metadataToken(stale.fencingToken),
    );
    expectRefused(big, "StaleFencingToken", "aws s3 cp (multipart, stale token)");
    expect(big.stderr).toContain("CreateMultipartUpload operation");

    const del = await aws(["s3", "rm", `s3://${bucket}/k.txt`], { plugin: stale.fencingToken });
    expectRefused(del, "StaleFencingToken", "aws s3 rm (stale token, plugin)");

    const got = expectSuccess(await aws(["s3", "cp", `s3://${bucket}/k.txt`, "-"]), "aws s3 cp to stdout");
    expect(got.stdout).toBe("fresh\n");
    await expectStaleRejections(suite.gw, bucket, stale.token, [
      "PutObject",
      "PutObject",
      "CreateMultipartUpload",
      "DeleteObject",
    ]);
    const parts = await auditRecords(suite.gw, { bucket, op: "UploadPart" });
    expect(parts).toEqual([]);
  });

  it("lease lost during cp - (stdin, multipart, --metadata alone): the next part is refused with 409", async () => {
    const b = "awscli-lost";
    const { result } = await leaseLostMidUpload(suite.gw, {
      bucket: b,
      key: "stream.bin",
      partSize: 8 * MiB,
      create: mb,
      launch: (old) =>
        AWS.start(
          [
            "--endpoint-url",
            suite.gw.url,
            ...cpArgs("-", `s3://${b}/stream.bin`, ...metadataToken(old.fencingToken)),
          ],
          awsEnv(undefined),
        ),
    });
    expect(result.stderr).toContain("UploadPart operation");
  });
});
