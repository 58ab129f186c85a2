import { readdirSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import { CreateBucketCommand, HeadObjectCommand, ListBucketsCommand } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import { objectPath, signRequest } from "../support/signed-http.js";

let gw: TestGateway;

beforeAll(async () => {
  gw = await startTestGateway();
  await gw.s3().send(new CreateBucketCommand({ Bucket: "aborts" }));
});

afterAll(async () => {
  await gw?.stop();
});

it("survives clients that hang up mid-upload, stores nothing and leaves no temporary file", async () => {
  const lease = await gw.leases.acquire({ bucket: "aborts", key: "half", ttlMs: 60_000 });
  const url = new URL(gw.url);
  for (let i = 0; i < 5; i++) {
    const signed = await signRequest(gw.url, {
      method: "PUT",
      path: objectPath("aborts", "half"),
      payloadHash: "UNSIGNED-PAYLOAD",
      headers: { "content-length": String(1024 * 1024), "x-fence-token": lease.fencingToken },
    });
    await new Promise<void>((resolve) => {
      const socket = connect(Number(url.port), url.hostname, () => {
        const head = [`PUT ${signed.path} HTTP/1.1`];
        for (const [k, v] of Object.entries(signed.headers as Record<string, string>))
          head.push(`${k}: ${v}`);
        socket.write(`${head.join("\r\n")}\r\n\r\n`);
        socket.write(Buffer.alloc(100 * 1024, 1), () => setTimeout(() => socket.destroy(), 50));
      });
      socket.on("close", () => resolve());
      socket.on("error", () => undefined);
    });
  }
  // The gateway notices the hang-up, abandons each write and keeps serving.
  await expect.poll(() => readdirSync(join(gw.dataDir, "blobs", "tmp")).length, { timeout: 5_000 }).toBe(0);
  const head = await gw
    .s3()
    .send(new HeadObjectCommand({ Bucket: "aborts", Key: "half" }))
    .catch((e) => e);
  expect(head.$metadata.httpStatusCode).toBe(404);
  const buckets = await gw.s3().send(new ListBucketsCommand({}));
  expect(buckets.Buckets?.map((b) => b.Name)).toContain("aborts");
  const refused = (await gw.leases.audit({ bucket: "aborts", key: "half", decision: "rejected" })).records;
  expect(refused).toHaveLength(5);
});
