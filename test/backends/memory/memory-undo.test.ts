import { describe, expect, it } from "vitest";
import { type LiveObject, MemoryObjects } from "../../../src/backends/memory/memory-objects.js";
import { MemoryUploads, type PartRecord, toUpload } from "../../../src/backends/memory/memory-uploads.js";
import { MemoryDomain } from "../../../src/core/tx.js";
import { fencedCommit, unfencedCommit } from "../../../src/fence/commit.js";
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

  const open = async () => {
    const domain = new MemoryDomain();
    const objects = new MemoryObjects(domain);
    const uploads = new MemoryUploads(domain, objects);
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
      objects.commitPut({ bucket: "b", key: "k", ...version("v1"), commit: fencedCommit(2) });
      objects.commitDelete("b", "gone", fencedCommit(3));
      uploads.insertUpload({ ...upload, uploadId: "u1", initiated: 1 }, unfencedCommit());
      uploads.recordPart({ ...upload, uploadId: "u1" }, part(1, "p1"), unfencedCommit());
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
        objects.commitPut({ bucket: "c", key: "new", ...version("c1"), commit: fencedCommit(1) });
        objects.commitPut({ bucket: "b", key: "k", ...version("v2"), commit: fencedCommit(5) });
        objects.commitDelete("b", "k", fencedCommit(6));
        objects.commitPut({ bucket: "b", key: "gone", ...version("back"), commit: fencedCommit(7) });
        objects.raiseHighestToken("nowhere", "z", 9);
        objects.raiseHighestToken("b", "up", 4);
        objects.deleteBucket("empty");
        uploads.recordPart({ ...upload, uploadId: "u1" }, part(1, "p1 again"), unfencedCommit());
        uploads.recordPart({ ...upload, uploadId: "u1" }, part(2, "p2"), unfencedCommit());
        uploads.insertUpload({ ...upload, uploadId: "u2", initiated: 2 }, unfencedCommit());
        const [replaced] = uploads.parts(uploads.requireUpload({ ...upload, uploadId: "u1" }));
        uploads.commitComplete({
          ref: { ...upload, uploadId: "u1" },
          used: [replaced!],
          bytes: Buffer.from("assembled"),
          etag: '"assembled-1"',
          lastModified: 2,
          commit: fencedCommit(4),
        });
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
    await domain.run(() => objects.commitDelete("b", "k", fencedCommit(8)));
    expect(objects.highestToken("b", "k")).toBe(8);
    expect(objects.writeState("b", "k")).toEqual({ highestToken: 8, etag: null });
  });
});
