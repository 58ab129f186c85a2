/**
 * The guards S3 requests meet (keys under the meta prefix refused and never listed) are the
 * gateway's view of the store, not the store's: the audit archive, which keeps its segments as
 * objects under `.fencegate/audit/` of a bucket, goes on working through the unguarded view the
 * gateway gives it (src/server/components.ts), on S3 as before.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RoutedBackend } from "../../src/backends/routing/routed-backend.js";
import { createS3Backend, type S3Backend } from "../../src/backends/s3/index.js";
import { createBackendArchiveStore } from "../../src/server/backend-archive-store.js";
import { backendOptions, startStore } from "../backends/s3/s3-fixture.js";
import type { TestGateway } from "../support/gateway.js";

describe("the audit archive on S3, below the guards of S3 requests", () => {
  let store: TestGateway;
  let s3: S3Backend;

  beforeAll(async () => {
    store = await startStore();
    s3 = createS3Backend(backendOptions(store.url));
    await s3.createBucket("archive");
  }, 30_000);

  afterAll(async () => {
    await s3?.close();
    await store?.stop();
  });

  it("writes, lists, reads and removes its segments through the internal view; S3 requests reach none of them", async () => {
    const routes = new Map();
    const internal = new RoutedBackend({ routes, fallback: s3, systemBucket: "fencegate-system" });
    const requests = new RoutedBackend({
      routes,
      fallback: s3,
      systemBucket: "fencegate-system",
      guardMeta: true,
    });
    const archive = createBackendArchiveStore({ backend: internal, bucket: "archive" });
    await archive.put("audit-1.jsonl", Buffer.from('{"seq":1}\n'));
    await archive.put("audit-2.jsonl", Buffer.from('{"seq":2}\n'));
    expect((await archive.list()).sort()).toEqual(["audit-1.jsonl", "audit-2.jsonl"]);
    expect((await archive.get("audit-2.jsonl")).toString()).toBe('{"seq":2}\n');
    await archive.remove("audit-1.jsonl");
    expect(await archive.list()).toEqual(["audit-2.jsonl"]);

    const seen = await requests.listObjects({ bucket: "archive", maxKeys: 100 });
    expect(seen.objects).toEqual([]);
    await expect(requests.getObject("archive", ".fencegate/audit/audit-2.jsonl")).rejects.toMatchObject({
      code: "InvalidObjectName",
      details: { reason: "reserved-prefix" },
    });
    await expect(
      createBackendArchiveStore({ backend: requests, bucket: "archive" }).put("x.jsonl", Buffer.from("x")),
    ).rejects.toMatchObject({ code: "InvalidObjectName" });
  });
});
