import { afterEach, describe, expect, it } from "vitest";
import type { FsBackend } from "../../../src/backends/fs/index.js";
import { type BucketRoute, RoutedBackend } from "../../../src/backends/routing/routed-backend.js";
import type { StorageBackend } from "../../../src/backends/storage-backend.js";
import { fencedCommit } from "../../../src/fence/commit.js";
import { metadataOf, readAll, verifiedBody } from "../../support/bodies.js";
import { type FsFixture, fsFixture } from "../fs/fs-fixture.js";
import { describeStorageBackendContract } from "../storage-backend.contract.js";

// The routing layer itself honours the whole contract (everything passes through it).
describeStorageBackendContract("routed (fs behind it)", async () => {
  const fx = await fsFixture();
  const backend = new RoutedBackend({ routes: new Map(), fallback: fx.backend });
  return {
    backend,
    cleanup: async () => {
      await backend.close();
      await fx.cleanup();
    },
  };
});

/** fs backends, each on a fresh data directory, removed after each test. */
const opened: FsFixture[] = [];
afterEach(async () => {
  for (const fx of opened.splice(0)) await fx.cleanup();
});
async function fsBackend(): Promise<FsBackend> {
  const fx = await fsFixture();
  opened.push(fx);
  return fx.current();
}

describe("routed backend: buckets mapped to a target and a prefix", () => {
  let routed: RoutedBackend;
  let store: StorageBackend;
  let other: StorageBackend;
  afterEach(async () => {
    await routed?.close();
  });

  async function open() {
    store = await fsBackend();
    other = await fsBackend();
    await store.createBucket("shared-target");
    await other.createBucket("elsewhere");
    const routes = new Map<string, BucketRoute>([
      ["reports", { backend: store, target: "shared-target", prefix: "reports/" }],
      ["logs", { backend: store, target: "shared-target", prefix: "logs/" }],
      ["remote", { backend: other, target: "elsewhere", prefix: "" }],
    ]);
    routed = new RoutedBackend({ routes, fallback: store });
  }

  const put = (bucket: string, key: string, data: string, token: number | null = null) =>
    routed.putObject({ bucket, key, body: verifiedBody(data), metadata: metadataOf() }, fencedCommit(token));

  it("keeps each gateway bucket under its prefix in the shared target, and lists without the prefix", async () => {
    await open();
    await put("reports", "2026/a.csv", "a", 3);
    await put("reports", "2026/b.csv", "b");
    await put("logs", "2026/a.csv", "log a");
    const inStore = await store.listObjects({ bucket: "shared-target", maxKeys: 100 });
    expect(inStore.objects.map((o) => o.key)).toEqual([
      "logs/2026/a.csv",
      "reports/2026/a.csv",
      "reports/2026/b.csv",
    ]);

    const listed = await routed.listObjects({ bucket: "reports", maxKeys: 1 });
    expect(listed).toMatchObject({ isTruncated: true, nextStartAfter: "2026/a.csv" });
    expect(listed.objects.map((o) => o.key)).toEqual(["2026/a.csv"]);
    const next = await routed.listObjects({
      bucket: "reports",
      maxKeys: 10,
      startAfter: listed.nextStartAfter!,
    });
    expect(next.objects.map((o) => o.key)).toEqual(["2026/b.csv"]);
    const grouped = await routed.listObjects({ bucket: "reports", delimiter: "/", maxKeys: 10 });
    expect(grouped.commonPrefixes).toEqual(["2026/"]);

    const got = await routed.getObject("logs", "2026/a.csv");
    expect(got.info.key).toBe("2026/a.csv");
    expect((await readAll(got.body)).toString()).toBe("log a");
    expect(await routed.highestToken("reports", "2026/a.csv")).toBe(3);
    expect(await routed.writeState("logs", "2026/a.csv")).toMatchObject({ highestToken: null });
  });

  it("refuses a key that its prefix would make longer than a store accepts", async () => {
    await open();
    await expect(put("reports", "k".repeat(1020), "x")).rejects.toMatchObject({ code: "KeyTooLong" });
    await put("remote", "k".repeat(1024), "x"); // no prefix there
  });

  it("names the gateway bucket in NoSuchBucket, refuses to delete a prefix bucket, and lists configured buckets", async () => {
    await open();
    const unrouted = new RoutedBackend({
      routes: new Map([["ghost", { backend: store, target: "no-such-target", prefix: "g/" }]]),
      fallback: store,
    });
    await expect(unrouted.headBucket("ghost")).rejects.toMatchObject({
      code: "NoSuchBucket",
      details: { bucket: "ghost" },
    });
    await expect(routed.deleteBucket("reports")).rejects.toMatchObject({ code: "MethodNotAllowed" });
    const names = (await routed.listBuckets()).map((b) => b.name);
    expect(names).toEqual(["logs", "remote", "reports"]);
    await routed.createBucket("plain");
    expect((await routed.listBuckets()).map((b) => b.name)).toEqual(["logs", "plain", "remote", "reports"]);
  });

  it("routes multipart uploads and lists them without the prefix", async () => {
    await open();
    const { uploadId } = await routed.multipart.createUpload(
      {
        bucket: "reports",
        key: "big.bin",
        metadata: metadataOf(),
        token: null,
        leaseId: null,
        initiator: "me",
      },
      fencedCommit(null),
    );
    const part = await routed.multipart.uploadPart(
      { bucket: "reports", key: "big.bin", uploadId, partNumber: 1, body: verifiedBody("only part") },
      fencedCommit(null),
    );
    const uploads = await routed.multipart.listUploads({ bucket: "reports", maxUploads: 10 });
    expect(uploads.uploads.map((u) => [u.bucket, u.key])).toEqual([["reports", "big.bin"]]);
    expect((await routed.multipart.getUpload({ bucket: "reports", key: "big.bin", uploadId })).key).toBe(
      "big.bin",
    );
    await routed.multipart.completeUpload(
      { bucket: "reports", key: "big.bin", uploadId, parts: [{ partNumber: 1, etag: part.etag }] },
      fencedCommit(null),
    );
    expect((await store.headObject("shared-target", "reports/big.bin")).size).toBe(9);
  });

  it("answers each bucket's domain, so the fencing core joins the right atomic steps", async () => {
    await open();
    expect(routed.domainOf("reports")).toBe(store.domain);
    expect(routed.domainOf("remote")).toBe(other.domain);
    expect(routed.domainOf("anything-else")).toBe(store.domain);
    expect(routed.domain).toBeUndefined(); // two backends, two domains
  });
});

describe("routed backend: one stored object, one gateway name", () => {
  let routed: RoutedBackend | undefined;
  afterEach(async () => {
    await routed?.close();
    routed = undefined;
  });

  const put = (backend: RoutedBackend, bucket: string, key: string, data: string) =>
    backend.putObject({ bucket, key, body: verifiedBody(data), metadata: metadataOf() }, fencedCommit(5));

  /** Every way a request reaches a bucket's objects, each refused with AccessDenied naming `owners`. */
  async function expectRefusedEverywhere(backend: RoutedBackend, bucket: string, owners: RegExp) {
    const refused = { code: "AccessDenied", message: expect.stringMatching(owners) };
    const attempts: [string, () => Promise<unknown>][] = [
      ["createBucket", () => backend.createBucket(bucket)],
      ["headBucket", () => backend.headBucket(bucket)],
      ["deleteBucket", () => backend.deleteBucket(bucket)],
      ["writeState", () => backend.writeState(bucket, "reports/a")],
      ["putObject", () => put(backend, bucket, "reports/a", "through the other name")],
      ["deleteObject", () => backend.deleteObject({ bucket, key: "reports/a" }, fencedCommit(6))],
      ["raiseHighestToken", () => backend.raiseHighestToken(bucket, "reports/a", 9)],
      ["headObject", () => backend.headObject(bucket, "reports/a")],
      ["getObject", () => backend.getObject(bucket, "reports/a")],
      ["highestToken", () => backend.highestToken(bucket, "reports/a")],
      ["listObjects", () => backend.listObjects({ bucket, maxKeys: 10 })],
      ["listUploads", () => backend.multipart.listUploads({ bucket, maxUploads: 10 })],
      [
        "createUpload",
        () =>
          backend.multipart.createUpload(
            { bucket, key: "reports/a", metadata: metadataOf(), token: 5, leaseId: null, initiator: "me" },
            fencedCommit(5),
          ),
      ],
    ];
    for (const [what, attempt] of attempts) await expect(attempt(), what).rejects.toMatchObject(refused);
  }

  it("the fallback refuses a store bucket that configured buckets keep their objects in, and does not list it", async () => {
    const store = await fsBackend();
    routed = new RoutedBackend({
      routes: new Map<string, BucketRoute>([
        ["reports", { backend: store, target: "shared", prefix: "reports/" }],
        ["logs", { backend: store, target: "shared", prefix: "logs/" }],
      ]),
      fallback: store,
    });
    await routed.createBucket("reports");
    await put(routed, "reports", "a", "through the configured name");
    await routed.createBucket("plain");
    await expectRefusedEverywhere(routed, "shared", /configured gateway buckets "reports", "logs"/);
    expect((await routed.listBuckets()).map((b) => b.name)).toEqual(["logs", "plain", "reports"]);
    // Nothing changed in the store through the refused name.
    expect((await store.listObjects({ bucket: "shared", maxKeys: 10 })).objects.map((o) => o.key)).toEqual([
      "reports/a",
    ]);
    expect(await routed.highestToken("reports", "a")).toBe(5);
  });

  it("also when the route's backend is another backend of the same store", async () => {
    const fallback = await fsBackend();
    const sameStore = await fsBackend(); // stands for a second backend configured on one store
    const otherStore = await fsBackend();
    routed = new RoutedBackend({
      routes: new Map<string, BucketRoute>([
        ["reports", { backend: sameStore, target: "shared", prefix: "reports/", store: "s3:one" }],
        ["media", { backend: otherStore, target: "pictures", prefix: "", store: "s3:two" }],
      ]),
      fallback,
      fallbackStore: "s3:one",
    });
    await expectRefusedEverywhere(routed, "shared", /configured gateway bucket "reports" keeps its objects/);
    // Another store's bucket of that name is not the route's: the fallback serves it.
    await routed.createBucket("pictures");
    await put(routed, "pictures", "p", "the fallback's own");
    expect(await routed.highestToken("pictures", "p")).toBe(5);
  });

  it("a target that is itself a configured gateway bucket goes by its own route", async () => {
    const store = await fsBackend();
    const other = await fsBackend();
    routed = new RoutedBackend({
      routes: new Map<string, BucketRoute>([
        ["alias", { backend: store, target: "data", prefix: "" }],
        ["data", { backend: other, target: "elsewhere", prefix: "" }],
      ]),
      fallback: store,
    });
    await routed.createBucket("data");
    await put(routed, "data", "k", "to elsewhere");
    expect((await other.listObjects({ bucket: "elsewhere", maxKeys: 10 })).objects.map((o) => o.key)).toEqual(
      ["k"],
    );
  });
});
