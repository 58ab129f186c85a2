import { describe, expect, it } from "vitest";
import { type LiveObject, MemoryObjects } from "../../../src/backends/memory/memory-objects.js";
import { MemoryUploads, type PartRecord, toUpload } from "../../../src/backends/memory/memory-uploads.js";
import { MemoryDomain } from "../../../src/core/tx.js";
import { metadataOf } from "../../support/bodies.js";

/**
 * Through the backend's API, a commit's `atomic` runs before the backend changes anything. A
 * step of a shared domain may still throw after those changes (a later component's part of the
 * step), so every change must be undoable: these tests make the changes, then throw.
 */
describe("memory backend undo", () => {
  const version = (text: string): LiveObject => ({
    bytes: Buffer.from(text),
    size: text.length,
    etag: `"${text}"`,
    lastModified: 1,
    metadata: metadataOf({ text }),
  });

  const part = (partNumber: number, text: string): PartRecord => ({
    partNumber,
    bytes: Buffer.from(text),
    size: text.length,
    md5Hex: text,
    lastModified: 1,
  });

  // The step port's parts, as the commit driver calls them inside a step.
  const put = (objects: MemoryObjects, bucket: string, key: string, live: LiveObject, hct: number | null) =>
    objects.apply(bucket, key, objects.stateOf(bucket, key, true).record, {
      kind: "put",
      version: live,
      hct,
      writeId: "w",
    });
  const del = (objects: MemoryObjects, bucket: string, key: string, hct: number | null) =>
    objects.apply(bucket, key, objects.stateOf(bucket, key, true).record, {
      kind: "delete",
      hct,
      writeId: "w",
    });
  const raise = (objects: MemoryObjects, bucket: string, key: string, hct: number) =>
    objects.apply(bucket, key, objects.stateOf(bucket, key, false).record, {
      kind: "keep",
      hct,
      writeId: "w",
    });

  const open = async () => {
    const domain = new MemoryDomain();
    const objects = new MemoryObjects(domain);
    const uploads = new MemoryUploads(domain);
    const upload = {
      bucket: "b",
      key: "up",
      metadata: metadataOf(),
      token: 1,
      leaseId: null,
      initiator: null,
    };
    await domain.run(() => {
      objects.createBucket("b", 1);
      objects.createBucket("empty", 1);
      put(objects, "b", "k", version("v1"), 2);
      del(objects, "b", "gone", 3);
      uploads.insertUpload({ ...upload, uploadId: "u1", initiated: 1 });
      uploads.recordPart({ ...upload, uploadId: "u1" }, part(1, "p1"));
    });
    return { domain, objects, uploads, upload };
  };

  /** Everything a reader of the stores can observe. */
  const observe = ({ objects, uploads }: Awaited<ReturnType<typeof open>>) => {
    const everything = { key: "", inclusive: true };
    const byBucket = (bucket: string) => ({
      objects: [...objects.seeker(bucket)(everything)],
      uploads: [...uploads.seeker(bucket)(everything)].map((u) => ({
        ...toUpload(u),
        parts: uploads.parts(u),
      })),
      hcts: ["k", "gone", "new", "up", "z"].map((key) => objects.highestToken(bucket, key)),
    });
    return {
      buckets: objects.buckets(),
      b: byBucket("b"),
      c: byBucket("c"),
      nowhere: byBucket("nowhere"),
      storedParts: uploads.storedParts(),
    };
  };

  it("takes back every kind of change when the step throws after them", async () => {
    const fx = await open();
    const { domain, objects, uploads, upload } = fx;
    const before = observe(fx);
    const later = new Error("a later part of the step refused");
    await expect(
      domain.run(() => {
        objects.createBucket("c", 2);
        put(objects, "c", "new", version("c1"), 1);
        put(objects, "b", "k", version("v2"), 5);
        del(objects, "b", "k", 6);
        put(objects, "b", "gone", version("back"), 7);
        raise(objects, "nowhere", "z", 9);
        raise(objects, "b", "up", 4);
        objects.deleteBucket("empty");
        uploads.recordPart({ ...upload, uploadId: "u1" }, part(1, "p1 again"));
        uploads.recordPart({ ...upload, uploadId: "u1" }, part(2, "p2"));
        uploads.insertUpload({ ...upload, uploadId: "u2", initiated: 2 });
        const [replaced] = uploads.parts(uploads.requireUpload({ ...upload, uploadId: "u1" }));
        uploads.completeInStep({ ...upload, uploadId: "u1" }, [replaced!]);
        put(objects, "b", "up", { ...version("assembled"), etag: '"assembled-1"', lastModified: 2 }, 4);
        uploads.removeInitiatedBefore(10);
        throw later;
      }),
    ).rejects.toBe(later);
    expect(observe(fx)).toEqual(before);
    expect(objects.bucket("c")).toBeNull();
    expect(objects.bucket("empty")).not.toBeNull();
  });

  it("keeps the changes of a step that completes", async () => {
    const fx = await open();
    const { domain, objects } = fx;
    await domain.run(() => del(objects, "b", "k", 8));
    expect(objects.highestToken("b", "k")).toBe(8);
    expect(objects.writeState("b", "k")).toEqual({ highestToken: 8, etag: null });
  });
});
