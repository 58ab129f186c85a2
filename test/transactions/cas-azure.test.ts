import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAzureBackend } from "../../src/backends/azure/index.js";
import { abortTransaction } from "../../src/fence/commit-driver.js";
import { startHttpFaultProxy } from "../support/fault-proxy.js";
import type { TestGateway } from "../support/gateway.js";
import { parsePrometheusText, sampleValue } from "../support/prom-text.js";
import { objectPath, signedRequest } from "../support/signed-http.js";
import { requireTools } from "../support/tools.js";
import { waitFor } from "../support/wait.js";
import {
  type AzureCasWorld,
  blobExists,
  blobState,
  stagingBlobs,
  startAzureCasWorld,
  storedTransaction,
} from "./cas-azure-support.js";
import { api, getBody, listKeys, makeBucket, openTransaction, putIn, untilExpired } from "./support.js";
import { checkHistory, runHistory } from "./visibility-history.js";

/**
 * Fenced transactions on the Azure backend (compare-and-swap, as on S3): the transaction's record
 * blob is the commit point, each key's blob state carries the staged write as a pending one that
 * names a staging blob, and any replica may stage, commit, abort or resolve a transaction. The
 * roll-forward copies the staging blob onto the object's blob server-side, conditionally.
 */

requireTools("redis-server");

let world: AzureCasWorld;
let a: TestGateway;
let b: TestGateway;
const bucket = "tx-azure";

beforeAll(async () => {
  world = await startAzureCasWorld();
  a = await world.replica();
  b = await world.replica();
  await makeBucket(a, bucket);
}, 60_000);

afterAll(async () => {
  await world?.stop();
});

const state = (key: string) => blobState(world.direct, bucket, key);
const pendingOf = async (key: string) => (await state(key))?.p as { b?: string; tx: string } | undefined;

describe("transactions on the Azure backend", () => {
  it("opens on one replica, stages on two, commits on the other; invisible until the commit", async () => {
    const lease = await a.leases.acquire({ bucket, prefix: "a/", ttlMs: 30_000 });
    const tx = await openTransaction(a, lease.leaseId);
    expect(tx.transactionId).toMatch(/^tx-[0-9a-f]{32}-tx-azure$/);
    expect((await putIn(a, lease, tx.transactionId, bucket, "a/1", "one")).status).toBe(200);
    expect((await putIn(b, lease, tx.transactionId, bucket, "a/2", "two")).status).toBe(200);
    for (const gw of [a, b]) {
      expect(await getBody(gw, bucket, "a/1")).toBeNull();
      expect(await getBody(gw, bucket, "a/2")).toBeNull();
      expect(await listKeys(gw, bucket)).toEqual([]);
      const head = await signedRequest(gw.url, { method: "HEAD", path: objectPath(bucket, "a/2") });
      expect(head.status).toBe(404);
    }
    // The staged bytes are in a staging blob that the key's state names.
    const staged = (await pendingOf("a/1"))!.b!;
    expect(staged).toMatch(/^\.fencegate\/tx\//);
    expect(await blobExists(world.direct, bucket, staged)).toBe(true);
    // A read that carries the transaction sees its staged writes, on either replica.
    const inside = await signedRequest(b.url, {
      method: "GET",
      path: objectPath(bucket, "a/1"),
      headers: { "x-fence-transaction": tx.transactionId },
    });
    expect(inside.status).toBe(200);
    expect(inside.text).toBe("one");
    const open = await api(a, "GET", `/transactions/${tx.transactionId}`);
    expect(open.json.state).toBe("open");
    expect((open.json.objects as { key: string }[]).map((o) => o.key)).toEqual(["a/1", "a/2"]);

    const commit = await api(b, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(commit.status, commit.text).toBe(200);
    for (const gw of [a, b]) {
      expect(await getBody(gw, bucket, "a/1")).toBe("one");
      expect(await getBody(gw, bucket, "a/2")).toBe("two");
      expect(await listKeys(gw, bucket)).toEqual(["a/1", "a/2"]);
    }
    // Rolled forward: the object's blob holds the bytes, the staging blob is gone.
    const rolled = await state("a/1");
    expect(rolled?.p).toBeUndefined();
    expect(rolled?.hct).toBe(lease.token);
    expect(await blobExists(world.direct, bucket, staged)).toBe(false);
    const again = await api(a, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(again.status).toBe(200);
    expect(again.json).toEqual(commit.json);
    expect((await api(a, "GET", `/transactions/${tx.transactionId}`)).json.state).toBe("committed");
    await a.leases.release(lease.leaseId);
  });

  it("refuses a write of the same lease outside the transaction to a key it staged", async () => {
    const lease = await a.leases.acquire({ bucket, prefix: "s/", ttlMs: 30_000 });
    const tx = await openTransaction(a, lease.leaseId);
    expect((await putIn(a, lease, tx.transactionId, bucket, "s/1", "in")).status).toBe(200);
    const outside = await putIn(b, lease, null, bucket, "s/1", "out");
    expect(outside.status).toBe(409);
    expect(outside.text).toContain("OperationAborted");
    expect((await api(b, "POST", `/transactions/${tx.transactionId}/commit`)).status).toBe(200);
    expect(await getBody(a, bucket, "s/1")).toBe("in");
    await a.leases.release(lease.leaseId);
  });

  it("refuses a stale holder whole once the new holder wrote any key", async () => {
    const old = await a.leases.acquire({ bucket, prefix: "b/", ttlMs: 2_000 });
    const tx = await openTransaction(a, old.leaseId);
    expect((await putIn(a, old, tx.transactionId, bucket, "b/1", "old-1")).status).toBe(200);
    expect((await putIn(a, old, tx.transactionId, bucket, "b/2", "old-2")).status).toBe(200);
    await untilExpired(old);
    const next = await b.leases.acquire({ bucket, prefix: "b/", ttlMs: 30_000 });
    expect((await putIn(b, next, null, bucket, "b/1", "new-1")).status).toBe(200);
    // That write aborted the old transaction in its record, before anything asked it to commit.
    expect((await storedTransaction(world.direct, bucket, tx.transactionId)).state).toBe("aborted");
    const commit = await api(a, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(commit.status).toBe(409);
    expect(await getBody(a, bucket, "b/1")).toBe("new-1");
    expect(await getBody(b, bucket, "b/2")).toBeNull();
    expect((await api(b, "GET", `/transactions/${tx.transactionId}`)).json.state).toBe("aborted");
    expect((await putIn(b, next, null, bucket, "b/2", "new-2")).status).toBe(200);
    expect(await getBody(a, bucket, "b/2")).toBe("new-2");
    await b.leases.release(next.leaseId);
  });

  it("aborts a transaction whose lease ended before the commit", async () => {
    const lease = await a.leases.acquire({ bucket, prefix: "c/", ttlMs: 2_000 });
    const tx = await openTransaction(a, lease.leaseId);
    expect((await putIn(a, lease, tx.transactionId, bucket, "c/1", "x")).status).toBe(200);
    await untilExpired(lease);
    const commit = await api(b, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(commit.status).toBe(409);
    expect((commit.json.error as { code: string }).code).toBe("LeaseExpired");
    expect(await getBody(a, bucket, "c/1")).toBeNull();
    expect((await api(a, "GET", `/transactions/${tx.transactionId}`)).json.state).toBe("aborted");
    // Asked again, now that it is aborted: the same refusal.
    const again = await api(a, "POST", `/transactions/${tx.transactionId}/commit`);
    expect({ status: again.status, code: (again.json.error as { code: string }).code }).toEqual({
      status: 409,
      code: "LeaseExpired",
    });
  });

  it("aborts on request: nothing visible, the staged bytes removed, the keys writable", async () => {
    const lease = await a.leases.acquire({ bucket, prefix: "d/", ttlMs: 30_000 });
    const tx = await openTransaction(a, lease.leaseId);
    expect((await putIn(a, lease, tx.transactionId, bucket, "d/1", "x")).status).toBe(200);
    const staged = (await pendingOf("d/1"))!.b!;
    expect(await blobExists(world.direct, bucket, staged)).toBe(true);
    const abort = await api(b, "DELETE", `/transactions/${tx.transactionId}`);
    expect(abort.status).toBe(204);
    expect(await pendingOf("d/1")).toBeUndefined();
    await waitFor(async () => ((await blobExists(world.direct, bucket, staged)) ? null : true), {
      what: "the staging blob's removal",
      timeoutMs: 5_000,
    });
    expect(await getBody(a, bucket, "d/1")).toBeNull();
    expect((await api(a, "POST", `/transactions/${tx.transactionId}/commit`)).status).toBe(409);
    expect((await putIn(a, lease, null, bucket, "d/1", "y")).status).toBe(200);
    expect(await getBody(b, bucket, "d/1")).toBe("y");
    await a.leases.release(lease.leaseId);
  });

  it("stages deletes and replaces: old versions visible until the commit, the staged state inside", async () => {
    const lease = await a.leases.acquire({ bucket, prefix: "e/", ttlMs: 30_000 });
    expect((await putIn(a, lease, null, bucket, "e/1", "old-1")).status).toBe(200);
    expect((await putIn(a, lease, null, bucket, "e/2", "old-2")).status).toBe(200);
    const tx = await openTransaction(a, lease.leaseId);
    const del = await signedRequest(b.url, {
      method: "DELETE",
      path: objectPath(bucket, "e/1"),
      headers: { "x-fence-token": lease.fencingToken!, "x-fence-transaction": tx.transactionId },
    });
    expect(del.status, del.text).toBe(204);
    expect(
      (await putIn(b, lease, tx.transactionId, bucket, "e/2", "new-2", { "content-type": "text/x-new" }))
        .status,
    ).toBe(200);
    expect((await putIn(b, lease, tx.transactionId, bucket, "e/3", "")).status).toBe(200);
    expect(await getBody(a, bucket, "e/1")).toBe("old-1");
    expect(await getBody(a, bucket, "e/2")).toBe("old-2");
    const inside = { "x-fence-transaction": tx.transactionId };
    expect(
      (await signedRequest(a.url, { method: "GET", path: objectPath(bucket, "e/1"), headers: inside }))
        .status,
    ).toBe(404);
    const head = await signedRequest(a.url, {
      method: "HEAD",
      path: objectPath(bucket, "e/2"),
      headers: inside,
    });
    expect(head.status).toBe(200);
    expect(head.headers["content-length"]).toBe("5");
    const commit = await api(a, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(commit.status, commit.text).toBe(200);
    expect(commit.json.objects).toEqual([
      { key: "e/1", deleted: true },
      { key: "e/2", etag: expect.any(String) },
      { key: "e/3", etag: '"d41d8cd98f00b204e9800998ecf8427e"' },
    ]);
    expect(await getBody(b, bucket, "e/3")).toBe("");
    expect(await getBody(b, bucket, "e/1")).toBeNull();
    expect(await getBody(b, bucket, "e/2")).toBe("new-2");
    const after = await signedRequest(b.url, { method: "HEAD", path: objectPath(bucket, "e/2") });
    expect(after.headers["content-type"]).toBe("text/x-new");
    expect(after.headers.etag).toBe((commit.json.objects as { etag?: string }[])[1]!.etag);
    expect((await listKeys(b, bucket)).filter((k) => k.startsWith("e/"))).toEqual(["e/2", "e/3"]);
    await a.leases.release(lease.leaseId);
  });

  it("stages a large body in blocks and a multipart upload created in the transaction", async () => {
    const lease = await a.leases.acquire({ bucket, prefix: "m/", ttlMs: 60_000 });
    const tx = await openTransaction(a, lease.leaseId);
    const token = { "x-fence-token": lease.fencingToken! };
    // Beyond one block (4 MiB): staged block by block in its staging blob.
    const large = "0123456789abcdef".repeat(320 * 1024);
    expect((await putIn(a, lease, tx.transactionId, bucket, "m/large", large)).status).toBe(200);
    const created = await signedRequest(a.url, {
      method: "POST",
      path: objectPath(bucket, "m/big"),
      query: { uploads: "" },
      headers: { ...token, "x-fence-transaction": tx.transactionId },
    });
    expect(created.status, created.text).toBe(200);
    const uploadId = /<UploadId>([^<]+)<\/UploadId>/.exec(created.text)![1]!;
    const parts: string[] = [];
    for (const [n, body] of [
      [1, "p".repeat(5 * 1024 * 1024)],
      [2, "the last part"],
    ] as const) {
      const part = await signedRequest(b.url, {
        method: "PUT",
        path: objectPath(bucket, "m/big"),
        query: { uploadId, partNumber: String(n) },
        body,
        headers: token,
      });
      expect(part.status, part.text).toBe(200);
      parts.push(`<Part><PartNumber>${n}</PartNumber><ETag>${part.headers.etag}</ETag></Part>`);
    }
    const completed = await signedRequest(b.url, {
      method: "POST",
      path: objectPath(bucket, "m/big"),
      query: { uploadId },
      body: `<CompleteMultipartUpload>${parts.join("")}</CompleteMultipartUpload>`,
      headers: token,
    });
    expect(completed.status, completed.text).toBe(200);
    expect((await getBody(a, bucket, "m/big"))?.length ?? null).toBeNull();
    expect((await getBody(a, bucket, "m/large"))?.length ?? null).toBeNull();
    expect((await pendingOf("m/big"))?.tx).toBe(tx.transactionId);
    const commit = await api(a, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(commit.status, commit.text).toBe(200);
    expect((commit.json.objects as { key: string }[]).map((o) => o.key)).toEqual(["m/large", "m/big"]);
    expect((await getBody(b, bucket, "m/large")) === large).toBe(true);
    const big = await getBody(b, bucket, "m/big");
    expect(big?.length).toBe(5 * 1024 * 1024 + "the last part".length);
    expect(big?.endsWith("the last part")).toBe(true);
    expect(await stagingBlobs(world.direct, bucket)).toEqual([]);
    await a.leases.release(lease.leaseId);
  }, 60_000);

  it("leaves no staging blob behind for a staged write refused by its body's digest or by its ended transaction", async () => {
    const lease = await a.leases.acquire({ bucket, prefix: "w/", ttlMs: 30_000 });
    const tx = await openTransaction(a, lease.leaseId);
    const before = await stagingBlobs(world.direct, bucket);
    // Refused while the body is read (its Content-MD5 does not match).
    const wrong = createHash("md5").update("other").digest("base64");
    const res = await putIn(a, lease, tx.transactionId, bucket, "w/1", "the body", { "content-md5": wrong });
    expect(res.status, res.text).toBe(400);
    expect(res.text).toContain("BadDigest");
    expect(await stagingBlobs(world.direct, bucket)).toEqual(before);
    expect(await state("w/1")).toBeNull();
    expect((await api(a, "DELETE", `/transactions/${tx.transactionId}`)).status).toBe(204);
    // Refused once its bytes were staged: the transaction is found ended when the write is staged.
    const late = await putIn(b, lease, tx.transactionId, bucket, "w/1", "the body");
    expect(late.status, late.text).toBe(409);
    expect(late.text).toContain("TransactionAborted");
    expect(await stagingBlobs(world.direct, bucket)).toEqual(before);
    await a.leases.release(lease.leaseId);
  });

  it("keeps the staged bytes of open and committed transactions from the collector, collects aborted ones", async () => {
    const backend = createAzureBackend({
      connectionString: world.azurite.connectionString,
      multipartSweepIntervalMs: 0,
    });
    try {
      const lease = await a.leases.acquire({ bucket, prefix: "g/", ttlMs: 30_000 });
      const tx = await openTransaction(a, lease.leaseId);
      expect((await putIn(a, lease, tx.transactionId, bucket, "g/1", "staged")).status).toBe(200);
      const staged = (await pendingOf("g/1"))!.b!;
      // A staging blob that no key names (its gateway died before the key's state named it).
      const orphan = `${staged.slice(0, staged.lastIndexOf("/"))}/orphan`;
      await world.direct.getContainerClient(bucket).getBlockBlobClient(orphan).upload("x", 1);
      await backend.collectStaging({ graceMs: 0, buckets: [bucket] });
      expect(await blobExists(world.direct, bucket, staged)).toBe(true);
      expect(await blobExists(world.direct, bucket, orphan)).toBe(true);
      // Aborted by its record alone (a crashed aborter): the pending write is still in the key's state.
      expect(await abortTransaction(backend.transactionLog(bucket), tx.transactionId, "Test")).toBe(
        "aborted",
      );
      expect(await pendingOf("g/1")).toBeDefined();
      await backend.collectStaging({ graceMs: 0, buckets: [bucket] });
      expect(await blobExists(world.direct, bucket, staged)).toBe(false);
      expect(await blobExists(world.direct, bucket, orphan)).toBe(false);
      expect(await pendingOf("g/1")).toBeUndefined();
      expect(await getBody(a, bucket, "g/1")).toBeNull();
      await a.leases.release(lease.leaseId);
    } finally {
      await backend.close();
    }
  }, 60_000);

  it("refuses the commit of a transaction staged in a bucket deleted since", async () => {
    await makeBucket(a, "tx-azure-gone");
    const lease = await a.leases.acquire({ bucket: "tx-azure-gone", prefix: "", ttlMs: 30_000 });
    const tx = await openTransaction(a, lease.leaseId);
    expect((await putIn(a, lease, tx.transactionId, "tx-azure-gone", "k", "staged")).status).toBe(200);
    const deleted = await signedRequest(b.url, { method: "DELETE", path: "/tx-azure-gone" });
    expect(deleted.status, deleted.text).toBe(204);
    const commit = await api(a, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(commit.status, commit.text).toBe(404);
    expect(commit.text).toContain("NoSuchBucket");
    expect((await api(b, "GET", `/transactions/${tx.transactionId}`)).json.state).toBe("aborted");
    await makeBucket(a, "tx-azure-gone");
    expect(await getBody(a, "tx-azure-gone", "k")).toBeNull();
    await a.leases.release(lease.leaseId);
  }, 30_000);

  it("loses the commit point of a commit paused after its intents once a newer grant fences its keys", async () => {
    const proxy = await startHttpFaultProxy(`http://127.0.0.1:${world.azurite.port}`);
    const c = await world.replica(Number(new URL(proxy.url).port));
    try {
      const lease = await c.leases.acquire({ bucket, prefix: "p/", ttlMs: 2_000 });
      const tx = await openTransaction(c, lease.leaseId);
      expect((await putIn(c, lease, tx.transactionId, bucket, "p/1", "old-1")).status).toBe(200);
      expect((await putIn(c, lease, tx.transactionId, bucket, "p/2", "old-2")).status).toBe(200);
      const point = proxy.on({ method: "PUT", path: /\/\.fencegate\/t\// }, { kind: "hold" });
      const commit = api(c, "POST", `/transactions/${tx.transactionId}/commit`);
      await point.reached;
      await untilExpired(lease);
      // The newer grant raises the HCT of the keys with intents of the ended lease: that aborts it.
      const next = await a.leases.acquire({ bucket, prefix: "p/", ttlMs: 30_000, waitMs: 10_000 });
      point.release();
      const answer = await commit;
      expect(answer.status, answer.text).toBe(409);
      expect((await api(a, "GET", `/transactions/${tx.transactionId}`)).json.state).toBe("aborted");
      expect(await getBody(a, bucket, "p/1")).toBeNull();
      expect(await getBody(b, bucket, "p/2")).toBeNull();
      expect((await putIn(a, next, null, bucket, "p/2", "new-2")).status).toBe(200);
      await a.leases.release(next.leaseId);
    } finally {
      await proxy.close();
    }
  }, 60_000);

  it("keeps the visibility rule under concurrent readers, stale writers and single writes", async () => {
    await makeBucket(a, "tx-azure-visible");
    const history = await runHistory({
      url: a.url,
      leases: a.leases,
      bucket: "tx-azure-visible",
      keys: ["set/part-0", "set/part-1", "set/manifest"],
      durationMs: 10_000,
      writers: 3,
      readers: 3,
      ttlMs: 1_000,
      // On a busy machine fewer commits happen in the same time: go on (up to 40 s) until these.
      minCommitted: 3,
      minRefused: 1,
    });
    expect(history.commits.filter((c) => c.outcome === "committed").length).toBeGreaterThanOrEqual(3);
    expect(history.commits.filter((c) => c.outcome === "refused").length).toBeGreaterThanOrEqual(1);
    expect(checkHistory(history)).toEqual([]);
  }, 90_000);

  it("answers a commit point whose answer was lost as unknown, then committed, never refused", async () => {
    const proxy = await startHttpFaultProxy(`http://127.0.0.1:${world.azurite.port}`);
    const c = await world.replica(Number(new URL(proxy.url).port));
    try {
      const lease = await c.leases.acquire({ bucket, prefix: "u/", ttlMs: 60_000 });
      const tx = await openTransaction(c, lease.leaseId);
      expect((await putIn(c, lease, tx.transactionId, bucket, "u/1", "one")).status).toBe(200);
      expect((await putIn(c, lease, tx.transactionId, bucket, "u/2", "two")).status).toBe(200);
      // The commit point reaches the store, its answer does not; nor does any read of the record after it.
      const point = proxy.on({ method: "PUT", path: /\/\.fencegate\/t\// }, { kind: "drop-answer" });
      void point.reached.then(() =>
        proxy.on(
          { method: "GET", path: /\/\.fencegate\/t\// },
          { kind: "reset" },
          { times: Number.POSITIVE_INFINITY },
        ),
      );
      const lost = await api(c, "POST", `/transactions/${tx.transactionId}/commit`);
      expect(lost.status, lost.text).toBe(503);
      expect(lost.headers["x-fence-outcome"], lost.text).toBe("unknown");
      proxy.clear();
      expect((await api(a, "GET", `/transactions/${tx.transactionId}`)).json.state).toBe("committed");
      expect(await getBody(a, bucket, "u/1")).toBe("one");
      expect(await getBody(b, bucket, "u/2")).toBe("two");
      const again = await api(c, "POST", `/transactions/${tx.transactionId}/commit`);
      expect(again.status, again.text).toBe(200);
      expect((again.json.objects as { key: string }[]).map((o) => o.key)).toEqual(["u/1", "u/2"]);
      await c.leases.release(lease.leaseId);
    } finally {
      await proxy.close();
    }
  }, 60_000);

  it("never shows a write whose key could not join the record before the commit", async () => {
    const proxy = await startHttpFaultProxy(`http://127.0.0.1:${world.azurite.port}`);
    const c = await world.replica(Number(new URL(proxy.url).port));
    try {
      const lease = await a.leases.acquire({ bucket, prefix: "j/", ttlMs: 30_000 });
      const tx = await openTransaction(a, lease.leaseId);
      expect((await putIn(a, lease, tx.transactionId, bucket, "j/1", "one")).status).toBe(200);
      const joining = proxy.on({ method: "PUT", path: /\/\.fencegate\/t\// }, { kind: "hold" });
      const late = putIn(c, lease, tx.transactionId, bucket, "j/2", "two");
      await joining.reached;
      const commit = await api(a, "POST", `/transactions/${tx.transactionId}/commit`);
      expect(commit.status, commit.text).toBe(200);
      joining.release();
      const refused = await late;
      expect(refused.status, refused.text).toBe(409);
      expect((commit.json.objects as { key: string }[]).map((o) => o.key)).toEqual(["j/1"]);
      expect(await getBody(a, bucket, "j/1")).toBe("one");
      expect(await getBody(b, bucket, "j/2")).toBeNull();
      expect(await listKeys(b, bucket)).not.toContain("j/2");
      await a.leases.release(lease.leaseId);
    } finally {
      await proxy.close();
    }
  }, 60_000);

  it("counts the transactions this gateway opened and ended, and holds it to transactions.maxOpen", async () => {
    const d = await world.replica(undefined, { transactions: { maxOpen: 1 } });
    const metric = async (name: string, labels?: Record<string, string>) =>
      sampleValue(
        parsePrometheusText(await (await fetch(`${d.url}/_fence/v1/metrics`)).text()),
        name,
        labels,
      ) ?? 0;
    const lease = await d.leases.acquire({ bucket, prefix: "n/", ttlMs: 30_000 });
    const first = await openTransaction(d, lease.leaseId);
    expect(await metric("fencegate_transactions_open")).toBe(1);
    const refused = await api(d, "POST", `/leases/${lease.leaseId}/transactions`, {});
    expect(refused.status, refused.text).toBe(503);
    expect(refused.text).toContain("SlowDown");
    expect((await putIn(d, lease, first.transactionId, bucket, "n/1", "one")).status).toBe(200);
    expect((await api(d, "POST", `/transactions/${first.transactionId}/commit`)).status).toBe(200);
    expect(await metric("fencegate_transactions_open")).toBe(0);
    expect(await metric("fencegate_transactions_total", { outcome: "committed" })).toBe(1);
    const second = await openTransaction(d, lease.leaseId);
    expect((await api(d, "DELETE", `/transactions/${second.transactionId}`)).status).toBe(204);
    expect(await metric("fencegate_transactions_total", { outcome: "aborted" })).toBe(1);
    // One ended by another replica is forgotten by the next sweep (each second).
    const third = await openTransaction(d, lease.leaseId);
    expect((await api(a, "DELETE", `/transactions/${third.transactionId}`)).status).toBe(204);
    await waitFor(async () => ((await metric("fencegate_transactions_open")) === 0 ? true : null), {
      what: "the sweep",
      timeoutMs: 10_000,
    });
    expect((await openTransaction(d, lease.leaseId)).transactionId).toMatch(/^tx-/);
    await d.leases.release(lease.leaseId);
  }, 60_000);
});
