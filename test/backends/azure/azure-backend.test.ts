import { randomUUID } from "node:crypto";
import type { BlobServiceClient } from "@azure/storage-blob";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { AzureBackend, AzureHookStep } from "../../../src/backends/azure/index.js";
import type { FencedCommit, WriteConditions } from "../../../src/backends/storage-backend.js";
import { StaleTokenError } from "../../../src/core/errors.js";
import { fencedCommit } from "../../../src/fence/commit.js";
import { md5Etag, metadataOf, readAll, verifiedBody } from "../../support/bodies.js";
import { md5Hex } from "../../support/digest.js";
import { type AzureFixture, type AzureFixtureOptions, azureFixture, useAzurite } from "./azure-fixture.js";

const azurite = useAzurite();

/** A hook that stops one write at one step until released. */
function pauseAt(step: AzureHookStep, key: string) {
  let release!: () => void;
  let reached!: () => void;
  const released = new Promise<void>((r) => {
    release = r;
  });
  const arrived = new Promise<void>((r) => {
    reached = r;
  });
  let armed = true;
  return {
    hook: async (at: AzureHookStep, ctx: { key: string }) => {
      if (armed && at === step && ctx.key === key) {
        armed = false;
        reached();
        await released;
      }
    },
    arrived,
    release,
  };
}

describe("azure backend on Azurite", () => {
  let fx: AzureFixture;
  let backend: AzureBackend;
  let direct: BlobServiceClient;
  let bucket: string;
  const fixtures: AzureFixture[] = [];

  const open = async (options: AzureFixtureOptions = {}) => {
    const f = await azureFixture(await azurite(), options);
    fixtures.push(f);
    return f;
  };

  beforeEach(async () => {
    fx = await open();
    backend = fx.backend;
    direct = fx.direct;
    bucket = `fg-az-${randomUUID().slice(0, 12)}`;
    await backend.createBucket(bucket);
  });

  afterEach(async () => {
    for (const f of fixtures.splice(0)) await f.cleanup();
  });

  const put = (
    b: AzureBackend,
    key: string,
    data: string | Buffer,
    token: number | null,
    conditions: WriteConditions = {},
    commit: Partial<FencedCommit> = {},
  ) =>
    b.putObject(
      { bucket, key, body: verifiedBody(data), metadata: metadataOf() },
      fencedCommit(token, { conditions, ...commit }),
    );
  const del = (b: AzureBackend, key: string, token: number | null) =>
    b.deleteObject({ bucket, key }, fencedCommit(token));
  const content = async (key: string) =>
    (await readAll((await backend.getObject(bucket, key)).body)).toString();
  const blobOf = (key: string) => direct.getContainerClient(bucket).getBlockBlobClient(key);

  describe("tombstones", () => {
    it("refuses a stale writer's create after a fenced delete: the tombstone keeps the HCT", async () => {
      await put(backend, "k", "v5", 5);
      expect(await del(backend, "k", 6)).toEqual({ existed: true, highestToken: 6 });
      const refused = put(backend, "k", "late create", 5, { ifNoneMatch: "*" });
      await expect(refused).rejects.toBeInstanceOf(StaleTokenError);
      await expect(refused).rejects.toMatchObject({ highestToken: 6 });
      await expect(backend.headObject(bucket, "k")).rejects.toMatchObject({ code: "NoSuchKey" });
      // What a tool reading the container sees: a zero-length blob that says so.
      const props = await blobOf("k").getProperties();
      expect(props.contentLength).toBe(0);
      expect(props.metadata).toMatchObject({ fencegate_tombstone: "true", fencegate_hct: "6" });
    });

    it("refuses a write that read the live object, paused, and resumed after a newer delete", async () => {
      await put(backend, "k", "v5", 5);
      const pause = pauseAt("before-commit", "k");
      const paused = await open({ hooks: pause.hook });
      const stale = put(paused.backend, "k", "stale overwrite", 5);
      await pause.arrived;
      await del(backend, "k", 6);
      pause.release();
      await expect(stale).rejects.toBeInstanceOf(StaleTokenError);
      await expect(backend.headObject(bucket, "k")).rejects.toMatchObject({ code: "NoSuchKey" });
      expect(await backend.highestToken(bucket, "k")).toBe(6);
    });

    it("refuses a create that found no blob, paused, and resumed after a fenced delete of the missing key", async () => {
      const pause = pauseAt("before-commit", "ghost");
      const paused = await open({ hooks: pause.hook });
      const stale = put(paused.backend, "ghost", "stale create", 5, { ifNoneMatch: "*" });
      await pause.arrived;
      expect(await del(backend, "ghost", 6)).toEqual({ existed: false, highestToken: 6 });
      pause.release();
      await expect(stale).rejects.toBeInstanceOf(StaleTokenError);
      await expect(backend.headObject(bucket, "ghost")).rejects.toMatchObject({ code: "NoSuchKey" });
    });

    it("writes nothing for an unfenced delete of a missing key, and leaves a tombstone for an unfenced object", async () => {
      expect(await del(backend, "never", null)).toEqual({ existed: false, highestToken: null });
      await expect(blobOf("never").getProperties()).rejects.toMatchObject({ statusCode: 404 });
      await put(backend, "plain", "x", null);
      expect(await del(backend, "plain", null)).toEqual({ existed: true, highestToken: null });
      // A tombstone, never an absent blob: a create whose answer was lost (If-None-Match: *)
      // can then never land after the delete, and the write history goes on.
      const props = await blobOf("plain").getProperties();
      expect(props.contentLength).toBe(0);
      expect(props.metadata?.fencegate_tombstone).toBe("true");
      await expect(backend.headObject(bucket, "plain")).rejects.toMatchObject({ code: "NoSuchKey" });
    });
  });

  describe("what a direct reader of the container sees", () => {
    it("a live object: its bytes, blob properties and fencegate's state in the metadata", async () => {
      await backend.putObject(
        {
          bucket,
          key: "doc.txt",
          body: verifiedBody("hello"),
          metadata: metadataOf(
            { "x-odd name": "ünï" },
            { headers: { contentType: "text/plain", cacheControl: "no-cache", contentLanguage: "fr" } },
          ),
        },
        fencedCommit(3),
      );
      const props = await blobOf("doc.txt").getProperties();
      expect(props.contentType).toBe("text/plain");
      expect(props.cacheControl).toBe("no-cache");
      expect(props.contentLanguage).toBe("fr");
      expect(Buffer.from(props.contentMD5!).toString("hex")).toBe(md5Hex("hello"));
      expect(props.metadata?.fencegate_hct).toBe("3");
      const state = JSON.parse(Buffer.from(props.metadata!.fencegate!, "base64url").toString());
      expect(state).toMatchObject({
        v: 1,
        hct: 3,
        etag: md5Etag("hello"),
        meta: { "x-odd name": "ünï" },
        headers: { contentType: "text/plain" },
      });
      expect((await backend.headObject(bucket, "doc.txt")).userMetadata).toEqual({ "x-odd name": "ünï" });
    });

    it("hides fencegate's own blobs and refuses keys under its prefix", async () => {
      const uploadId = (
        await backend.multipart.createUpload(
          { bucket, key: "big", metadata: metadataOf(), token: null, leaseId: null, initiator: null },
          fencedCommit(null),
        )
      ).uploadId;
      await backend.multipart.uploadPart(
        { bucket, key: "big", uploadId, partNumber: 1, body: verifiedBody("part") },
        fencedCommit(null),
      );
      const names: string[] = [];
      for await (const item of direct.getContainerClient(bucket).listBlobsFlat()) names.push(item.name);
      expect(names).toEqual([
        expect.stringMatching(new RegExp(`^\\.fencegate/parts/${uploadId}/00001\\.[0-9a-f]{32}$`)),
        `.fencegate/uploads/${uploadId}`,
      ]);
      expect((await backend.listObjects({ bucket, maxKeys: 10 })).objects).toEqual([]);
      await expect(backend.headObject(bucket, `.fencegate/uploads/${uploadId}`)).rejects.toMatchObject({
        code: "NoSuchKey",
      });
      await expect(put(backend, ".fencegate/x", "x", null)).rejects.toMatchObject({
        code: "InvalidObjectName",
      });
      await expect(put(backend, "../escape", "x", null)).rejects.toMatchObject({ code: "InvalidObjectName" });
    });
  });

  describe("hierarchical namespace (ADLS Gen2)", () => {
    it("refuses keys that are not file paths there: a trailing '/' or an empty segment", async () => {
      const hns = await open({ hierarchicalNamespace: true });
      for (const key of ["dir/", "a//b"]) {
        await expect(put(hns.backend, key, "x", 1)).rejects.toMatchObject({
          code: "InvalidObjectName",
          details: { reason: "hns-path" },
        });
      }
      await put(hns.backend, "dir/file", "x", 1);
      // A flat namespace (Azurite's, as detected) takes them, as S3 does.
      await put(backend, "dir/", "x", 1);
    });
  });

  describe("adoption of blobs written without fencegate", () => {
    it("reads, lists and conditionally writes a blob with Content-MD5, and fences it from its first fenced write", async () => {
      await blobOf("pre.txt").upload("pre-existing", 12, {
        metadata: { owner: "legacy" },
        blobHTTPHeaders: { blobContentType: "text/x-legacy" },
      });
      const head = await backend.headObject(bucket, "pre.txt");
      expect(head).toMatchObject({
        size: 12,
        etag: md5Etag("pre-existing"),
        userMetadata: { owner: "legacy" },
        headers: { contentType: "text/x-legacy" },
      });
      expect(await content("pre.txt")).toBe("pre-existing");
      expect((await backend.listObjects({ bucket, maxKeys: 10 })).objects).toMatchObject([
        { key: "pre.txt", size: 12, etag: md5Etag("pre-existing") },
      ]);
      expect(await backend.writeState(bucket, "pre.txt")).toMatchObject({
        highestToken: null,
        etag: head.etag,
      });

      await expect(put(backend, "pre.txt", "x", null, { ifMatch: md5Etag("other") })).rejects.toMatchObject({
        code: "PreconditionFailed",
      });
      await expect(put(backend, "pre.txt", "x", null, { ifNoneMatch: "*" })).rejects.toMatchObject({
        code: "PreconditionFailed",
      });
      expect((await put(backend, "pre.txt", "fenced now", 4, { ifMatch: head.etag })).highestToken).toBe(4);
      await expect(put(backend, "pre.txt", "stale", 3)).rejects.toBeInstanceOf(StaleTokenError);
      expect(await content("pre.txt")).toBe("fenced now");
    });

    it("reports Azure's ETag for a blob without Content-MD5, and keeps it across an HCT raise", async () => {
      const blob = blobOf("blocks.bin");
      const id = Buffer.from("block-0").toString("base64");
      await blob.stageBlock(id, "staged bytes", 12);
      const committed = await blob.commitBlockList([id], { metadata: { a: "1" } });
      const head = await backend.headObject(bucket, "blocks.bin");
      expect(head.etag).toBe(`"${committed.etag!.replaceAll('"', "")}"`);
      expect(await backend.raiseHighestToken(bucket, "blocks.bin", 9)).toBe(9);
      const after = await backend.headObject(bucket, "blocks.bin");
      expect(after).toMatchObject({ etag: head.etag, size: 12, userMetadata: { a: "1" } });
      expect(await content("blocks.bin")).toBe("staged bytes");
      // The blob's own metadata stays for direct readers; the HCT joins it.
      expect((await blob.getProperties()).metadata).toMatchObject({ a: "1", fencegate_hct: "9" });
      await expect(put(backend, "blocks.bin", "stale", 8)).rejects.toBeInstanceOf(StaleTokenError);
      await put(backend, "blocks.bin", "conditional", 9, { ifMatch: head.etag });
      expect(await content("blocks.bin")).toBe("conditional");
    });

    it("refuses to write over a blob whose fencegate metadata is unreadable", async () => {
      await blobOf("broken").upload("x", 1, { metadata: { fencegate: "not base64url json" } });
      await expect(put(backend, "broken", "y", 10)).rejects.toMatchObject({ code: "InternalError" });
      await expect(backend.raiseHighestToken(bucket, "broken", 10)).rejects.toMatchObject({
        code: "InternalError",
      });
      expect((await blobOf("broken").getProperties()).metadata).toEqual({ fencegate: "not base64url json" });
    });
  });

  describe("large bodies: staged blocks and one Put Block List", () => {
    it("stages a body longer than one block and commits it conditionally", async () => {
      const small = await open({ blockSizeBytes: 64 * 1024 });
      const data = Buffer.alloc(300 * 1024, 7);
      const written = await put(small.backend, "big", data, 2);
      expect(written).toMatchObject({ size: data.length, etag: md5Etag(data), highestToken: 2 });
      const blocks = await blobOf("big").getBlockList("committed");
      expect(blocks.committedBlocks?.length).toBe(5);
      expect((await readAll((await backend.getObject(bucket, "big")).body)).equals(data)).toBe(true);
      await expect(put(small.backend, "big", data, 1)).rejects.toBeInstanceOf(StaleTokenError);
    });

    it("refuses with SlowDown, changing nothing, when a concurrent commit discarded its staged blocks", async () => {
      const pause = pauseAt("body-staged", "contested");
      const small = await open({ blockSizeBytes: 64 * 1024, hooks: pause.hook });
      const write = put(small.backend, "contested", Buffer.alloc(200 * 1024, 1), 5);
      await pause.arrived;
      // Another writer's successful Put Block List discards every uncommitted block of the blob.
      const other = blobOf("contested");
      const id = Buffer.from("x".repeat(39)).toString("base64");
      await other.stageBlock(id, "direct", 6);
      await other.commitBlockList([id]);
      pause.release();
      await expect(write).rejects.toMatchObject({ code: "SlowDown" });
      expect(await content("contested")).toBe("direct");
      expect(await backend.highestToken(bucket, "contested")).toBeNull();
    });

    it("refuses with StaleFencingToken when the commit that discarded its blocks raised the HCT", async () => {
      const pause = pauseAt("body-staged", "contested");
      const small = await open({ blockSizeBytes: 64 * 1024, hooks: pause.hook });
      const write = put(small.backend, "contested", Buffer.alloc(200 * 1024, 1), 5);
      await pause.arrived;
      await put(
        await open({ blockSizeBytes: 64 * 1024 }).then((f) => f.backend),
        "contested",
        Buffer.alloc(100 * 1024, 2),
        6,
      );
      pause.release();
      await expect(write).rejects.toBeInstanceOf(StaleTokenError);
      expect(await backend.highestToken(bucket, "contested")).toBe(6);
    });
  });

  describe("buckets", () => {
    it("keeps a deleted bucket's container, marked, with its tombstones; writes see NoSuchBucket until it is created again", async () => {
      await put(backend, "k", "v", 7);
      await del(backend, "k", 8);
      await backend.deleteBucket(bucket);
      const props = await direct.getContainerClient(bucket).getProperties();
      expect(props.metadata?.fencegate_deleted).toBeDefined();
      expect((await backend.listBuckets()).map((b) => b.name)).not.toContain(bucket);
      await expect(put(backend, "other", "x", null)).rejects.toMatchObject({ code: "NoSuchBucket" });
      await expect(backend.getObject(bucket, "k")).rejects.toMatchObject({ code: "NoSuchBucket" });
      await expect(backend.listObjects({ bucket, maxKeys: 1 })).rejects.toMatchObject({
        code: "NoSuchBucket",
      });
      expect(await backend.highestToken(bucket, "k")).toBe(8);
      await backend.createBucket(bucket);
      await expect(backend.createBucket(bucket)).rejects.toMatchObject({ code: "BucketAlreadyOwnedByYou" });
      await expect(put(backend, "k", "stale", 7)).rejects.toBeInstanceOf(StaleTokenError);
    });

    it("keeps the HCT raised on a bucket that does not exist yet", async () => {
      const future = `fg-az-future-${randomUUID().slice(0, 8)}`;
      expect(await backend.raiseHighestToken(future, "k", 12)).toBe(12);
      await expect(backend.headBucket(future)).rejects.toMatchObject({ code: "NoSuchBucket" });
      await backend.createBucket(future);
      await expect(
        backend.putObject(
          { bucket: future, key: "k", body: verifiedBody("late"), metadata: metadataOf() },
          fencedCommit(11, { conditions: { ifNoneMatch: "*" } }),
        ),
      ).rejects.toBeInstanceOf(StaleTokenError);
    });

    it("refuses bucket names Azure containers cannot have", async () => {
      await expect(backend.createBucket("with.dots")).rejects.toMatchObject({
        code: "InvalidBucketName",
        message: expect.stringMatching(/no dots/),
      });
      await expect(backend.createBucket("double--hyphen")).rejects.toMatchObject({
        code: "InvalidBucketName",
      });
      await expect(backend.headBucket("with.dots")).rejects.toMatchObject({ code: "NoSuchBucket" });
    });

    it("aborts a bucket's uploads when it is deleted", async () => {
      await backend.multipart.createUpload(
        { bucket, key: "k", metadata: metadataOf(), token: null, leaseId: null, initiator: null },
        fencedCommit(null),
      );
      await backend.deleteBucket(bucket);
      await backend.createBucket(bucket);
      expect((await backend.multipart.listUploads({ bucket, maxUploads: 10 })).uploads).toEqual([]);
    });
  });

  describe("listing", () => {
    it("sorts non-ASCII keys in UTF-8 order inside and across delimited prefixes, hiding tombstones", async () => {
      const keys = ["d/\u{1F600}", "d/\uE000", "d/\uFF21", "d/a", "d/\u{1F601}/x", "e\u{1F600}", "e\uFFFD"];
      for (const key of keys) await put(backend, key, key, 1);
      await del(backend, "d/a", 2);
      const all = await backend.listObjects({ bucket, maxKeys: 100 });
      expect(all.objects.map((o) => o.key)).toEqual([
        "d/\uE000",
        "d/\uFF21",
        "d/\u{1F600}",
        "d/\u{1F601}/x",
        "e\uFFFD",
        "e\u{1F600}",
      ]);
      const grouped = await backend.listObjects({ bucket, prefix: "d/", delimiter: "/", maxKeys: 100 });
      expect(grouped.objects.map((o) => o.key)).toEqual(["d/\uE000", "d/\uFF21", "d/\u{1F600}"]);
      expect(grouped.commonPrefixes).toEqual(["d/\u{1F601}/"]);
      const seen: string[] = [];
      let startAfter: string | undefined;
      for (;;) {
        const page = await backend.listObjects({ bucket, maxKeys: 2, ...(startAfter ? { startAfter } : {}) });
        seen.push(...page.objects.map((o) => o.key));
        if (!page.isTruncated) break;
        startAfter = page.nextStartAfter;
      }
      expect(seen).toEqual(all.objects.map((o) => o.key));
    });
  });

  describe("credentials", () => {
    it("connects with accountUrl and an account key, or a SAS token", async () => {
      const { createAzureBackend } = await import("../../../src/backends/azure/index.js");
      const { AZURITE_ACCOUNT, AZURITE_KEY } = await import("../../support/azurite.js");
      const {
        AccountSASPermissions,
        AccountSASResourceTypes,
        AccountSASServices,
        StorageSharedKeyCredential,
        generateAccountSASQueryParameters,
      } = await import("@azure/storage-blob");
      const server = await azurite();
      const withKey = createAzureBackend({
        accountUrl: server.url,
        accountName: AZURITE_ACCOUNT,
        accountKey: AZURITE_KEY,
        multipartSweepIntervalMs: 0,
      });
      await put(withKey, "by-key", "k", 1);
      const sasToken = generateAccountSASQueryParameters(
        {
          expiresOn: new Date(Date.now() + 3_600_000),
          permissions: AccountSASPermissions.parse("rwdlacu"),
          resourceTypes: AccountSASResourceTypes.parse("sco").toString(),
          services: AccountSASServices.parse("b").toString(),
        },
        new StorageSharedKeyCredential(AZURITE_ACCOUNT, AZURITE_KEY),
      ).toString();
      const withSas = createAzureBackend({
        accountUrl: server.url,
        sasToken: `?${sasToken}`,
        multipartSweepIntervalMs: 0,
      });
      await withSas.ready();
      expect((await readAll((await withSas.getObject(bucket, "by-key")).body)).toString()).toBe("k");
      await put(withSas, "by-sas", "s", 2);
      expect(await content("by-sas")).toBe("s");
      expect(() => createAzureBackend({ multipartSweepIntervalMs: 0 })).toThrow(
        /exactly one of connectionString and accountUrl/,
      );
      await withKey.close();
      await withSas.close();
    });
  });

  describe("failures are S3 errors, never hangs", () => {
    it("answers ServiceUnavailable quickly when Azure is unreachable", async () => {
      const { freePort } = await import("../../support/redis.js");
      const port = await freePort();
      const { createAzureBackend } = await import("../../../src/backends/azure/index.js");
      const { azuriteConnectionString } = await import("../../support/azurite.js");
      const unreachable = createAzureBackend({
        connectionString: azuriteConnectionString(port),
        multipartSweepIntervalMs: 0,
      });
      const started = Date.now();
      await expect(unreachable.headBucket("b-unreachable")).rejects.toMatchObject({
        code: "ServiceUnavailable",
      });
      await expect(
        unreachable.putObject(
          { bucket: "b-unreachable", key: "k", body: verifiedBody("x"), metadata: metadataOf() },
          fencedCommit(1),
        ),
      ).rejects.toMatchObject({ code: "ServiceUnavailable" });
      await expect(unreachable.getObject("b-unreachable", "k")).rejects.toMatchObject({
        code: "ServiceUnavailable",
      });
      expect(Date.now() - started).toBeLessThan(5_000);
      await unreachable.close();
    });

    it("answers ServiceUnavailable after requestTimeoutMs when Azure accepts but never answers", async () => {
      const { createServer } = await import("node:net");
      const sockets = new Set<import("node:net").Socket>();
      const silent = createServer((socket) => {
        sockets.add(socket);
        socket.on("error", () => undefined);
      });
      await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
      const port = (silent.address() as { port: number }).port;
      const { createAzureBackend } = await import("../../../src/backends/azure/index.js");
      const { azuriteConnectionString } = await import("../../support/azurite.js");
      const stuck = createAzureBackend({
        connectionString: azuriteConnectionString(port),
        requestTimeoutMs: 300,
        multipartSweepIntervalMs: 0,
      });
      const started = Date.now();
      await expect(stuck.headObject("b-stuck", "k")).rejects.toMatchObject({
        code: "ServiceUnavailable",
        message: expect.stringMatching(/did not answer within 300 ms/),
      });
      expect(Date.now() - started).toBeLessThan(3_000);
      await stuck.close();
      for (const socket of sockets) socket.destroy();
      silent.close();
    });

    it("aborts a GET when its signal is aborted, before and during the body", async () => {
      const data = Buffer.alloc(16 * 1024 * 1024, 3);
      await put(backend, "stream", data, null);
      const early = new AbortController();
      early.abort();
      await expect(backend.getObject(bucket, "stream", undefined, early.signal)).rejects.toThrow();

      const controller = new AbortController();
      const got = await backend.getObject(bucket, "stream", undefined, controller.signal);
      let received = 0;
      const reading = (async () => {
        for await (const chunk of got.body) {
          received += (chunk as Buffer).length;
          if (received > 0 && !controller.signal.aborted) controller.abort();
        }
      })();
      await expect(reading).rejects.toThrow();
      expect(received).toBeLessThan(data.length);
    });
  });

  describe("multipart", () => {
    it("streams parts into the object's blocks when the service has no Stage Block From URL", async () => {
      const uploadId = (
        await backend.multipart.createUpload(
          { bucket, key: "mp", metadata: metadataOf({ m: "1" }), token: 4, leaseId: "l", initiator: null },
          fencedCommit(4),
        )
      ).uploadId;
      const a = Buffer.alloc(5 * 1024 * 1024, 1);
      const p1 = await backend.multipart.uploadPart(
        { bucket, key: "mp", uploadId, partNumber: 1, body: verifiedBody(a) },
        fencedCommit(4),
      );
      const p2 = await backend.multipart.uploadPart(
        { bucket, key: "mp", uploadId, partNumber: 2, body: verifiedBody("tail") },
        fencedCommit(4),
      );
      const done = await backend.multipart.completeUpload(
        {
          bucket,
          key: "mp",
          uploadId,
          parts: [
            { partNumber: 1, etag: p1.etag },
            { partNumber: 2, etag: p2.etag },
          ],
        },
        fencedCommit(4),
      );
      expect(done).toMatchObject({ size: a.length + 4, highestToken: 4 });
      expect(
        (await readAll((await backend.getObject(bucket, "mp")).body)).equals(
          Buffer.concat([a, Buffer.from("tail")]),
        ),
      ).toBe(true);
      // Azurite answered Stage Block From URL with 501: the backend streamed, and remembers it.
      const hints = (backend as unknown as { store: { hints: { stageFromUrl?: boolean } } }).store.hints;
      expect(hints.stageFromUrl).toBe(false);
      const names: string[] = [];
      for await (const item of direct.getContainerClient(bucket).listBlobsFlat()) names.push(item.name);
      expect(names).toEqual(["mp"]);
    });
  });
});
