import { createHash, randomBytes, randomUUID } from "node:crypto";
import { Readable } from "node:stream";
import { setImmediate } from "node:timers/promises";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { multipartEtag } from "../../src/backends/multipart.js";
import {
  type FencedCommit,
  MIN_PART_SIZE,
  type MultipartStore,
  type StorageBackend,
  type WriteConditions,
} from "../../src/backends/storage-backend.js";
import type { fakeClock } from "../../src/core/clock.js";
import { DomainError, StaleTokenError } from "../../src/core/errors.js";
import { fencedCommit } from "../../src/fence/commit.js";
import { failingVerifiedBody, md5Etag, metadataOf, readAll, sleep, verifiedBody } from "../support/bodies.js";
import type { BackendFixture } from "./storage-backend.contract.js";

/**
 * The conformance suite of every backend's MultipartStore (fs, s3, azure): assembly, S3's rules
 * for part numbers and part lists, listings, the age sweep, and the fencing rules the backend owns
 * (an upload records its binding; creation and parts check the HCT without raising it; the HCT
 * check is atomic with the completion, and a refused completion changes nothing).
 */

/** Backends under this suite abort uploads initiated longer ago than this in sweepAbandoned(). */
export const MULTIPART_MAX_AGE_MS = 60_000;

export type MultipartFixture = BackendFixture & {
  /** The backend's clock, when the suite can move it (upload initiation times, the age sweep). */
  clock?: ReturnType<typeof fakeClock>;
  /** Aborts uploads initiated more than MULTIPART_MAX_AGE_MS ago. */
  sweepAbandoned?: () => Promise<{ removed: number }>;
  /** How many parts the backend still holds for live uploads (expected: none after completion or abort). */
  storedParts?: () => Promise<number>;
};

export type MultipartFactory = () => Promise<MultipartFixture>;

export function describeMultipartContract(name: string, factory: MultipartFactory): void {
  describe(`MultipartStore contract: ${name}`, () => {
    const KEY = "big/object.bin";
    let fx: MultipartFixture;
    let backend: StorageBackend;
    let bucket: string;

    beforeEach(async () => {
      fx = await factory();
      backend = fx.backend;
      bucket = `fg-mpu-${randomUUID().slice(0, 13)}`;
      await backend.createBucket(bucket);
    });

    afterEach(async () => {
      await fx.cleanup();
    });

    const mp = (): MultipartStore => backend.multipart;
    const missingBucket = () => `fg-missing-${randomUUID().slice(0, 8)}`;

    const create = async (
      token: number | null = 5,
      key = KEY,
      leaseId: string | null = "lease-a",
      commit: Partial<FencedCommit> = {},
    ) =>
      (
        await mp().createUpload(
          {
            bucket,
            key,
            metadata: metadataOf({ color: "blue" }, { headers: { contentType: "application/x-test" } }),
            token,
            leaseId: token === null ? null : leaseId,
            initiator: "tester",
          },
          fencedCommit(token, commit),
        )
      ).uploadId;

    const part = (
      uploadId: string,
      partNumber: number,
      data: Buffer,
      token: number | null = 5,
      commit: Partial<FencedCommit> = {},
    ) =>
      mp().uploadPart(
        { bucket, key: KEY, uploadId, partNumber, body: verifiedBody(data, {}, 256 * 1024) },
        fencedCommit(token, commit),
      );

    const complete = (
      uploadId: string,
      parts: { partNumber: number; etag: string }[],
      token: number | null = 5,
      options: { commit?: Partial<FencedCommit>; conditions?: WriteConditions } = {},
    ) =>
      mp().completeUpload(
        { bucket, key: KEY, uploadId, parts },
        fencedCommit(token, { conditions: options.conditions ?? {}, ...options.commit }),
      );

    const put = (data: string | Buffer, token: number | null) =>
      backend.putObject(
        { bucket, key: KEY, body: verifiedBody(data), metadata: metadataOf() },
        fencedCommit(token),
      );

    const content = async () => readAll((await backend.getObject(bucket, KEY)).body);

    const listedParts = async (uploadId: string) =>
      (await mp().listParts({ bucket, key: KEY, uploadId, maxParts: 1000 })).parts;

    const rejection = async (promise: Promise<unknown>): Promise<DomainError> => {
      const err = await promise.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(DomainError);
      return err as DomainError;
    };

    const expectNoLeftovers = async () => {
      if (fx.leftovers) expect(await fx.leftovers()).toEqual([]);
    };

    const expectStoredParts = async (count: number) => {
      if (fx.storedParts) expect(await fx.storedParts()).toBe(count);
    };

    /** Two parts: one of exactly the minimum size and a short last one. */
    const twoParts = async (uploadId: string, token: number | null = 5) => {
      const a = randomBytes(MIN_PART_SIZE);
      const b = randomBytes(123_457);
      const ra = await part(uploadId, 1, a, token);
      const rb = await part(uploadId, 2, b, token);
      return { a, b, parts: [ra, rb].map((r, i) => ({ partNumber: i + 1, etag: r.etag })) };
    };

    it("assembles the parts in order into one object with S3's multipart ETag", async () => {
      const uploadId = await create(5);
      const { a, b, parts } = await twoParts(uploadId);
      expect(parts[0]!.etag).toBe(md5Etag(a));

      const result = await complete(uploadId, parts);
      const md5s = [a, b].map((d) => createHash("md5").update(d).digest("hex"));
      expect(result.etag).toBe(multipartEtag(md5s));
      expect(result.etag).toMatch(/^"[0-9a-f]{32}-2"$/);
      expect(result).toMatchObject({ size: a.length + b.length, highestToken: 5 });

      expect((await content()).equals(Buffer.concat([a, b]))).toBe(true);
      const info = await backend.headObject(bucket, KEY);
      expect(info).toMatchObject({ etag: result.etag, size: a.length + b.length });
      expect(info.userMetadata).toEqual({ color: "blue" });
      expect(info.headers.contentType).toBe("application/x-test");
      expect(await backend.highestToken(bucket, KEY)).toBe(5);

      // The upload and its parts are gone.
      await expect(mp().getUpload({ bucket, key: KEY, uploadId })).rejects.toMatchObject({
        code: "NoSuchUpload",
      });
      await expectNoLeftovers();
      await expectStoredParts(0);
    });

    it("uses only the listed parts, accepts unquoted ETags, and takes a single small part", async () => {
      const uploadId = await create(5);
      const one = await part(uploadId, 3, Buffer.from("only part"));
      await part(uploadId, 7, Buffer.from("not listed"));
      const result = await complete(uploadId, [{ partNumber: 3, etag: one.etag.replaceAll('"', "") }]);
      expect((await content()).toString()).toBe("only part");
      expect(result.etag).toMatch(/-1"$/);
      // The unlisted part is removed too.
      await expectNoLeftovers();
      await expectStoredParts(0);
    });

    it("replaces a part uploaded again under the same number", async () => {
      const uploadId = await create(5);
      await part(uploadId, 1, Buffer.from("first version"));
      const second = await part(uploadId, 1, Buffer.from("second"));
      expect(await listedParts(uploadId)).toEqual([
        { partNumber: 1, size: 6, etag: second.etag, lastModified: expect.any(Date) },
      ]);
      await expectNoLeftovers();
      await expectStoredParts(1);
      await complete(uploadId, [{ partNumber: 1, etag: second.etag }]);
      expect((await content()).toString()).toBe("second");
    });

    it("keeps the whole part of the request that finished last when one part is uploaded twice at once", async () => {
      const uploadId = await create(5);
      // Several blocks or chunks each, so that a mix of the two bodies would show.
      const first = randomBytes(10 * 1024 * 1024 + 123);
      const second = randomBytes(5 * 1024 * 1024 + 7);
      // The first request sends half its body, waits while the second one is uploaded whole, then ends.
      let release!: () => void;
      const gate = new Promise<void>((resolve) => {
        release = resolve;
      });
      const half = Math.floor(first.length / 2);
      let halfSent!: () => void;
      const halfway = new Promise<void>((resolve) => {
        halfSent = resolve;
      });
      const slow = Readable.from(
        (async function* chunks() {
          for (let at = 0; at < first.length; at += 256 * 1024) {
            if (at >= half) {
              halfSent();
              await gate;
            }
            yield first.subarray(at, Math.min(at + 256 * 1024, first.length));
            await setImmediate();
          }
        })(),
        { objectMode: false },
      );
      let digested!: (d: { size: number; checksums: Record<string, never> }) => void;
      const digest = new Promise<{ size: number; checksums: Record<string, never> }>((resolve) => {
        digested = resolve;
      });
      slow.once("end", () => digested({ size: first.length, checksums: {} }));
      const firstUpload = mp().uploadPart(
        { bucket, key: KEY, uploadId, partNumber: 1, body: { stream: slow, digest } },
        fencedCommit(5),
      );
      await halfway;
      await sleep(100);
      const secondUpload = await part(uploadId, 1, second);
      expect(secondUpload.etag).toBe(md5Etag(second));
      release();
      const firstDone = await firstUpload;
      expect(firstDone.etag).toBe(md5Etag(first));
      expect(await listedParts(uploadId)).toEqual([
        { partNumber: 1, size: first.length, etag: md5Etag(first), lastModified: expect.any(Date) },
      ]);
      await complete(uploadId, [{ partNumber: 1, etag: firstDone.etag }]);
      const stored = await content();
      expect(stored.length).toBe(first.length);
      expect(stored.equals(first)).toBe(true);
      await expectNoLeftovers();
    });

    it("refuses part lists that S3 refuses: order, unknown parts, wrong ETags, small parts", async () => {
      const uploadId = await create(5);
      const { parts } = await twoParts(uploadId);
      const small = await part(uploadId, 3, Buffer.from("tiny"));

      const refusal = async (list: { partNumber: number; etag: string }[]) =>
        (await rejection(complete(uploadId, list))).code;
      expect(await refusal([parts[1]!, parts[0]!])).toBe("InvalidPartOrder");
      expect(await refusal([parts[0]!, parts[0]!])).toBe("InvalidPartOrder");
      expect(await refusal([parts[0]!, { partNumber: 4, etag: parts[1]!.etag }])).toBe("InvalidPart");
      expect(await refusal([parts[0]!, { partNumber: 2, etag: parts[0]!.etag }])).toBe("InvalidPart");
      expect(await refusal([{ partNumber: 0, etag: parts[0]!.etag }])).toBe("InvalidPart");
      const tooSmall = await rejection(complete(uploadId, [parts[1]!, { partNumber: 3, etag: small.etag }]));
      expect(tooSmall.code).toBe("EntityTooSmall");
      expect(tooSmall.details).toMatchObject({ partNumber: 2, proposedSize: 123_457 });
      expect((await rejection(complete(uploadId, []))).code).toBe("MalformedXML");

      // Nothing was written, the upload is intact and can still complete.
      await expect(backend.headObject(bucket, KEY)).rejects.toMatchObject({ code: "NoSuchKey" });
      await expectNoLeftovers();
      await complete(uploadId, [parts[0]!, { partNumber: 3, etag: small.etag }]);
      expect((await backend.headObject(bucket, KEY)).size).toBe(MIN_PART_SIZE + 4);
    });

    it("refuses part numbers outside 1..10000", async () => {
      const uploadId = await create(5);
      for (const n of [0, 10_001, -1, 1.5]) {
        expect((await rejection(part(uploadId, n, Buffer.from("x")))).code).toBe("InvalidArgument");
      }
      expect((await part(uploadId, 10_000, Buffer.from("x"))).size).toBe(1);
    });

    it("answers NoSuchUpload for unknown, aborted and completed uploads, and for another key", async () => {
      const unknown = "0".repeat(44);
      expect((await rejection(part(unknown, 1, Buffer.from("x")))).code).toBe("NoSuchUpload");

      const aborted = await create(5);
      await part(aborted, 1, Buffer.from("x"));
      await mp().abortUpload({ bucket, key: KEY, uploadId: aborted });
      await expectNoLeftovers();
      await expectStoredParts(0);
      expect((await rejection(part(aborted, 1, Buffer.from("x")))).code).toBe("NoSuchUpload");
      expect((await rejection(complete(aborted, [{ partNumber: 1, etag: md5Etag("x") }]))).code).toBe(
        "NoSuchUpload",
      );
      expect((await rejection(mp().abortUpload({ bucket, key: KEY, uploadId: aborted }))).code).toBe(
        "NoSuchUpload",
      );

      const done = await create(5);
      const p = await part(done, 1, Buffer.from("y"));
      await complete(done, [{ partNumber: 1, etag: p.etag }]);
      expect((await rejection(complete(done, [{ partNumber: 1, etag: p.etag }]))).code).toBe("NoSuchUpload");

      const other = await create(5, "other-key");
      expect((await rejection(part(other, 1, Buffer.from("x")))).code).toBe("NoSuchUpload");
      expect(
        (await rejection(mp().listParts({ bucket, key: KEY, uploadId: other, maxParts: 10 }))).code,
      ).toBe("NoSuchUpload");
    });

    describe("fencing", () => {
      it("records the lease an upload was created under (its binding), and takes unfenced parts of an unfenced upload", async () => {
        // The fencing core checks parts and completions against this binding (src/fence/multipart-rules.ts).
        const uploadId = await create(5);
        expect(await mp().getUpload({ bucket, key: KEY, uploadId })).toMatchObject({
          token: 5,
          leaseId: "lease-a",
        });
        const unfenced = await create(null);
        expect(await mp().getUpload({ bucket, key: KEY, uploadId: unfenced })).toMatchObject({
          token: null,
          leaseId: null,
        });
        const p = await part(unfenced, 1, Buffer.from("unfenced"), null);
        await complete(unfenced, [{ partNumber: 1, etag: p.etag }], null);
        expect((await content()).toString()).toBe("unfenced");
        await expectNoLeftovers();
      });

      it("checks the HCT at creation without raising it", async () => {
        await put("v7", 7);
        const stale = await rejection(create(6));
        expect(stale).toBeInstanceOf(StaleTokenError);
        expect(stale.details.highestToken).toBe(7);
        expect((await mp().listUploads({ bucket, maxUploads: 10 })).uploads).toEqual([]);

        await create(9);
        expect(await backend.highestToken(bucket, KEY)).toBe(7);
        const created = (await mp().listUploads({ bucket, maxUploads: 10 })).uploads;
        expect(created).toMatchObject([{ key: KEY, token: 9, leaseId: "lease-a", initiator: "tester" }]);
        await expect(
          mp().createUpload(
            {
              bucket: missingBucket(),
              key: KEY,
              metadata: metadataOf(),
              token: null,
              leaseId: null,
              initiator: null,
            },
            fencedCommit(null),
          ),
        ).rejects.toMatchObject({ code: "NoSuchBucket" });
      });

      it("checks the HCT for a part without raising it", async () => {
        const uploadId = await create(5);
        await put("newer", 7);
        const stale = await rejection(part(uploadId, 1, Buffer.from("stale part"), 5));
        expect(stale).toBeInstanceOf(StaleTokenError);
        expect(stale.details.highestToken).toBe(7);
        expect(await listedParts(uploadId)).toEqual([]);
        // The backend checks only the HCT rule; the upload's binding is the fencing core's to check.
        const accepted = await part(uploadId, 1, Buffer.from("newer part"), 9);
        expect(accepted.highestToken).toBe(7);
        expect(await backend.highestToken(bucket, KEY)).toBe(7);
        expect((await content()).toString()).toBe("newer");
      });

      it("a completion refused by the HCT leaves the earlier object intact and the upload abortable", async () => {
        const uploadId = await create(5);
        const { parts } = await twoParts(uploadId);
        await put("written by the newer lease holder", 7); // token 7 commits after the upload began

        const refused = await rejection(complete(uploadId, parts));
        expect(refused).toBeInstanceOf(StaleTokenError);
        expect(refused.details.highestToken).toBe(7);
        expect((await content()).toString()).toBe("written by the newer lease holder");
        expect(await backend.highestToken(bucket, KEY)).toBe(7);
        await expectNoLeftovers(); // the assembled object is gone

        // The upload is still there (its parts too) and can be aborted.
        expect(await listedParts(uploadId)).toHaveLength(2);
        await mp().abortUpload({ bucket, key: KEY, uploadId });
        await expectNoLeftovers();
        await expectStoredParts(0);
      });

      it("checks the HCT atomically with the completion's commit", async () => {
        await put("v1", 1);
        const uploadId = await create(5);
        const { parts } = await twoParts(uploadId);
        // A newer writer commits after the completion's early checks and its assembly, right
        // before its commit: only a check inside the commit itself can see it.
        const commit = {
          prepare: async () => {
            await put("racing write", 8);
          },
        };
        const refused = await rejection(complete(uploadId, parts, 5, { commit }));
        expect(refused).toBeInstanceOf(StaleTokenError);
        expect((await content()).toString()).toBe("racing write");
        expect(await backend.highestToken(bucket, KEY)).toBe(8);
        await expectNoLeftovers();
      });

      it("a prepare refusal (lost lease) changes nothing", async () => {
        await put("earlier", 2);
        const uploadId = await create(5);
        const { parts } = await twoParts(uploadId);
        const lost = new DomainError("LeaseExpired", "the lease expired");
        const commit = { prepare: () => Promise.reject(lost) };
        await expect(complete(uploadId, parts, 5, { commit })).rejects.toBe(lost);
        expect((await content()).toString()).toBe("earlier");
        expect(await backend.highestToken(bucket, KEY)).toBe(2);
        // A part refused by the hook is not recorded either.
        await expect(part(uploadId, 3, Buffer.from("late"), 5, commit)).rejects.toBe(lost);
        expect(await listedParts(uploadId)).toHaveLength(2);
        await expectNoLeftovers();
      });

      it("refuses a completion whose part was replaced or whose upload was aborted meanwhile", async () => {
        await put("earlier", 2);
        const uploadId = await create(5);
        const { parts } = await twoParts(uploadId);
        const replace = { prepare: async () => void (await part(uploadId, 2, Buffer.from("replaced"))) };
        expect((await rejection(complete(uploadId, parts, 5, { commit: replace }))).code).toBe("InvalidPart");
        expect((await content()).toString()).toBe("earlier");

        const current = (await listedParts(uploadId)).map((p) => ({
          partNumber: p.partNumber,
          etag: p.etag,
        }));
        const abort = { prepare: () => mp().abortUpload({ bucket, key: KEY, uploadId }) };
        expect((await rejection(complete(uploadId, current, 5, { commit: abort }))).code).toBe(
          "NoSuchUpload",
        );
        expect((await content()).toString()).toBe("earlier");
        await expectNoLeftovers();
      });

      it("applies If-Match / If-None-Match at completion", async () => {
        const existing = await put("existing", 1);
        const uploadId = await create(5);
        const p = await part(uploadId, 1, Buffer.from("new"));
        const list = [{ partNumber: 1, etag: p.etag }];
        const noneMatch = await rejection(complete(uploadId, list, 5, { conditions: { ifNoneMatch: "*" } }));
        expect(noneMatch.code).toBe("PreconditionFailed");
        const match = await rejection(complete(uploadId, list, 5, { conditions: { ifMatch: '"nope"' } }));
        expect(match.code).toBe("PreconditionFailed");
        expect((await content()).toString()).toBe("existing");
        await complete(uploadId, list, 5, { conditions: { ifMatch: existing.etag } });
        expect((await content()).toString()).toBe("new");
      });

      it("calls atomic in every step with the HCT it leaves (never when the backend has no domain)", async () => {
        await put("v3", 3);
        const seen: Array<number | null> = [];
        const atomic = (outcome: { highestToken: number | null }) => {
          seen.push(outcome.highestToken);
        };
        const uploadId = await create(5, KEY, "lease-a", { atomic });
        const p = await part(uploadId, 1, Buffer.from("body"), 5, { atomic });
        await complete(uploadId, [{ partNumber: 1, etag: p.etag }], 5, { commit: { atomic } });
        // Creation and parts leave the HCT as it was; the completion raises it.
        if (backend.domain) expect(seen).toEqual([3, 3, 5]);
        else expect(seen).toEqual([]);
      });

      it("changes nothing when atomic throws (backends with a domain)", async (ctx) => {
        if (!backend.domain) ctx.skip(); // remote stores run no code inside their conditional write
        await put("earlier", 2);
        const refusal = new DomainError("StaleFencingToken", "superseded inside the step");
        const atomic = () => {
          throw refusal;
        };
        await expect(create(5, KEY, "lease-a", { atomic })).rejects.toBe(refusal);
        expect((await mp().listUploads({ bucket, maxUploads: 10 })).uploads).toEqual([]);

        const uploadId = await create(5);
        const kept = await part(uploadId, 1, Buffer.from("kept"));
        await expect(part(uploadId, 1, Buffer.from("refused"), 5, { atomic })).rejects.toBe(refusal);
        await expect(part(uploadId, 2, Buffer.from("refused"), 5, { atomic })).rejects.toBe(refusal);
        expect((await listedParts(uploadId)).map((p) => p.etag)).toEqual([kept.etag]);

        const list = [{ partNumber: 1, etag: kept.etag }];
        await expect(complete(uploadId, list, 5, { commit: { atomic } })).rejects.toBe(refusal);
        expect((await content()).toString()).toBe("earlier");
        expect(await backend.highestToken(bucket, KEY)).toBe(2);
        expect((await mp().getUpload({ bucket, key: KEY, uploadId })).uploadId).toBe(uploadId);
        await expectNoLeftovers();
        await complete(uploadId, list);
        expect((await content()).toString()).toBe("kept");
      });

      it("commits no part and no completion once the request was aborted", async () => {
        await put("earlier", 2);
        const uploadId = await create(5);
        const kept = await part(uploadId, 1, Buffer.from("kept"));
        const controller = new AbortController();
        controller.abort();
        const { signal } = controller;
        await expect(part(uploadId, 2, Buffer.from("abandoned"), 5, { signal })).rejects.toThrow();
        const list = [{ partNumber: 1, etag: kept.etag }];
        await expect(complete(uploadId, list, 5, { commit: { signal } })).rejects.toThrow();
        expect((await listedParts(uploadId)).map((p) => p.partNumber)).toEqual([1]);
        expect((await content()).toString()).toBe("earlier");
        expect(await backend.highestToken(bucket, KEY)).toBe(2);
        await expectNoLeftovers();
      });
    });

    it("lists parts in pages", async () => {
      const uploadId = await create(5);
      for (const n of [4, 1, 9, 2, 7]) await part(uploadId, n, Buffer.from(`part ${n}`));
      const ref = { bucket, key: KEY, uploadId };
      const first = await mp().listParts({ ...ref, maxParts: 2 });
      expect(first.parts.map((p) => p.partNumber)).toEqual([1, 2]);
      expect(first).toMatchObject({ isTruncated: true, nextPartNumberMarker: 2 });
      expect(first.upload).toMatchObject({
        uploadId,
        key: KEY,
        token: 5,
        metadata: { userMetadata: { color: "blue" } },
      });
      const second = await mp().listParts({ ...ref, maxParts: 2, partNumberMarker: 2 });
      expect(second.parts.map((p) => p.partNumber)).toEqual([4, 7]);
      const last = await mp().listParts({ ...ref, maxParts: 2, partNumberMarker: 7 });
      expect(last.parts.map((p) => p.partNumber)).toEqual([9]);
      expect(last.isTruncated).toBe(false);
      expect(last.nextPartNumberMarker).toBeUndefined();
      // A page that ends with the last part is not truncated either.
      const exact = await mp().listParts({ ...ref, maxParts: 2, partNumberMarker: 4 });
      expect(exact.parts.map((p) => p.partNumber)).toEqual([7, 9]);
      expect(exact.isTruncated).toBe(false);
      expect(exact.nextPartNumberMarker).toBeUndefined();
    });

    it("lists uploads by key, then by initiation, with prefix, delimiter and both markers", async () => {
      const ids: Record<string, string> = {};
      for (const name of ["b", "a#1", "a#2", "dir/x", "dir/y", "c"]) {
        fx.clock?.advance(1000);
        ids[name] = await create(null, name.replace(/#\d$/, ""));
      }
      const all = await mp().listUploads({ bucket, maxUploads: 100 });
      expect(all.uploads.map((u) => u.uploadId)).toEqual(
        ["a#1", "a#2", "b", "c", "dir/x", "dir/y"].map((n) => ids[n]),
      );
      expect(all.isTruncated).toBe(false);

      const page1 = await mp().listUploads({ bucket, maxUploads: 1 });
      expect(page1).toMatchObject({ isTruncated: true, nextKeyMarker: "a", nextUploadIdMarker: ids["a#1"] });
      const page2 = await mp().listUploads({
        bucket,
        maxUploads: 2,
        keyMarker: "a",
        uploadIdMarker: ids["a#1"]!,
      });
      expect(page2.uploads.map((u) => u.uploadId)).toEqual([ids["a#2"], ids["b"]]);
      const afterKey = await mp().listUploads({ bucket, maxUploads: 10, keyMarker: "a" });
      expect(afterKey.uploads.map((u) => u.key)).toEqual(["b", "c", "dir/x", "dir/y"]);

      const grouped = await mp().listUploads({ bucket, maxUploads: 10, delimiter: "/" });
      expect(grouped.uploads.map((u) => u.key)).toEqual(["a", "a", "b", "c"]);
      expect(grouped.commonPrefixes).toEqual(["dir/"]);
      const prefixed = await mp().listUploads({ bucket, maxUploads: 10, prefix: "dir/" });
      expect(prefixed.uploads.map((u) => u.key)).toEqual(["dir/x", "dir/y"]);
      await expect(mp().listUploads({ bucket: missingBucket(), maxUploads: 1 })).rejects.toMatchObject({
        code: "NoSuchBucket",
      });
    });

    it("orders uploads of one key created within one millisecond by initiation", async () => {
      const ids: string[] = [];
      // With a clock the suite holds, every upload has the same initiation time.
      for (let i = 0; i < 20; i++) ids.push(await create(null, "same"));
      for (const id of ids) expect(id).toMatch(/^[0-9a-f]{44}$/);
      const listed = await mp().listUploads({ bucket, maxUploads: 100 });
      expect(listed.uploads.map((u) => u.uploadId)).toEqual(ids);
    });

    it("continues after an upload id marker whose upload is gone by now", async () => {
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) {
        fx.clock?.advance(1000);
        ids.push(await create(null, "same"));
      }
      const page1 = await mp().listUploads({ bucket, maxUploads: 1 });
      expect(page1).toMatchObject({ nextKeyMarker: "same", nextUploadIdMarker: ids[0] });
      await mp().abortUpload({ bucket, key: "same", uploadId: ids[0]! });
      const page2 = await mp().listUploads({
        bucket,
        maxUploads: 10,
        keyMarker: page1.nextKeyMarker!,
        uploadIdMarker: page1.nextUploadIdMarker!,
      });
      expect(page2.uploads.map((u) => u.uploadId)).toEqual(ids.slice(1));
    });

    it("sweeps uploads older than the configured age, with their parts", async (ctx) => {
      // The suite must move the backend's clock and start a sweep; a store that ages uploads
      // out by its own lifecycle rules cannot offer either.
      if (!fx.clock || !fx.sweepAbandoned) return ctx.skip();
      const old = await create(5, "old");
      await mp().uploadPart(
        { bucket, key: "old", uploadId: old, partNumber: 1, body: verifiedBody("old part") },
        fencedCommit(5),
      );
      fx.clock.advance(MULTIPART_MAX_AGE_MS - 15_000);
      const young = await create(5);
      await part(young, 1, Buffer.from("young part"));

      fx.clock.advance(10_000); // old: limit - 5 s, young: 10 s
      expect(await fx.sweepAbandoned()).toEqual({ removed: 0 });
      fx.clock.advance(10_000); // old: limit + 5 s
      expect(await fx.sweepAbandoned()).toEqual({ removed: 1 });
      await expect(mp().getUpload({ bucket, key: "old", uploadId: old })).rejects.toMatchObject({
        code: "NoSuchUpload",
      });
      expect((await mp().listUploads({ bucket, maxUploads: 10 })).uploads.map((u) => u.uploadId)).toEqual([
        young,
      ]);
      await expectNoLeftovers();
      await expectStoredParts(1);
    });

    it("keeps uploads and their parts across a restart", async (ctx) => {
      // A fixture that cannot open its backend again on the same state has no reopen.
      if (!fx.reopen) return ctx.skip();
      const uploadId = await create(5);
      const { a, b, parts } = await twoParts(uploadId);
      backend = await fx.reopen();
      const listed = await listedParts(uploadId);
      expect(listed.map((p) => p.etag)).toEqual(parts.map((p) => p.etag));
      await complete(uploadId, parts);
      expect((await content()).equals(Buffer.concat([a, b]))).toBe(true);
    });

    it("records nothing and leaves nothing behind when a part body fails", async () => {
      const uploadId = await create(5);
      const error = new Error("chunk signature mismatch");
      await expect(
        mp().uploadPart(
          { bucket, key: KEY, uploadId, partNumber: 1, body: failingVerifiedBody("partial", error) },
          fencedCommit(5),
        ),
      ).rejects.toBe(error);
      expect(await listedParts(uploadId)).toEqual([]);
      await expectNoLeftovers();
      await expectStoredParts(0);
    });

    it("races completions against newer writes: the newer token always wins, nothing is torn", async () => {
      for (let round = 0; round < 10; round++) {
        const older = 10 * round + 5;
        const uploadId = await create(older);
        const p = await part(uploadId, 1, Buffer.from(`multipart ${round}`), older);
        const results = await Promise.allSettled([
          complete(uploadId, [{ partNumber: 1, etag: p.etag }], older),
          put(`newer ${round}`, older + 1),
        ]);
        expect(results[1].status).toBe("fulfilled");
        if (results[0].status === "rejected") expect(results[0].reason).toBeInstanceOf(StaleTokenError);
        // Whichever committed first, the newer write is what remains.
        expect((await content()).toString()).toBe(`newer ${round}`);
        expect(await backend.highestToken(bucket, KEY)).toBe(older + 1);
        if (results[0].status === "rejected") await mp().abortUpload({ bucket, key: KEY, uploadId });
      }
      await expectNoLeftovers();
      await expectStoredParts(0);
    });

    it("refuses calls after close", async () => {
      const uploadId = await create(5);
      await backend.close();
      await expect(mp().getUpload({ bucket, key: KEY, uploadId })).rejects.toMatchObject({
        code: "ServiceUnavailable",
      });
      await expect(mp().listUploads({ bucket, maxUploads: 10 })).rejects.toMatchObject({
        code: "ServiceUnavailable",
      });
    });
  });
}
