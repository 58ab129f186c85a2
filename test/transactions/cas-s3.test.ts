import { GetObjectCommand, HeadObjectCommand } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHttpFaultProxy } from "../support/fault-proxy.js";
import type { TestGateway } from "../support/gateway.js";
import { objectPath, signedRequest } from "../support/signed-http.js";
import { requireTools } from "../support/tools.js";
import { waitFor } from "../support/wait.js";
import { type CasWorld, startCasWorld } from "./cas-support.js";
import { api, getBody, listKeys, makeBucket, openTransaction, putIn, untilExpired } from "./support.js";
import { checkHistory, runHistory } from "./visibility-history.js";

/**
 * Fenced transactions on the S3 backend (compare-and-swap): the transaction's record in the
 * store is the commit point, each key's record carries the staged write as a pending one, and
 * any replica may stage, commit, abort or resolve a transaction.
 */

requireTools("redis-server");

let world: CasWorld;
let a: TestGateway;
let b: TestGateway;
const bucket = "tx-cas";

beforeAll(async () => {
  world = await startCasWorld();
  a = await world.replica();
  b = await world.replica();
  await makeBucket(a, bucket);
}, 60_000);

afterAll(async () => {
  await world?.stop();
});

/** A transaction's record as the store holds it (`<m>t/<id>`), read around the gateways. */
async function storedTransaction(id: string): Promise<Record<string, unknown>> {
  const raw = world.store.s3();
  try {
    const got = await raw.send(new GetObjectCommand({ Bucket: bucket, Key: `.fencegate/t/${id}` }));
    return JSON.parse(await got.Body!.transformToString()) as Record<string, unknown>;
  } finally {
    raw.destroy();
  }
}

/** A key's record as the store holds it. */
async function storedRecord(key: string): Promise<Record<string, unknown>> {
  const raw = world.store.s3();
  try {
    const got = await raw.send(new GetObjectCommand({ Bucket: bucket, Key: `.fencegate/r/${key}` }));
    return JSON.parse(await got.Body!.transformToString()) as Record<string, unknown>;
  } finally {
    raw.destroy();
  }
}

async function storedExists(name: string): Promise<boolean> {
  const raw = world.store.s3();
  try {
    await raw.send(new HeadObjectCommand({ Bucket: bucket, Key: name }));
    return true;
  } catch {
    return false;
  } finally {
    raw.destroy();
  }
}

describe("transactions on the S3 backend", () => {
  it("opens on one replica, stages on two, commits on the other; invisible until the commit", async () => {
    const lease = await a.leases.acquire({ bucket, prefix: "a/", ttlMs: 30_000 });
    const tx = await openTransaction(a, lease.leaseId);
    expect(tx.transactionId).toMatch(/^tx-[0-9a-f]{32}-tx-cas$/);
    expect((await putIn(a, lease, tx.transactionId, bucket, "a/1", "one")).status).toBe(200);
    expect((await putIn(b, lease, tx.transactionId, bucket, "a/2", "two")).status).toBe(200);
    for (const gw of [a, b]) {
      expect(await getBody(gw, bucket, "a/1")).toBeNull();
      expect(await getBody(gw, bucket, "a/2")).toBeNull();
      expect(await listKeys(gw, bucket)).toEqual([]);
      const head = await signedRequest(gw.url, { method: "HEAD", path: objectPath(bucket, "a/2") });
      expect(head.status).toBe(404);
    }
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
    const again = await api(a, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(again.status).toBe(200);
    expect(again.json).toEqual(commit.json);
    expect((await api(a, "GET", `/transactions/${tx.transactionId}`)).json.state).toBe("committed");
    await a.leases.release(lease.leaseId);
  });

  it("takes 300 writes staged at once by 16 clients on one replica: their joins share the record's writes", async () => {
    const lease = await a.leases.acquire({ bucket, prefix: "many/", ttlMs: 60_000 });
    const tx = await openTransaction(a, lease.leaseId);
    const keys = Array.from({ length: 300 }, (_, i) => `many/k${i}`);
    let next = 0;
    const statuses: number[] = [];
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (next < keys.length) {
          const key = keys[next++]!;
          statuses.push((await putIn(a, lease, tx.transactionId, bucket, key, key)).status);
        }
      }),
    );
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
    const commit = await api(a, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(commit.status, commit.text).toBe(200);
    expect((commit.json.objects as { key: string }[]).map((o) => o.key).sort()).toEqual([...keys].sort());
    expect(await getBody(b, bucket, "many/k299")).toBe("many/k299");
    await a.leases.release(lease.leaseId);
  }, 120_000);

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
    expect((await storedTransaction(tx.transactionId)).state).toBe("aborted");
    const commit = await api(a, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(commit.status).toBe(409);
    expect(await getBody(a, bucket, "b/1")).toBe("new-1");
    expect(await getBody(b, bucket, "b/2")).toBeNull();
    expect((await api(b, "GET", `/transactions/${tx.transactionId}`)).json.state).toBe("aborted");
    // The next holder writes the other key too: nothing of the old transaction is in its way.
    expect((await putIn(b, next, null, bucket, "b/2", "new-2")).status).toBe(200);
    expect(await getBody(a, bucket, "b/2")).toBe("new-2");
    await b.leases.release(next.leaseId);
  });

  it("aborts a transaction whose lease ended before the commit", async () => {
    // Long enough for the staged write on a busy machine; the commit comes after its expiry.
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

  it("aborts on request: nothing visible, the keys writable", async () => {
    const lease = await a.leases.acquire({ bucket, prefix: "d/", ttlMs: 30_000 });
    const tx = await openTransaction(a, lease.leaseId);
    expect((await putIn(a, lease, tx.transactionId, bucket, "d/1", "x")).status).toBe(200);
    const staged = `.fencegate/d/${((await storedRecord("d/1")).p as { live: { blob: string } }).live.blob}`;
    expect(await storedExists(staged)).toBe(true);
    const abort = await api(b, "DELETE", `/transactions/${tx.transactionId}`);
    expect(abort.status).toBe(204);
    // Its pending write dropped, its staged bytes removed (a moment later, with others).
    expect((await storedRecord("d/1")).p).toBeUndefined();
    await waitFor(async () => ((await storedExists(staged)) ? null : true), {
      what: "the staged blob's removal",
      timeoutMs: 5_000,
    });
    expect(await getBody(a, bucket, "d/1")).toBeNull();
    expect((await api(a, "POST", `/transactions/${tx.transactionId}/commit`)).status).toBe(409);
    expect((await putIn(a, lease, null, bucket, "d/1", "y")).status).toBe(200);
    expect(await getBody(b, bucket, "d/1")).toBe("y");
    await a.leases.release(lease.leaseId);
  });

  it("keeps the visibility rule under concurrent readers, stale writers and single writes", async () => {
    await makeBucket(a, "tx-cas-visible");
    const history = await runHistory({
      url: a.url,
      leases: a.leases,
      bucket: "tx-cas-visible",
      keys: ["set/part-0", "set/part-1", "set/manifest"],
      durationMs: 10_000,
      writers: 3,
      readers: 3,
      // Each staged write is a few store round trips: a lease long enough for most commits.
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
    const proxy = await startHttpFaultProxy(world.store.url);
    const c = await world.replica(proxy.url);
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
      // It did land: every replica sees it, and the commit asked again answers 200.
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

  it("loses the commit point of a commit paused after its intents once a newer grant fences its keys", async () => {
    const proxy = await startHttpFaultProxy(world.store.url);
    const c = await world.replica(proxy.url);
    try {
      const lease = await c.leases.acquire({ bucket, prefix: "p/", ttlMs: 2_000 });
      const tx = await openTransaction(c, lease.leaseId);
      expect((await putIn(c, lease, tx.transactionId, bucket, "p/1", "old-1")).status).toBe(200);
      expect((await putIn(c, lease, tx.transactionId, bucket, "p/2", "old-2")).status).toBe(200);
      // The commit point is held on its way to the store, after the intents were recorded.
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

  it("never shows a write whose key could not join the record before the commit", async () => {
    const proxy = await startHttpFaultProxy(world.store.url);
    const c = await world.replica(proxy.url);
    try {
      const lease = await a.leases.acquire({ bucket, prefix: "j/", ttlMs: 30_000 });
      const tx = await openTransaction(a, lease.leaseId);
      expect((await putIn(a, lease, tx.transactionId, bucket, "j/1", "one")).status).toBe(200);
      // j/2 is staged in its record through C; the record's update that adds it is held...
      const joining = proxy.on({ method: "PUT", path: /\/\.fencegate\/t\// }, { kind: "hold" });
      const late = putIn(c, lease, tx.transactionId, bucket, "j/2", "two");
      await joining.reached;
      // ... while the transaction commits without it.
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

  it("refuses the commit of a transaction staged in a bucket deleted since", async () => {
    await makeBucket(a, "tx-cas-gone");
    const lease = await a.leases.acquire({ bucket: "tx-cas-gone", prefix: "", ttlMs: 30_000 });
    const tx = await openTransaction(a, lease.leaseId);
    expect((await putIn(a, lease, tx.transactionId, "tx-cas-gone", "k", "staged")).status).toBe(200);
    const deleted = await signedRequest(b.url, { method: "DELETE", path: "/tx-cas-gone" });
    expect(deleted.status, deleted.text).toBe(204);
    const commit = await api(a, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(commit.status, commit.text).toBe(404);
    expect(commit.text).toContain("NoSuchBucket");
    expect((await api(b, "GET", `/transactions/${tx.transactionId}`)).json.state).toBe("aborted");
    await makeBucket(a, "tx-cas-gone");
    expect(await getBody(a, "tx-cas-gone", "k")).toBeNull();
    await a.leases.release(lease.leaseId);
  }, 30_000);

  it("aborts a transaction whose commit is in flight when its bucket is deleted", async () => {
    const proxy = await startHttpFaultProxy(world.store.url);
    const c = await world.replica(proxy.url);
    try {
      await makeBucket(a, "tx-cas-race");
      const lease = await c.leases.acquire({ bucket: "tx-cas-race", prefix: "", ttlMs: 30_000 });
      const tx = await openTransaction(c, lease.leaseId);
      expect((await putIn(c, lease, tx.transactionId, "tx-cas-race", "k", "staged")).status).toBe(200);
      // The commit point is held after the intents and the bucket's check...
      const point = proxy.on({ method: "PUT", path: /\/\.fencegate\/t\// }, { kind: "hold" });
      const commit = api(c, "POST", `/transactions/${tx.transactionId}/commit`);
      await point.reached;
      // ... while the bucket is deleted: the deletion touches the keys with intents.
      const deleted = await signedRequest(a.url, { method: "DELETE", path: "/tx-cas-race" });
      point.release();
      const answer = await commit;
      expect(deleted.status, deleted.text).toBe(204);
      expect(answer.status, answer.text).toBe(409);
      expect((await api(b, "GET", `/transactions/${tx.transactionId}`)).json.state).toBe("aborted");
      await c.leases.release(lease.leaseId);
    } finally {
      await proxy.close();
    }
  }, 60_000);

  it("stages the completion of a multipart upload whose Create alone carried the transaction, on another replica", async () => {
    const lease = await a.leases.acquire({ bucket, prefix: "mp/", ttlMs: 60_000 });
    const tx = await openTransaction(a, lease.leaseId);
    const token = { "x-fence-token": lease.fencingToken! };
    const created = await signedRequest(a.url, {
      method: "POST",
      path: objectPath(bucket, "mp/big"),
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
        path: objectPath(bucket, "mp/big"),
        query: { uploadId, partNumber: String(n) },
        body,
        headers: token,
      });
      expect(part.status, part.text).toBe(200);
      parts.push(`<Part><PartNumber>${n}</PartNumber><ETag>${part.headers.etag}</ETag></Part>`);
    }
    // As aws cli and boto3 send it: the Complete carries the token but not the transaction.
    const completed = await signedRequest(b.url, {
      method: "POST",
      path: objectPath(bucket, "mp/big"),
      query: { uploadId },
      body: `<CompleteMultipartUpload>${parts.join("")}</CompleteMultipartUpload>`,
      headers: token,
    });
    expect(completed.status, completed.text).toBe(200);
    expect(await getBody(a, bucket, "mp/big")).toBeNull();
    expect(await getBody(b, bucket, "mp/big")).toBeNull();
    const shown = await api(b, "GET", `/transactions/${tx.transactionId}`);
    expect(JSON.stringify(shown.json)).toContain("mp/big");
    const commit = await api(b, "POST", `/transactions/${tx.transactionId}/commit`);
    expect(commit.status, commit.text).toBe(200);
    const big = await getBody(a, bucket, "mp/big");
    expect(big?.length).toBe(5 * 1024 * 1024 + "the last part".length);
    expect(big?.endsWith("the last part")).toBe(true);
    await a.leases.release(lease.leaseId);
  }, 60_000);

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
    expect((await putIn(b, lease, tx.transactionId, bucket, "e/2", "new-2")).status).toBe(200);
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
    ]);
    expect(await getBody(b, bucket, "e/1")).toBeNull();
    expect(await getBody(b, bucket, "e/2")).toBe("new-2");
    expect((await listKeys(b, bucket)).filter((k) => k.startsWith("e/"))).toEqual(["e/2"]);
    await a.leases.release(lease.leaseId);
  });
});
