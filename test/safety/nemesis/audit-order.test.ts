/**
 * Found by the nemesis run (a replica stopped between a write's commit and its audit record): with
 * a remote store, a write's record is appended after its commit, so a replica that pauses in
 * between records its write after the writes that came later on other replicas. The store's order
 * is right (the later lease's grant fenced the object first, and its write landed over the earlier
 * one), but the audit log lists the writes of the object with their tokens going backwards, while
 * the contract says its records are in commit order.
 *
 * The minimal form, on each remote store: two gateways on one store and one Redis lease store and audit log (through
 * the Redis fault proxy); the first write's "accepted" record is held in the network (as a paused
 * replica would hold it) until the key's next lease has been granted on the other gateway and its
 * write recorded.
 */
import { describe, expect, it } from "vitest";
import type { RedisFaultProxy } from "../../support/redis-fault-proxy.js";
import { requireTools } from "../../support/tools.js";
import { sleep } from "../../support/wait.js";
import { createBucket, newBucket, put, read } from "../faults/fault-kit.js";
import { FAULTY_STORES } from "../faults/faulty-store.js";
import { acceptedWrites, replicaPair } from "./replica-pair.js";

requireTools("redis-server");

describe.each(FAULTY_STORES)("a write recorded late by a paused gateway, on $name", ({ start }) => {
  const pair = replicaPair(start, "shared");

  it("is listed in the audit log in the order of the commits", async () => {
    const { a, b, store } = pair;
    const [proxy] = pair.proxies as [RedisFaultProxy];
    const bucket = newBucket(store);
    await createBucket(a, bucket);
    const first = await a.leases.acquire({ bucket, key: "k", ttlMs: 1_000 });
    // Gateway A's record of its accepted write waits in the network after the commit.
    const held = proxy.on(
      { command: "EVALSHA", args: (x) => x.includes("PutObject") && x.includes("accepted") },
      { kind: "hold" },
    );
    const writing = put(a, bucket, "k", "first", first.fencingToken);
    const ended = await Promise.race([held.reached.then(() => null), writing]);
    expect(ended, "the first write ended before its record was sent").toBeNull();
    expect(await read(b, bucket, "k")).toBe("first");
    // A's lease ends; B is granted the key (fencing A's commit intent first) and writes over it.
    await sleep(1_100);
    const second = await b.leases.acquire({ bucket, key: "k", ttlMs: 30_000 });
    expect((await put(b, bucket, "k", "second", second.fencingToken)).status).toBe(200);
    expect(await read(a, bucket, "k")).toBe("second");
    held.release();
    expect((await writing).status).toBe(200);

    const accepted = await acceptedWrites(a, bucket, "k");
    // The store's order: first, then second (its content). The log's order must be the same.
    expect(
      accepted.map((r) => ({ seq: r.seq, token: r.token, gateway: r.gateway })),
      "the accepted writes of k in the audit log's order",
    ).toEqual([
      expect.objectContaining({ token: first.token, gateway: "gw-a" }),
      expect.objectContaining({ token: second.token, gateway: "gw-b" }),
    ]);
  }, 30_000);
});
