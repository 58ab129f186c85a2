import { describe, expect, it } from "vitest";
import type { AuditDraft } from "../../../src/audit/audit-log.js";
import { createMemoryBackend, type MemoryBackend } from "../../../src/backends/memory/index.js";
import type { FencedCommit } from "../../../src/backends/storage-backend.js";
import { fakeClock } from "../../../src/core/clock.js";
import { DomainError } from "../../../src/core/errors.js";
import { MemoryDomain } from "../../../src/core/tx.js";
import { fencedCommit } from "../../../src/fence/commit.js";
import { bodyOf, md5Etag, metadataOf, readAll, verifiedBody } from "../../support/bodies.js";
import { describeMultipartContract, MULTIPART_MAX_AGE_MS } from "../multipart.contract.js";
import { describeStorageBackendContract } from "../storage-backend.contract.js";

// No reopen: the memory backend keeps nothing across a restart, so the restart cases skip.
// No leftovers: nothing lives outside the backend's maps to leak.
describeStorageBackendContract("memory", async () => {
  const backend = createMemoryBackend();
  return { backend, cleanup: () => backend.close() };
});

describeMultipartContract("memory", async () => {
  const clock = fakeClock();
  const backend = createMemoryBackend({ clock, multipartMaxAgeMs: MULTIPART_MAX_AGE_MS });
  return {
    backend,
    clock,
    sweepAbandoned: () => backend.multipart.sweepAbandoned(),
    storedParts: async () => backend.multipart.storedParts(),
    cleanup: () => backend.close(),
  };
});

describe("memory backend", () => {
  const BUCKET = "bucket";

  const draft = (op: string, key: string, token: number | null, highestToken: number | null): AuditDraft => ({
    op,
    bucket: BUCKET,
    key,
    prefix: null,
    token,
    leaseId: null,
    owner: null,
    principal: null,
    decision: "accepted",
    reason: null,
    highestToken,
    requestId: null,
  });

  /**
   * Another component on the backend's domain: it keeps the records appended in a step, and
   * registers with the domain how to take each back, as a component sharing the step must.
   */
  const recorder = (domain: MemoryDomain) => {
    const records: AuditDraft[] = [];
    return {
      records,
      appendInStep(record: AuditDraft) {
        records.push(record);
        domain.changed(() => records.pop());
      },
    };
  };

  const open = async (options: Parameters<typeof createMemoryBackend>[0] = {}) => {
    const backend = createMemoryBackend(options);
    await backend.createBucket(BUCKET);
    return backend;
  };

  const put = (
    backend: MemoryBackend,
    key: string,
    data: string | Buffer,
    token: number | null = null,
    commit: Partial<FencedCommit> = {},
  ) =>
    backend.putObject(
      { bucket: BUCKET, key, body: verifiedBody(data), metadata: metadataOf() },
      fencedCommit(token, commit),
    );

  const content = async (backend: MemoryBackend, key: string) =>
    (await readAll((await backend.getObject(BUCKET, key)).body)).toString();

  it("runs its steps in the domain it is given, or in one of its own", async () => {
    const domain = new MemoryDomain();
    expect(createMemoryBackend({ domain }).domain).toBe(domain);
    const own = createMemoryBackend();
    expect(own.domain).toBeInstanceOf(MemoryDomain);
    expect(own.domain).not.toBe(createMemoryBackend().domain);
  });

  it("takes back a change made inside its step when atomic throws after it", async () => {
    const domain = new MemoryDomain();
    const backend = await open({ domain });
    const audit = recorder(domain);
    await put(backend, "k", "old", 1);
    const refusal = new DomainError("LeaseExpired", "the lease ended inside the step");
    const atomic = ({ highestToken }: { highestToken: number | null }) => {
      audit.appendInStep(draft("PutObject", "k", 2, highestToken));
      throw refusal;
    };
    await expect(put(backend, "k", "new", 2, { atomic })).rejects.toBe(refusal);
    await expect(
      backend.deleteObject({ bucket: BUCKET, key: "k" }, fencedCommit(3, { atomic })),
    ).rejects.toBe(refusal);
    await expect(put(backend, "fresh", "x", 2, { atomic })).rejects.toBe(refusal);

    expect(audit.records).toEqual([]);
    expect(await content(backend, "k")).toBe("old");
    expect(await backend.highestToken(BUCKET, "k")).toBe(1);
    expect(await backend.highestToken(BUCKET, "fresh")).toBeNull();
    expect((await backend.listObjects({ bucket: BUCKET, maxKeys: 10 })).objects.map((o) => o.key)).toEqual([
      "k",
    ]);
  });

  it("commits its change and another component's record in one step of a shared domain", async () => {
    const domain = new MemoryDomain();
    const clock = fakeClock();
    const backend = await open({ domain, clock });
    const other = await open({ domain, clock });
    const audit = recorder(domain);
    const audited = (op: string, key: string, token: number) => ({
      atomic: ({ highestToken }: { highestToken: number | null }) => {
        audit.appendInStep(draft(op, key, token, highestToken));
      },
    });

    await put(backend, "k", "v1", 4, audited("PutObject", "k", 4));
    await backend.deleteObject(
      { bucket: BUCKET, key: "k" },
      fencedCommit(6, audited("DeleteObject", "k", 6)),
    );
    const uploadId = (
      await backend.multipart.createUpload(
        { bucket: BUCKET, key: "m", metadata: metadataOf(), token: 7, leaseId: "l", initiator: null },
        fencedCommit(7, audited("CreateMultipartUpload", "m", 7)),
      )
    ).uploadId;
    const part = await backend.multipart.uploadPart(
      { bucket: BUCKET, key: "m", uploadId, partNumber: 1, body: verifiedBody("part") },
      fencedCommit(7, audited("UploadPart", "m", 7)),
    );
    await backend.multipart.completeUpload(
      { bucket: BUCKET, key: "m", uploadId, parts: [{ partNumber: 1, etag: part.etag }] },
      fencedCommit(7, audited("CompleteMultipartUpload", "m", 7)),
    );

    expect(audit.records.map((r) => [r.op, r.highestToken])).toEqual([
      ["PutObject", 4],
      ["DeleteObject", 6],
      ["CreateMultipartUpload", null],
      ["UploadPart", null],
      ["CompleteMultipartUpload", 7],
    ]);
    // Sharing a domain shares the atomic steps, not the data.
    expect(await other.highestToken(BUCKET, "k")).toBeNull();
    await expect(other.headObject(BUCKET, "m")).rejects.toMatchObject({ code: "NoSuchKey" });
    expect(await content(backend, "m")).toBe("part");
  });

  it("leaves every map as it was when a step rolls back a completion", async () => {
    const domain = new MemoryDomain();
    const backend = await open({ domain });
    const audit = recorder(domain);
    await put(backend, "m", "before", 1);
    const ref = { bucket: BUCKET, key: "m" };
    const { uploadId } = await backend.multipart.createUpload(
      { ...ref, metadata: metadataOf(), token: 2, leaseId: null, initiator: null },
      fencedCommit(2),
    );
    const part = await backend.multipart.uploadPart(
      { ...ref, uploadId, partNumber: 1, body: verifiedBody("after") },
      fencedCommit(2),
    );
    const parts = [{ partNumber: 1, etag: part.etag }];
    const refusal = new Error("the audit log refused the record");
    const atomic = () => {
      audit.appendInStep(draft("CompleteMultipartUpload", "m", 2, 2));
      throw refusal;
    };
    await expect(
      backend.multipart.completeUpload({ ...ref, uploadId, parts }, fencedCommit(2, { atomic })),
    ).rejects.toBe(refusal);
    expect(await content(backend, "m")).toBe("before");
    expect(await backend.highestToken(BUCKET, "m")).toBe(1);
    expect((await backend.multipart.listParts({ ...ref, uploadId, maxParts: 10 })).parts).toHaveLength(1);
    expect(audit.records).toEqual([]);
    await backend.multipart.completeUpload({ ...ref, uploadId, parts }, fencedCommit(2));
    expect(await content(backend, "m")).toBe("after");
    expect(backend.multipart.storedParts()).toBe(0);
  });

  it("serves the version a GET found, even when an overwrite commits before its body is read", async () => {
    const backend = await open();
    const old = Buffer.alloc(300 * 1024, "a");
    await put(backend, "k", old, 1);
    const got = await backend.getObject(BUCKET, "k");
    const ranged = await backend.getObject(BUCKET, "k", { start: 10, end: 19 });
    await put(backend, "k", Buffer.alloc(300 * 1024, "b"), 2);
    await backend.deleteObject({ bucket: BUCKET, key: "k" }, fencedCommit(3));
    expect((await readAll(got.body)).equals(old)).toBe(true);
    expect(got.info.etag).toBe(md5Etag(old));
    expect((await readAll(ranged.body)).toString()).toBe("a".repeat(10));
  });

  it("keeps its own copy of bodies and metadata", async () => {
    const backend = await open();
    const chunk = Buffer.from("original");
    const metadata = metadataOf({ who: "writer" });
    await backend.putObject(
      {
        bucket: BUCKET,
        key: "k",
        body: { stream: bodyOf(chunk), digest: Promise.resolve({ size: 8, checksums: {} }) },
        metadata,
      },
      fencedCommit(null),
    );
    chunk.fill("x");
    metadata.userMetadata.who = "changed later";
    const head = await backend.headObject(BUCKET, "k");
    head.userMetadata.who = "changed by a reader";
    expect(await content(backend, "k")).toBe("original");
    expect((await backend.headObject(BUCKET, "k")).userMetadata).toEqual({ who: "writer" });
  });

  it("orders uploads created within one millisecond by initiation", async () => {
    const backend = await open({ clock: () => Date.UTC(2026, 10, 22) });
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) {
      const created = await backend.multipart.createUpload(
        { bucket: BUCKET, key: "same", metadata: metadataOf(), token: null, leaseId: null, initiator: null },
        fencedCommit(null),
      );
      expect(created.uploadId).toMatch(/^[0-9a-f]{44}$/);
      ids.push(created.uploadId);
    }
    const listed = await backend.multipart.listUploads({ bucket: BUCKET, maxUploads: 100 });
    expect(listed.uploads.map((u) => u.uploadId)).toEqual(ids);
  });

  it("keeps lastModified to the millisecond from the injected clock", async () => {
    const at = Date.UTC(2026, 10, 22, 12, 0, 0, 123);
    const backend = await open({ clock: () => at });
    const result = await put(backend, "k", "v");
    expect(result.lastModified.getTime()).toBe(at);
    expect((await backend.headObject(BUCKET, "k")).lastModified.getTime()).toBe(at);
    expect((await backend.headBucket(BUCKET)).creationDate.getTime()).toBe(at);
    const listed = await backend.listObjects({ bucket: BUCKET, maxKeys: 10 });
    expect(listed.objects[0]!.lastModified.getTime()).toBe(at);
  });

  it("raises HCTs of a bucket that does not exist, and keeps them for when it is created", async () => {
    const backend = createMemoryBackend();
    expect(await backend.raiseHighestToken("later", "k", 5)).toBe(5);
    await expect(backend.writeState("later", "k")).rejects.toMatchObject({ code: "NoSuchBucket" });
    await backend.createBucket("later");
    expect(await backend.writeState("later", "k")).toEqual({ highestToken: 5, etag: null });
    await expect(
      backend.putObject(
        { bucket: "later", key: "k", body: verifiedBody("stale"), metadata: metadataOf() },
        fencedCommit(4),
      ),
    ).rejects.toMatchObject({ code: "StaleFencingToken" });
  });

  it("refuses every call after close with ServiceUnavailable", async () => {
    const backend = await open();
    await put(backend, "k", "v", 1);
    await backend.close();
    const calls: Array<() => Promise<unknown>> = [
      () => backend.listBuckets(),
      () => backend.createBucket("another"),
      () => backend.headBucket(BUCKET),
      () => backend.deleteBucket(BUCKET),
      () => backend.writeState(BUCKET, "k"),
      () => put(backend, "k", "v2", 2),
      () => backend.deleteObject({ bucket: BUCKET, key: "k" }, fencedCommit(2)),
      () => backend.raiseHighestToken(BUCKET, "k", 2),
      () => backend.headObject(BUCKET, "k"),
      () => backend.getObject(BUCKET, "k"),
      () => backend.listObjects({ bucket: BUCKET, maxKeys: 1 }),
      () => backend.highestToken(BUCKET, "k"),
      () => backend.multipart.sweepAbandoned(),
    ];
    for (const call of calls) await expect(call()).rejects.toMatchObject({ code: "ServiceUnavailable" });
  });
});
