import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import { checkLeaseApiResponses } from "../support/openapi-recorder.js";
import { parsePrometheusText, sampleValue } from "../support/prom-text.js";
import { expectS3Error, objectPath, presign, rawRequest, signedRequest } from "../support/signed-http.js";
import { sleep, waitFor } from "../support/wait.js";
import {
  api,
  filesUnder,
  getBody,
  listKeys,
  makeBucket,
  openTransaction,
  putIn,
  untilExpired,
} from "./support.js";

checkLeaseApiResponses();

/**
 * Fenced transactions on the embedded default (filesystem backend, embedded lease store and
 * audit log in one database): writes staged under a lease are invisible until the commit, which
 * makes all of them visible in one step, or none.
 */

let gw: TestGateway;
const bucket = "tx-jobs";

beforeAll(async () => {
  gw = await startTestGateway();
  await makeBucket(gw, bucket);
});

afterAll(async () => {
  await gw?.stop();
});

const blobFiles = () => filesUnder(join(gw.dataDir, "blobs"));

describe("a transaction on the embedded default", () => {
  it("stages writes invisibly and commits them all in one step", async () => {
    const lease = await gw.leases.acquire({ bucket, prefix: "job1/", ttlMs: 30_000 });
    const tx = await openTransaction(gw, lease.leaseId);
    expect(tx).toMatchObject({ leaseId: lease.leaseId, token: lease.token, bucket });
    expect(tx.transactionId).toMatch(/^tx-[0-9a-f]{32}$/);

    const big = "b".repeat(200_000); // a blob file, not an inline row
    for (const [key, body] of [
      ["job1/part-1", "one"],
      ["job1/part-2", big],
      ["job1/_SUCCESS", ""],
    ] as const) {
      const res = await putIn(gw, lease, tx.transactionId, bucket, key, body);
      expect(res.status, res.text).toBe(200);
    }
    // Invisible to GET, HEAD and listings until the commit.
    expect(await getBody(gw, bucket, "job1/part-1")).toBeNull();
    const head = await signedRequest(gw.url, { method: "HEAD", path: objectPath(bucket, "job1/part-2") });
    expect(head.status).toBe(404);
    expect(await listKeys(gw, bucket)).toEqual([]);

    const state = await api(gw, "GET", `/transactions/${tx.transactionId}`);
    expect(state.status).toBe(200);
    expect(state.json).toMatchObject({ state: "open", transactionId: tx.transactionId });
    expect((state.json.objects as { key: string }[]).map((o) => o.key)).toEqual([
      "job1/part-1",
      "job1/part-2",
      "job1/_SUCCESS",
    ]);

    const committed = await api(gw, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(committed.status, committed.text).toBe(200);
    expect(committed.json).toMatchObject({ transactionId: tx.transactionId, token: lease.token });
    expect(committed.json.objects).toEqual([
      { key: "job1/part-1", etag: expect.stringMatching(/^"[0-9a-f]{32}"$/) },
      { key: "job1/part-2", etag: expect.stringMatching(/^"[0-9a-f]{32}"$/) },
      { key: "job1/_SUCCESS", etag: '"d41d8cd98f00b204e9800998ecf8427e"' },
    ]);
    expect(await getBody(gw, bucket, "job1/part-1")).toBe("one");
    expect(await getBody(gw, bucket, "job1/part-2")).toBe(big);
    expect((await listKeys(gw, bucket)).sort()).toEqual(["job1/_SUCCESS", "job1/part-1", "job1/part-2"]);

    // A repeated commit answers the same; the state says committed.
    const again = await api(gw, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(again.status).toBe(200);
    expect(again.json).toEqual(committed.json);
    expect((await api(gw, "GET", `/transactions/${tx.transactionId}`)).json).toMatchObject({
      state: "committed",
    });
    // Committed: it takes no more writes, and cannot be aborted.
    const late = await putIn(gw, lease, tx.transactionId, bucket, "job1/late", "x");
    expectS3Error(late, "TransactionCommitted", 409);
    expect((await api(gw, "DELETE", `/transactions/${tx.transactionId}`)).status).toBe(409);

    // The objects carry the lease's token as their HCT: an older token is refused.
    await gw.leases.release(lease.leaseId);
  });

  it("aborts: nothing becomes visible and the staged bytes are removed", async () => {
    const before = blobFiles();
    const lease = await gw.leases.acquire({ bucket, prefix: "job2/", ttlMs: 30_000 });
    const tx = await openTransaction(gw, lease.leaseId);
    expect((await putIn(gw, lease, tx.transactionId, bucket, "job2/a", "c".repeat(100_000))).status).toBe(
      200,
    );
    expect((await putIn(gw, lease, tx.transactionId, bucket, "job2/b", "small")).status).toBe(200);
    expect(blobFiles().length).toBe(before.length + 1);
    const aborted = await api(gw, "DELETE", `/transactions/${tx.transactionId}`);
    expect(aborted.status).toBe(204);
    expect(blobFiles()).toEqual(before);
    expect(await getBody(gw, bucket, "job2/a")).toBeNull();
    expect(await getBody(gw, bucket, "job2/b")).toBeNull();
    const state = await api(gw, "GET", `/transactions/${tx.transactionId}`);
    expect(state.json).toMatchObject({ state: "aborted", reason: "ClientAbort" });
    const commit = await api(gw, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(commit.status).toBe(409);
    expect((commit.json.error as { code: string }).code).toBe("TransactionAborted");
    await gw.leases.release(lease.leaseId);
  });

  it("a stale holder's transaction is refused whole once a newer lease wrote one of its keys", async () => {
    const stale = await gw.leases.acquire({ bucket, prefix: "job3/", ttlMs: 2_000 });
    const tx = await openTransaction(gw, stale.leaseId);
    expect((await putIn(gw, stale, tx.transactionId, bucket, "job3/a", "stale a")).status).toBe(200);
    expect((await putIn(gw, stale, tx.transactionId, bucket, "job3/b", "stale b")).status).toBe(200);
    // The holder pauses; its lease expires, a newer holder takes the prefix and writes one key.
    const newer = await gw.leases.acquire({ bucket, prefix: "job3/", ttlMs: 30_000, waitMs: 5_000 });
    expect(newer.token).toBeGreaterThan(stale.token);
    expect((await putIn(gw, newer, null, bucket, "job3/b", "newer b")).status).toBe(200);
    const commit = await api(gw, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(commit.status).toBe(409);
    expect(["StaleFencingToken", "LeaseExpired"]).toContain((commit.json.error as { code: string }).code);
    // Nothing of it is visible: a is absent, b is the newer holder's.
    expect(await getBody(gw, bucket, "job3/a")).toBeNull();
    expect(await getBody(gw, bucket, "job3/b")).toBe("newer b");
    expect((await api(gw, "GET", `/transactions/${tx.transactionId}`)).json).toMatchObject({
      state: "aborted",
    });
    await gw.leases.release(newer.leaseId);
  });

  it("a commit after the lease expired is refused and nothing becomes visible", async () => {
    const lease = await gw.leases.acquire({ bucket, prefix: "job9/", ttlMs: 2_000 });
    const tx = await openTransaction(gw, lease.leaseId);
    expect((await putIn(gw, lease, tx.transactionId, bucket, "job9/a", "late")).status).toBe(200);
    await untilExpired(lease);
    const commit = await api(gw, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(commit.status).toBe(409);
    expect((commit.json.error as { code: string }).code).toBe("LeaseExpired");
    expect(await getBody(gw, bucket, "job9/a")).toBeNull();
  });

  it("a commit after the sweep aborted the transaction of an expired lease is refused LeaseExpired too", async () => {
    const lease = await gw.leases.acquire({ bucket, prefix: "job10/", ttlMs: 1_000 });
    const tx = await openTransaction(gw, lease.leaseId);
    expect((await putIn(gw, lease, tx.transactionId, bucket, "job10/a", "late")).status).toBe(200);
    await untilExpired(lease);
    await waitFor(
      async () => (await api(gw, "GET", `/transactions/${tx.transactionId}`)).json.state === "aborted",
      { what: "the sweep aborting the transaction", timeoutMs: 10_000 },
    );
    const commit = await api(gw, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(commit.status).toBe(409);
    expect(commit.json.error).toMatchObject({ code: "LeaseExpired", transactionId: tx.transactionId });
    expect(await getBody(gw, bucket, "job10/a")).toBeNull();
  });

  it("a lease that ends aborts its open transaction", async () => {
    const before = blobFiles();
    const lease = await gw.leases.acquire({ bucket, prefix: "job4/", ttlMs: 30_000 });
    const tx = await openTransaction(gw, lease.leaseId);
    expect((await putIn(gw, lease, tx.transactionId, bucket, "job4/a", "d".repeat(100_000))).status).toBe(
      200,
    );
    await gw.leases.release(lease.leaseId);
    await waitFor(
      async () => (await api(gw, "GET", `/transactions/${tx.transactionId}`)).json.state === "aborted",
      { what: "the transaction aborted", timeoutMs: 5_000 },
    );
    expect(blobFiles()).toEqual(before);
    expect(await getBody(gw, bucket, "job4/a")).toBeNull();
  });

  it("refuses a write whose token is not the transaction's lease, and one in another bucket", async () => {
    await makeBucket(gw, "tx-other");
    const lease = await gw.leases.acquire({ bucket, prefix: "job5/", ttlMs: 30_000 });
    const other = await gw.leases.acquire({ bucket, prefix: "job6/", ttlMs: 30_000 });
    const tx = await openTransaction(gw, lease.leaseId);
    expectS3Error(
      await putIn(gw, other, tx.transactionId, bucket, "job6/x", "x"),
      "FencingTokenScopeMismatch",
      403,
    );
    const noToken = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "job5/x"),
      body: "x",
      headers: { "x-fence-transaction": tx.transactionId },
    });
    expect(noToken.status).toBe(428);
    expectS3Error(
      await putIn(gw, lease, "tx-00000000000000000000000000000000", bucket, "job5/x", "x"),
      "NoSuchTransaction",
      404,
    );
    const unknown = await api(gw, "GET", "/transactions/tx-00000000000000000000000000000000");
    expect(unknown.status).toBe(404);
    expect((unknown.json.error as { code: string }).code).toBe("TransactionNotFound");
    expect(await getBody(gw, bucket, "job6/x")).toBeNull();
    expect(await getBody(gw, bucket, "job5/x")).toBeNull();
    await gw.leases.release(lease.leaseId);
    await gw.leases.release(other.leaseId);
  });

  it("stages deletes and DeleteObjects, and the fence-transaction metadata is never stored", async () => {
    const lease = await gw.leases.acquire({ bucket, prefix: "job7/", ttlMs: 30_000 });
    for (const key of ["job7/old-1", "job7/old-2"]) {
      expect((await putIn(gw, lease, null, bucket, key, "old")).status).toBe(200);
    }
    const tx = await openTransaction(gw, lease.leaseId);
    const put = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "job7/new"),
      body: "new",
      headers: {
        "x-amz-meta-fence-token": lease.fencingToken,
        "x-amz-meta-fence-transaction": tx.transactionId,
      },
    });
    expect(put.status, put.text).toBe(200);
    const del = await signedRequest(gw.url, {
      method: "DELETE",
      path: objectPath(bucket, "job7/old-1"),
      headers: { "x-fence-token": lease.fencingToken, "x-fence-transaction": tx.transactionId },
    });
    expect(del.status).toBe(204);
    expect(await getBody(gw, bucket, "job7/old-1")).toBe("old");
    const committed = await api(gw, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(committed.status, committed.text).toBe(200);
    expect(committed.json.objects).toEqual([
      { key: "job7/new", etag: expect.any(String) },
      { key: "job7/old-1", deleted: true },
    ]);
    expect(await getBody(gw, bucket, "job7/old-1")).toBeNull();
    expect(await getBody(gw, bucket, "job7/old-2")).toBe("old");
    const head = await signedRequest(gw.url, { method: "HEAD", path: objectPath(bucket, "job7/new") });
    expect(head.status).toBe(200);
    expect(Object.keys(head.headers).filter((h) => h.startsWith("x-amz-meta-"))).toEqual([]);
    await gw.leases.release(lease.leaseId);
  });

  it("a read that carries the transaction sees its staged state; other reads do not", async () => {
    const lease = await gw.leases.acquire({ bucket, prefix: "job10/", ttlMs: 30_000 });
    expect((await putIn(gw, lease, null, bucket, "job10/gone", "old")).status).toBe(200);
    const tx = await openTransaction(gw, lease.leaseId);
    const inTx = { "x-fence-transaction": tx.transactionId };
    const big = "0123456789".repeat(20_000);
    expect((await putIn(gw, lease, tx.transactionId, bucket, "job10/new", big)).status).toBe(200);
    const del = await signedRequest(gw.url, {
      method: "DELETE",
      path: objectPath(bucket, "job10/gone"),
      headers: { "x-fence-token": lease.fencingToken, ...inTx },
    });
    expect(del.status).toBe(204);

    const got = await signedRequest(gw.url, {
      method: "GET",
      path: objectPath(bucket, "job10/new"),
      headers: inTx,
    });
    expect(got.status).toBe(200);
    expect(got.text).toBe(big);
    const ranged = await signedRequest(gw.url, {
      method: "GET",
      path: objectPath(bucket, "job10/new"),
      headers: { ...inTx, range: "bytes=10-19" },
    });
    expect(ranged.status).toBe(206);
    expect(ranged.text).toBe("0123456789");
    const head = await signedRequest(gw.url, {
      method: "HEAD",
      path: objectPath(bucket, "job10/new"),
      headers: inTx,
    });
    expect(head.status).toBe(200);
    expect(head.headers["content-length"]).toBe(String(big.length));
    const gone = await signedRequest(gw.url, {
      method: "GET",
      path: objectPath(bucket, "job10/gone"),
      headers: inTx,
    });
    expectS3Error(gone, "NoSuchKey", 404);
    // Outside the transaction: the state before it.
    expect(await getBody(gw, bucket, "job10/new")).toBeNull();
    expect(await getBody(gw, bucket, "job10/gone")).toBe("old");
    const unknown = await signedRequest(gw.url, {
      method: "GET",
      path: objectPath(bucket, "job10/new"),
      headers: { "x-fence-transaction": "tx-00000000000000000000000000000000" },
    });
    expectS3Error(unknown, "NoSuchTransaction", 404);
    expect((await api(gw, "POST", `/transactions/${tx.transactionId}/commit`)).status).toBe(200);
    // Committed: the same header now reads what everyone reads.
    const after = await signedRequest(gw.url, {
      method: "GET",
      path: objectPath(bucket, "job10/gone"),
      headers: inTx,
    });
    expect(after.status).toBe(404);
    expect(await getBody(gw, bucket, "job10/new")).toBe(big);
    await gw.leases.release(lease.leaseId);
  });

  it("stages a multipart upload created in the transaction (the header on Create only) and a copy", async () => {
    const lease = await gw.leases.acquire({ bucket, prefix: "job11/", ttlMs: 30_000 });
    expect((await putIn(gw, lease, null, bucket, "job11/source", "copied bytes")).status).toBe(200);
    const tx = await openTransaction(gw, lease.leaseId);
    const token = { "x-fence-token": lease.fencingToken };
    const created = await signedRequest(gw.url, {
      method: "POST",
      path: objectPath(bucket, "job11/big"),
      query: { uploads: "" },
      headers: { ...token, "x-fence-transaction": tx.transactionId },
    });
    expect(created.status, created.text).toBe(200);
    const uploadId = /<UploadId>([^<]+)<\/UploadId>/.exec(created.text)![1]!;
    const part = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "job11/big"),
      query: { uploadId, partNumber: "1" },
      body: "the only part",
      headers: token,
    });
    expect(part.status).toBe(200);
    const completed = await signedRequest(gw.url, {
      method: "POST",
      path: objectPath(bucket, "job11/big"),
      query: { uploadId },
      body: `<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>${part.headers.etag}</ETag></Part></CompleteMultipartUpload>`,
      headers: token,
    });
    expect(completed.status, completed.text).toBe(200);
    const copied = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "job11/copy"),
      headers: {
        ...token,
        "x-fence-transaction": tx.transactionId,
        "x-amz-copy-source": `/${bucket}/job11/source`,
      },
    });
    expect(copied.status, copied.text).toBe(200);
    expect(await getBody(gw, bucket, "job11/big")).toBeNull();
    expect(await getBody(gw, bucket, "job11/copy")).toBeNull();
    const commit = await api(gw, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(commit.status, commit.text).toBe(200);
    expect((commit.json.objects as { key: string }[]).map((o) => o.key)).toEqual(["job11/big", "job11/copy"]);
    expect(await getBody(gw, bucket, "job11/big")).toBe("the only part");
    expect(await getBody(gw, bucket, "job11/copy")).toBe("copied bytes");
    const uploads = await signedRequest(gw.url, {
      method: "GET",
      path: `/${bucket}`,
      query: { uploads: "" },
    });
    expect(uploads.text).not.toContain(uploadId);
    await gw.leases.release(lease.leaseId);
  });

  it("stages a write through a presigned URL that carries the token and the transaction", async () => {
    const lease = await gw.leases.acquire({ bucket, prefix: "job12/", ttlMs: 30_000 });
    const tx = await openTransaction(gw, lease.leaseId);
    const target = await presign(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "job12/presigned"),
      query: { "x-fence-token": lease.fencingToken, "x-fence-transaction": tx.transactionId },
    });
    const put = await rawRequest(gw.url, {
      method: "PUT",
      path: target,
      headers: { "content-length": "9" },
      body: "presigned",
    });
    expect(put.status, put.text).toBe(200);
    expect(await getBody(gw, bucket, "job12/presigned")).toBeNull();
    expect((await api(gw, "POST", `/transactions/${tx.transactionId}/commit`)).status).toBe(200);
    expect(await getBody(gw, bucket, "job12/presigned")).toBe("presigned");
    await gw.leases.release(lease.leaseId);
  });

  it("a write racing the commit is either in it (recorded, visible) or refused (no accepted record)", async () => {
    for (let round = 0; round < 5; round++) {
      const prefix = `race${round}/`;
      const lease = await gw.leases.acquire({ bucket, prefix, ttlMs: 30_000 });
      const tx = await openTransaction(gw, lease.leaseId);
      const keys = Array.from({ length: 40 }, (_, i) => `${prefix}k${i}`);
      const writes = keys.map(async (key, i) => {
        await sleep(i * 0.5);
        return [key, (await putIn(gw, lease, tx.transactionId, bucket, key, key)).status] as const;
      });
      await sleep(8);
      const commit = await api(gw, "POST", `/transactions/${tx.transactionId}/commit`);
      expect(commit.status, commit.text).toBe(200);
      const answered = await Promise.all(writes);
      const committed = (commit.json.objects as { key: string }[]).map((o) => o.key).sort();
      const accepted = answered
        .filter(([, status]) => status === 200)
        .map(([key]) => key)
        .sort();
      expect(accepted).toEqual(committed);
      for (const [key, status] of answered) {
        expect(await getBody(gw, bucket, key), key).toBe(status === 200 ? key : null);
      }
      const audit = await signedRequest(gw.url, {
        method: "GET",
        path: "/_fence/v1/audit",
        query: { transactionId: tx.transactionId, limit: "1000" },
      });
      const records = (JSON.parse(audit.text) as { records: Array<Record<string, unknown>> }).records;
      const recordedAccepted = records
        .filter((r) => r.op === "PutObject" && r.decision === "accepted")
        .map((r) => String(r.key))
        .sort();
      expect(recordedAccepted).toEqual(committed);
      expect(records.find((r) => r.op === "TransactionCommitted")?.keys).toEqual(
        (commit.json.objects as { key: string }[]).map((o) => o.key),
      );
      await gw.leases.release(lease.leaseId);
    }
  });

  it("holds small staged bodies in memory only within the budget of all open transactions", async () => {
    // Room for one small body (each counts the backend's largest in-memory body, 64 KiB).
    const small = await startTestGateway({ overrides: { transactions: { maxMemoryBytes: 70_000 } } });
    try {
      await makeBucket(small, bucket);
      const files = () => filesUnder(join(small.dataDir, "blobs")).length;
      const lease = await small.leases.acquire({ bucket, prefix: "mem/", ttlMs: 30_000 });
      const first = await openTransaction(small, lease.leaseId);
      const before = files();
      for (const key of ["mem/a", "mem/b", "mem/c"]) {
        expect((await putIn(small, lease, first.transactionId, bucket, key, "tiny")).status).toBe(200);
      }
      const afterFirst = files();
      expect(afterFirst).toBeGreaterThan(before);
      expect((await api(small, "POST", `/transactions/${first.transactionId}/commit`)).status).toBe(200);
      for (const key of ["mem/a", "mem/b", "mem/c"]) expect(await getBody(small, bucket, key)).toBe("tiny");
      // The committed transaction gave its share back: the next one holds a small body in memory again.
      const second = await openTransaction(small, lease.leaseId);
      const beforeSecond = files();
      expect((await putIn(small, lease, second.transactionId, bucket, "mem/d", "tiny")).status).toBe(200);
      expect(files()).toBe(beforeSecond);
      expect((await putIn(small, lease, second.transactionId, bucket, "mem/e", "tiny")).status).toBe(200);
      expect(files()).toBeGreaterThan(beforeSecond);
      expect((await api(small, "POST", `/transactions/${second.transactionId}/commit`)).status).toBe(200);
      expect(await getBody(small, bucket, "mem/d")).toBe("tiny");
      expect(await getBody(small, bucket, "mem/e")).toBe("tiny");
    } finally {
      await small.stop();
    }
  });

  it("records each staged write and the commit in the audit log, with the transaction id", async () => {
    const lease = await gw.leases.acquire({ bucket, prefix: "job8/", ttlMs: 30_000 });
    const tx = await openTransaction(gw, lease.leaseId);
    expect((await putIn(gw, lease, tx.transactionId, bucket, "job8/a", "a")).status).toBe(200);
    expect((await putIn(gw, lease, tx.transactionId, bucket, "job8/b", "b")).status).toBe(200);
    expect((await api(gw, "POST", `/transactions/${tx.transactionId}/commit`)).status).toBe(200);
    const audit = await signedRequest(gw.url, {
      method: "GET",
      path: "/_fence/v1/audit",
      query: { leaseId: lease.leaseId },
    });
    const records = (JSON.parse(audit.text) as { records: Array<Record<string, unknown>> }).records;
    const mine = records.filter((r) => r.transactionId === tx.transactionId);
    expect(mine.map((r) => [r.op, r.key, r.decision])).toEqual([
      ["PutObject", "job8/a", "accepted"],
      ["PutObject", "job8/b", "accepted"],
      ["TransactionCommitted", null, "accepted"],
    ]);
    expect(mine[2]!.keys).toEqual(["job8/a", "job8/b"]);
    await gw.leases.release(lease.leaseId);
  });
});

describe("metrics", () => {
  it("count the transactions ended by outcome, and the open ones", async () => {
    const lease = await gw.leases.acquire({ bucket, prefix: "metrics/", ttlMs: 30_000 });
    const open = await openTransaction(gw, lease.leaseId);
    const res = await fetch(`${gw.url}/_fence/v1/metrics`);
    const families = parsePrometheusText(await res.text());
    // The tests above committed, aborted and had commits refused.
    expect(
      sampleValue(families, "fencegate_transactions_total", { outcome: "committed" }),
    ).toBeGreaterThanOrEqual(5);
    expect(
      sampleValue(families, "fencegate_transactions_total", { outcome: "refused" }),
    ).toBeGreaterThanOrEqual(1);
    expect(
      sampleValue(families, "fencegate_transactions_total", { outcome: "aborted" }),
    ).toBeGreaterThanOrEqual(2);
    // This one at least (one whose lease ended is aborted by the next sweep, within a second).
    expect(sampleValue(families, "fencegate_transactions_open")).toBeGreaterThanOrEqual(1);
    expect((await api(gw, "DELETE", `/transactions/${open.transactionId}`)).status).toBe(204);
    await gw.leases.release(lease.leaseId);
  });
});
