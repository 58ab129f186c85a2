// The store round trips of a fenced PutObject on each remote backend, counted on the wire by the
// proxy between the gateway and the store (counts, never times): at most 2 for S3 when the
// gateway remembers the object's record (blob PUT, conditional record PUT) and 3 when it does not
// (the record's GET first); for Azure 1 (the conditional Put Blob that carries bytes and state)
// and 2 (its Get Blob Properties first). And a remembered state that another replica made stale
// costs a refused conditional write and a fresh read, never a wrong decision.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { HttpSeen } from "../../support/fault-proxy.js";
import type { TestGateway } from "../../support/gateway.js";
import { countRequests } from "../../support/request-counts.js";
import { sleep } from "../../support/wait.js";
import { createBucket, gatewayOn, newBucket, put, read } from "./fault-kit.js";
import { FAULTY_STORES, type FaultyStore } from "./faulty-store.js";

/** What a store request touched, by the backend's layout. */
function classify(store: FaultyStore, bucket: string): (e: HttpSeen) => string {
  return (e) => {
    if (store.name === "s3") {
      if (e.path.startsWith(`/${bucket}/.fencegate/r/`)) return "record";
      if (e.path.startsWith(`/${bucket}/.fencegate/d/`)) return "blob";
      if (e.path === `/${bucket}/.fencegate/deleted`) return "bucket-marker";
      if (e.path === `/${bucket}/` && e.query.startsWith("delete")) return "replaced-blobs";
      return `other ${e.path}?${e.query}`;
    }
    const comp = new URLSearchParams(e.query).get("comp");
    if (e.path.endsWith("/.fencegate/bucket")) return "bucket-marker";
    if (e.path.split("/").length === 3) return `container ${e.query}`;
    return comp ? `blob comp=${comp}` : "blob";
  };
}

/** The requests the gateway sent to the store while `run` ran (until its answer came). */
async function counted(store: FaultyStore, bucket: string, run: () => Promise<unknown>) {
  const from = store.proxy.seen.length;
  await run();
  // Replaced blobs are removed off the commit's path, later and together (asserted apart).
  const seen = store.proxy.seen.slice(from).filter((e) => classify(store, bucket)(e) !== "replaced-blobs");
  return countRequests(seen, 0, classify(store, bucket));
}

/**
 * The counts without the reads of the bucket's state (S3: its marker; Azure: the container's
 * properties and the marker), after checking there is at most one such read: they happen once a
 * second per bucket at most, not per write (BUCKET_STATE_TRUST_MS).
 */
function withoutBucketReads(n: { by: Record<string, number>; lines: string[] }): Record<string, number> {
  const { "GET bucket-marker": s3Marker = 0, "HEAD bucket-marker": azureMarker = 0, ...rest } = n.by;
  const { "GET container restype=container": container = 0, ...commit } = rest;
  expect(s3Marker + azureMarker, n.lines.join("\n")).toBeLessThanOrEqual(1);
  expect(container, n.lines.join("\n")).toBe(azureMarker);
  return commit;
}

/** A token from `gw` above `above` (its embedded lease store numbers its own leases). */
async function leaseAbove(gw: TestGateway, bucket: string, key: string, above: number) {
  for (;;) {
    const lease = await gw.leases.acquire({ bucket, key, ttlMs: 30_000 });
    if (lease.token > above) return lease;
    await gw.leases.release(lease.leaseId);
  }
}

describe.each(FAULTY_STORES)("store round trips of a fenced PutObject on $name", ({ start }) => {
  let store: FaultyStore;
  let gw: TestGateway;
  let other: TestGateway;

  beforeAll(async () => {
    store = await start();
    gw = await gatewayOn(store);
    other = await gatewayOn(store);
  }, 60_000);

  afterAll(async () => {
    await other?.stop();
    await gw?.stop();
    await store?.stop();
  });

  it("a remembered record: the blob and the conditional record write only (S3: 2; Azure: 1)", async () => {
    const bucket = newBucket(store);
    await createBucket(gw, bucket);
    const lease = await gw.leases.acquire({ bucket, key: "k", ttlMs: 30_000 });
    // The first write learns the store's capabilities (slow: over a second); the second the
    // bucket's state, trusted for a second (BUCKET_STATE_TRUST_MS): a write a second at most
    // reads it again.
    expect((await put(gw, bucket, "k", "v0", lease.fencingToken)).status).toBe(200);
    expect((await put(gw, bucket, "k", "v0", lease.fencingToken)).status).toBe(200);
    const started = performance.now();
    let bucketReads = 0;
    for (let i = 1; i <= 10; i++) {
      const n = await counted(store, bucket, async () => {
        expect((await put(gw, bucket, "k", `v${i}`, lease.fencingToken)).status).toBe(200);
      });
      // The bucket's state is read again once its last read is a second old (its own count).
      const commit = withoutBucketReads(n);
      bucketReads += n.by["GET bucket-marker"] ?? n.by["HEAD bucket-marker"] ?? 0;
      if (store.name === "s3") {
        expect(commit, n.lines.join("\n")).toEqual({ "PUT blob": 1, "PUT record": 1 });
      } else {
        expect(commit, n.lines.join("\n")).toEqual({ "PUT blob": 1 });
      }
    }
    // At most one read of the bucket's state per second of writes (and one to start with).
    expect(bucketReads).toBeLessThanOrEqual(1 + Math.floor((performance.now() - started) / 1000));
    expect(await read(gw, bucket, "k")).toBe("v10");
    if (store.name === "s3") {
      // The replaced blobs go later, together: a DeleteObjects a second at most, no DELETE each.
      await sleep(1_500);
      const removals = store.proxy.seen.filter((e) => classify(store, bucket)(e) === "replaced-blobs");
      expect(removals.length).toBeGreaterThanOrEqual(1);
      expect(removals.length).toBeLessThanOrEqual(2 + Math.floor((performance.now() - started) / 1000));
      expect(
        store.proxy.seen.filter(
          (e) => e.method === "DELETE" && e.path.startsWith(`/${bucket}/.fencegate/d/`),
        ),
      ).toEqual([]);
    }
  });

  it("a key the gateway has not seen: one read of its state first (S3: 3; Azure: 2)", async () => {
    const bucket = newBucket(store);
    await createBucket(gw, bucket);
    const warm = await gw.leases.acquire({ bucket, key: "warm", ttlMs: 30_000 });
    expect((await put(gw, bucket, "warm", "w", warm.fencingToken)).status).toBe(200);
    for (const key of ["a", "b", "c"]) {
      // Written by the other replica first: this gateway has never seen the key's state.
      const before = await other.leases.acquire({ bucket, key, ttlMs: 30_000 });
      expect((await put(other, bucket, key, "theirs", before.fencingToken)).status).toBe(200);
      await other.leases.release(before.leaseId);
      const mine = await leaseAbove(gw, bucket, key, before.token);
      // Keeps the bucket's state trusted (a read of it every second at most), as under load.
      expect((await put(gw, bucket, "warm", "w", warm.fencingToken)).status).toBe(200);
      const n = await counted(store, bucket, async () => {
        expect((await put(gw, bucket, key, `mine ${key}`, mine.fencingToken)).status).toBe(200);
      });
      const commit = withoutBucketReads(n);
      if (store.name === "s3") {
        expect(commit, n.lines.join("\n")).toEqual({ "GET record": 1, "PUT blob": 1, "PUT record": 1 });
      } else {
        expect(commit, n.lines.join("\n")).toEqual({ "HEAD blob": 1, "PUT blob": 1 });
      }
      expect(await read(gw, bucket, key)).toBe(`mine ${key}`);
    }
  });

  it("a remembered record made stale by another replica costs a retry, never a wrong decision", async () => {
    const bucket = newBucket(store);
    await createBucket(gw, bucket);
    const first = await gw.leases.acquire({ bucket, key: "k", ttlMs: 60_000 });
    expect((await put(gw, bucket, "k", "first", first.fencingToken)).status).toBe(200);
    // The other replica fences the key above `first` and writes: this gateway's record is stale.
    const theirs = await leaseAbove(other, bucket, "k", first.token);
    const written = await put(other, bucket, "k", "theirs", theirs.fencingToken);
    expect(written.status).toBe(200);

    // The stale token is refused, although the remembered record still shows its own HCT.
    const stale = await put(gw, bucket, "k", "stale", first.fencingToken);
    expect(stale.status).toBe(409);
    expect(stale.code).toBe("StaleFencingToken");
    expect(await read(other, bucket, "k")).toBe("theirs");

    // Write conditions are decided on the stored state, not on the remembered one. The other
    // replica writes again (the HCT stays its token): this gateway's record is stale once more.
    await gw.leases.release(first.leaseId);
    const newer = await leaseAbove(gw, bucket, "k", theirs.token);
    const oldEtag = (await fetchEtag(gw, bucket, "k"))!;
    expect((await put(other, bucket, "k", "theirs again", theirs.fencingToken)).status).toBe(200);
    const etag = (await fetchEtag(other, bucket, "k"))!;
    expect(etag).not.toBe(oldEtag);
    const noneMatch = await put(gw, bucket, "k", "never", newer.fencingToken, { "if-none-match": "*" });
    expect(noneMatch.status).toBe(412);
    const oldMatch = await put(gw, bucket, "k", "never", newer.fencingToken, { "if-match": oldEtag });
    expect(oldMatch.status).toBe(412);
    expect((await put(other, bucket, "k", "theirs last", theirs.fencingToken)).status).toBe(200);
    const lastEtag = (await fetchEtag(other, bucket, "k"))!;
    // The remembered record says "theirs again": If-Match on the stored ETag must still hold.
    const ifMatch = await put(gw, bucket, "k", "mine", newer.fencingToken, { "if-match": lastEtag });
    expect(ifMatch.status, ifMatch.text).toBe(200);
    expect(await read(other, bucket, "k")).toBe("mine");
  });
});

async function fetchEtag(gw: TestGateway, bucket: string, key: string): Promise<string | undefined> {
  const { signedRequest, objectPath } = await import("../../support/signed-http.js");
  const res = await signedRequest(gw.url, { method: "HEAD", path: objectPath(bucket, key) });
  const v = res.headers.etag;
  return Array.isArray(v) ? v[0] : v;
}
