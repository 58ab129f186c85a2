import { randomUUID } from "node:crypto";
import { CreateBucketCommand, PutObjectCommand } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { compareKeys, listSorted } from "../../../src/backends/list-helper.js";
import type { S3Backend } from "../../../src/backends/s3/index.js";
import type { ListInput } from "../../../src/backends/storage-backend.js";
import { fencedCommit } from "../../../src/fence/commit.js";
import { md5Etag, metadataOf, verifiedBody } from "../../support/bodies.js";
import { startProxy } from "./proxy.js";
import { type S3Fixture, s3Fixture } from "./s3-fixture.js";

/**
 * Listings merge records and plain objects: checked against a model (listSorted over the keys
 * that should be visible) for random queries, over every kind of key: plain only, fenced, a
 * tombstone hiding a plain object, an HCT-only record over a plain object, deleted records, keys
 * too long for `<m>r/`, keys sorting right before and after the meta prefix, and a user key that
 * itself starts with the meta prefix.
 */
describe("listings merge records and plain objects", () => {
  let fx: S3Fixture;
  let backend: S3Backend;
  let bucket: string;
  const visible = new Map<string, string>(); // key → etag

  const rawPut = (key: string, body: string) =>
    fx.raw.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: key,
        Body: Buffer.from(body),
        ContentLength: Buffer.byteLength(body),
      }),
    );
  const put = async (key: string, body: string, token: number | null = null) => {
    await backend.putObject(
      { bucket, key, body: verifiedBody(body), metadata: metadataOf() },
      fencedCommit(token),
    );
    visible.set(key, md5Etag(body));
  };

  beforeAll(async () => {
    fx = await s3Fixture();
    backend = fx.current();
    bucket = `fg-list-${randomUUID().slice(0, 8)}`;
    await fx.raw.send(new CreateBucketCommand({ Bucket: bucket }));
    const long = (c: string) => `long/${c.repeat(1019)}`; // 1024 bytes: the record goes to <m>l/
    for (const key of ["plain/a", "plain/b", "-before-meta", ".fencegate0", ".fencegatf", "é/x", "mixed/1"]) {
      await rawPut(key, `plain ${key}`);
      visible.set(key, md5Etag(`plain ${key}`));
    }
    for (const key of [
      "fenced/a",
      "fenced/b/c",
      "mixed/2",
      "\u{1F600}",
      ".fencegate/user-key",
      long("x"),
      long("a"),
    ]) {
      await put(key, `fenced ${key}`, 3);
    }
    await put("plain/b", "fenced over a plain object", 4); // the record wins
    await rawPut("hidden/a", "hidden"); // a tombstone hides it
    await backend.deleteObject({ bucket, key: "hidden/a" }, fencedCommit(5));
    await put("gone", "gone soon", 1);
    await backend.deleteObject({ bucket, key: "gone" }, fencedCommit(2));
    visible.delete("gone");
    await backend.deleteObject({ bucket, key: long("a") }, fencedCommit(6));
    visible.delete(long("a"));
    await rawPut("raised", "raised plain"); // an HCT-only record: the plain object stays visible
    await backend.raiseHighestToken(bucket, "raised", 9);
    visible.set("raised", md5Etag("raised plain"));
    await backend.raiseHighestToken(bucket, "tombstone-only", 9); // nothing there: a tombstone
  });

  afterAll(async () => {
    await fx.cleanup();
  });

  const model = (input: Omit<ListInput, "bucket">) => {
    const rows = [...visible.keys()].sort(compareKeys).map((key) => ({ key }));
    return listSorted(input, (from) =>
      rows.filter((r) =>
        from.inclusive ? compareKeys(r.key, from.key) >= 0 : compareKeys(r.key, from.key) > 0,
      ),
    );
  };

  it("lists every visible key once, in key order, with the right ETag", async () => {
    const all = await backend.listObjects({ bucket, maxKeys: 1000 });
    expect(all.objects.map((o) => o.key)).toEqual([...visible.keys()].sort(compareKeys));
    for (const o of all.objects) expect(o.etag).toBe(visible.get(o.key));
  });

  it("matches the model for random queries", async () => {
    const prefixes = ["", "plain/", "fenced/", "long/", ".fencegate", ".fencegate/", "mixed/", "h", "-"];
    const delimiters = [undefined, "/", "e"];
    const keys = [...visible.keys()];
    for (let i = 0; i < 120; i++) {
      const pick = <T>(items: T[]) => items[Math.floor(Math.random() * items.length)]!;
      const input = {
        prefix: pick(prefixes),
        ...(Math.random() < 0.6 ? { delimiter: pick(delimiters) ?? "" } : {}),
        ...(Math.random() < 0.4
          ? {
              startAfter: Array.from(pick(keys))
                .slice(0, 1 + Math.floor(Math.random() * 8))
                .join(""),
            }
          : {}),
        maxKeys: pick([1, 2, 3, 7, 1000]),
      };
      const got = await backend.listObjects({ bucket, ...input });
      const want = model(input);
      expect(
        {
          objects: got.objects.map((o) => o.key),
          commonPrefixes: got.commonPrefixes,
          isTruncated: got.isTruncated,
        },
        JSON.stringify(input),
      ).toEqual({
        objects: want.objects.map((o) => o.key),
        commonPrefixes: want.commonPrefixes,
        isTruncated: want.isTruncated,
      });
    }
  });

  it("reads each record once: a listing of unchanged keys costs no record GET", async () => {
    const proxy = await startProxy(fx.store.url);
    const through = fx.another({ endpoint: proxy.url });
    try {
      const recordGets = () =>
        proxy.seen.filter((r) => r.method === "GET" && /\/\.fencegate\/[rl]\//.test(r.path)).length;
      await through.listObjects({ bucket, maxKeys: 1000 });
      const first = recordGets();
      expect(first).toBeGreaterThan(5);
      await through.listObjects({ bucket, maxKeys: 1000 });
      expect(recordGets()).toBe(first);
      await put("fenced/a", "changed", 10);
      await through.listObjects({ bucket, maxKeys: 1000 });
      expect(recordGets()).toBe(first + 1); // only the record that changed
    } finally {
      await proxy.close();
    }
  });
});
